import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { NameOrIdParams } from './params.js';

export function deleteTemplateRoute(app: FastifyInstance, s: Services): void {
  const builds = s.builds;
  if (!builds) return;
  app.delete<{ Params: NameOrIdParams }>(
    '/v1/templates/:nameOrId',
    { schema: { params: NameOrIdParams }, preHandler: guard(s.keys, 'templates:write') },
    async (req) => {
      const org = principalOf(req).orgId;
      const t = await s.templates.resolve(req.params.nameOrId, org);
      await builds.deleteTemplate(org, t);
      await s.placement?.dropWarm(t.id);
      await s.gcLayers?.();
      return { id: t.id, status: 'deleted', request_id: req.id };
    },
  );
}
