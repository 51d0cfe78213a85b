import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

export function deleteSandboxRoute(app: FastifyInstance, s: Services): void {
  app.delete<{ Params: SandboxIdParams }>(
    '/v1/sandboxes/:id',
    { schema: { params: SandboxIdParams }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req) => {
      const row = await s.sandboxes.delete(principalOf(req).orgId, req.params.id);
      return { id: row.id, status: 'deleted', request_id: req.id };
    },
  );
}
