import type { FastifyInstance } from 'fastify';
import { CreateSandboxBody } from '@sandboxd/protocol';
import type { Services } from '../../services/index.js';
import { guard, principalOf } from '../auth.js';

export function createSandboxRoute(app: FastifyInstance, s: Services): void {
  app.post<{ Body: CreateSandboxBody }>(
    '/v1/sandboxes',
    { schema: { body: CreateSandboxBody }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req, reply) => {
      const { sandbox, token, tokenExpiresAt } = await s.sandboxes.create(principalOf(req).orgId, req.body ?? {});
      return reply.code(201).send({ ...sandbox, auth_token: token, token_expires_at: tokenExpiresAt.toISOString(), request_id: req.id });
    },
  );
}
