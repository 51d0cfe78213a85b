import type { FastifyInstance } from 'fastify';
import { MetricsStreamQuery, SandboxMetrics, ServiceError } from '@sandboxd/protocol';
import type { Services } from '../../services/index.js';
import { eventsGuard, guard, principalOf, requireEventsScope } from '../auth.js';
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
  // The same figures as a live stream (server-sent events), for the console's charts: sampled only
  // while someone watches, one `metrics` event per interval; `end` when the sandbox is gone.
  app.get<{ Params: SandboxIdParams; Querystring: MetricsStreamQuery }>(
    '/v1/sandboxes/:id/metrics/stream',
    { schema: { params: SandboxIdParams, querystring: MetricsStreamQuery }, preHandler: eventsGuard(s.keys, s.tokens) },
    async (req, reply) => {
      const org = principalOf(req).orgId;
      requireEventsScope(req, req.params.id);
      await s.sandboxes.get(org, req.params.id);
      const release = s.connections?.acquireOrg(org);
      reply.hijack();
      const raw = reply.raw;
      raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-request-id': String(req.id) });
      raw.write(': connected\n\n');
      let closed = false;
      let timer: NodeJS.Timeout | undefined;
      const sample = async () => {
        try {
          const m = await s.sandboxes.metrics(org, req.params.id);
          // A client that does not read is cut rather than queued for.
          if (raw.writableLength > 256 * 1024) raw.destroy();
          else if (!closed) raw.write(`event: metrics\ndata: ${JSON.stringify(m)}\n\n`);
        } catch (err) {
          if (!closed) raw.end(`event: end\ndata: ${JSON.stringify({ id: req.params.id, reason: err instanceof ServiceError ? err.code : 'INTERNAL_ERROR' })}\n\n`);
          closed = true;
        }
        if (!closed) timer = setTimeout(() => void sample(), (req.query.interval ?? 2) * 1000);
      };
      req.raw.on('close', () => {
        closed = true;
        clearTimeout(timer);
        release?.();
      });
      await sample();
    },
  );
}
