import type { FastifyInstance } from 'fastify';
import type { Readable } from 'node:stream';
import type { Services } from '../services.js';
import { MAX_UPLOAD_BYTES } from '../../services/uploads.js';

/** The presigned PUT: no API key (the URL is the credential); the body streams to the blob store. */
export async function uploadPutRoute(app: FastifyInstance, s: Services): Promise<void> {
  const uploads = s.uploads;
  if (!uploads) return;
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { bodyLimit: MAX_UPLOAD_BYTES + 1 }, (_req, payload, done) => done(null, payload));
    scope.put<{ Params: { token: string } }>('/v1/templates/files/upload/:token', { bodyLimit: MAX_UPLOAD_BYTES + 1 }, async (req) => {
      const len = req.headers['content-length'] === undefined ? undefined : Number(req.headers['content-length']);
      const res = await uploads.receive(req.params.token, (req.body ?? req.raw) as Readable, len);
      return { success: true, ...res, request_id: req.id };
    });
  });
}
