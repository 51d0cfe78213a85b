import type { FastifyInstance } from 'fastify';
import type { Services } from '../../services/index.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

export function getSandboxRoute(app: FastifyInstance, s: Services): void {
  app.get<{ Params: SandboxIdParams }>(
    '/v1/sandboxes/:id',
    { schema: { params: SandboxIdParams }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req) => ({ ...s.sandboxes.render(await s.sandboxes.get(principalOf(req).orgId, req.params.id)), request_id: req.id }),
  );
}
