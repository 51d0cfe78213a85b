import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

export function tokenRefreshRoute(app: FastifyInstance, s: Services): void {
  app.post<{ Params: SandboxIdParams }>(
    '/v1/sandboxes/:id/token/refresh',
    { schema: { params: SandboxIdParams }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req) => {
      const { token, expiresAt } = await s.sandboxes.refreshToken(principalOf(req).orgId, req.params.id, principalOf(req).keyId);
      s.sandboxes.touch(req.params.id);
      return { id: req.params.id, auth_token: token, token_expires_at: expiresAt.toISOString(), request_id: req.id };
    },
  );
}
