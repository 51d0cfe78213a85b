import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

export function templateBuildStatusRoute(app: FastifyInstance, s: Services): void {
  const builds = s.builds;
  if (!builds) return;
  app.get<{ Params: SandboxIdParams }>(
    '/v1/templates/build/:id/status',
    { schema: { params: SandboxIdParams }, preHandler: guard(s.keys, 'templates:read') },
    async (req) => ({ ...builds.renderStatus(await builds.get(principalOf(req).orgId, req.params.id)), request_id: req.id }),
  );
}
