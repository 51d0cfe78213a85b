import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';

export function uploadLinkRoute(app: FastifyInstance, s: Services): void {
  const uploads = s.uploads;
  if (!uploads) return;
  app.post('/v1/templates/files/upload-link', { preHandler: guard(s.keys, 'templates:write') }, async (req) => {
    const org = principalOf(req).orgId;
    const body = (req.body ?? {}) as Record<string, unknown>;
    if (body.files !== undefined) return { upload_urls: await uploads.linksForFiles(org, body.files), request_id: req.id };
    if (body.files_hash !== undefined) return { ...(await uploads.linkForTarball(org, body.files_hash, body.content_length)), request_id: req.id };
    throw new ServiceError('INVALID_FILE_METADATA', 'send {files: [{path, size, hash}]} (or {files_hash, content_length})');
  });
}
