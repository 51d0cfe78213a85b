import type { FastifyInstance } from 'fastify';
import { CreateSandboxBody } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';

export function createSandboxRoute(app: FastifyInstance, s: Services): void {
  app.post<{ Body: CreateSandboxBody }>(
    '/v1/sandboxes',
    { schema: { body: CreateSandboxBody }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req, reply) => {
      // A client that goes away while its create waits for a sandbox abandons it: nothing is made for it.
      const gone = new AbortController();
      const onClose = () => {
        if (!reply.raw.writableFinished) gone.abort();
      };
      reply.raw.once('close', onClose);
      try {
        const { sandbox, token, tokenExpiresAt } = await s.sandboxes.create(principalOf(req).orgId, req.body ?? {}, { signal: gone.signal, keyId: principalOf(req).keyId });
        return reply.code(201).send({ ...sandbox, auth_token: token, token_expires_at: tokenExpiresAt.toISOString(), request_id: req.id });
      } finally {
        reply.raw.off('close', onClose);
      }
    },
  );
}
