import type { FastifyInstance } from 'fastify';
import { SandboxMetrics, ServiceError } from '@sandboxd/protocol';
import type { Services } from '../../services/index.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

export function metricsRoutes(app: FastifyInstance, s: Services): void {
  // Prometheus' text format, for a key with the metrics:read scope; off the public API when the
  // operator serves it on an address of its own (SANDBOXD_METRICS_LISTEN).
  app.get('/metrics', { preHandler: guard(s.keys, 'metrics:read') }, async (_req, reply) => {
    if (!s.metrics || !s.config.metrics.onApi) {
      throw new ServiceError('ROUTE_NOT_FOUND', s.metrics ? 'metrics are served on their own address (SANDBOXD_METRICS_LISTEN), not on the API' : 'no metrics are kept');
    }
    const { text, contentType } = await s.metrics.render();
    return reply.type(contentType).send(text);
  });
  app.get<{ Params: SandboxIdParams }>(
    '/v1/sandboxes/:id/metrics',
    { schema: { params: SandboxIdParams, response: { 200: SandboxMetrics } }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req) => ({ ...(await s.sandboxes.metrics(principalOf(req).orgId, req.params.id)), request_id: String(req.id) }),
  );
}
