import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';

export function templateBuildRoute(app: FastifyInstance, s: Services): void {
  const builds = s.builds;
  if (!builds) return;
  app.post('/v1/templates/build', { preHandler: guard(s.keys, 'templates:write') }, async (req, reply) => {
    const { build } = await builds.start(principalOf(req).orgId, req.body);
    return reply.code(202).send({
      build_id: build.id,
      template_id: build.templateId,
      status: build.status,
      logs_url: `/v1/templates/build/${build.id}/logs`,
      request_id: req.id,
    });
  });
}
