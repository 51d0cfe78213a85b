import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

export function getSandboxRoute(app: FastifyInstance, s: Services): void {
  app.get<{ Params: SandboxIdParams }>(
    '/v1/sandboxes/:id',
    { schema: { params: SandboxIdParams }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req) => {
      const p = principalOf(req);
      const row = await s.sandboxes.get(p.orgId, req.params.id);
      // A lifecycle call about a sandbox is a use of it (its idle clock).
      s.sandboxes.touch(row.id);
      // Which node holds it is the operator's business, not a tenant's.
      return { ...s.sandboxes.render(row, { node: await s.keys.isOperator(p) }), request_id: req.id };
    },
  );
}
