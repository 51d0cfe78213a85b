import type { FastifyInstance } from 'fastify';
import { MetricsStreamQuery, SandboxMetrics, SandboxPorts, SandboxPreview, ServiceError, SetPreviewBody } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { eventsGuard, guard, principalOf, requireEventsScope } from '../auth.js';
import { SandboxIdParams, SandboxPortParams } from './params.js';

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
  // What listens inside it: the ports a preview could reach.
  app.get<{ Params: SandboxIdParams }>(
    '/v1/sandboxes/:id/ports',
    { schema: { params: SandboxIdParams, response: { 200: SandboxPorts } }, preHandler: guard(s.keys, 'sandboxes:read') },
    // Sent as made once per read (services/sandboxes/network.ts), not serialized per caller.
    async (req, reply) => {
      const data = await s.sandboxes.portsJson(principalOf(req).orgId, req.params.id);
      return reply.type('application/json; charset=utf-8').send(`{"object":"list","data":${data},"request_id":${JSON.stringify(String(req.id))}}`);
    },
  );
  // A port's preview URL: made on first ask, private unless made public. Making one, and a signed
  // link into a private one, take sandboxes:write (a link opens the app: a notebook is code
  // execution); a key that may only read sees what exists. A link may wake its sandbox.
  const mayWrite = (scopes: Set<string>) => scopes.has('sandboxes:write') || scopes.has('admin');
  app.get<{ Params: SandboxPortParams }>(
    '/v1/sandboxes/:id/ports/:port',
    { schema: { params: SandboxPortParams, response: { 200: SandboxPreview } }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req) => {
      const p = principalOf(req);
      const write = mayWrite(p.scopes);
      return { ...(await s.sandboxes.preview(p.orgId, req.params.id, req.params.port, { mayWake: write, readOnly: !write, keyId: p.keyId })), request_id: String(req.id) };
    },
  );
  app.put<{ Params: SandboxPortParams; Body: SetPreviewBody }>(
    '/v1/sandboxes/:id/ports/:port',
    { schema: { params: SandboxPortParams, body: SetPreviewBody, response: { 200: SandboxPreview } }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req) => {
      const p = principalOf(req);
      return {
        ...(await s.sandboxes.preview(p.orgId, req.params.id, req.params.port, { setPublic: req.body.public, mayWake: mayWrite(p.scopes), keyId: p.keyId })),
        request_id: String(req.id),
      };
    },
  );
  // The same figures as a live stream (server-sent events), for the console's charts: sampled only
  // while someone watches, once per interval for all who watch a sandbox at that interval, one
  // `metrics` event each time; `end` when the sandbox is gone or the key that opened it is revoked.
  const streams = new MetricsStreams(s);
  app.get<{ Params: SandboxIdParams; Querystring: MetricsStreamQuery }>(
    '/v1/sandboxes/:id/metrics/stream',
    { schema: { params: SandboxIdParams, querystring: MetricsStreamQuery }, preHandler: eventsGuard(s.keys, s.tokens) },
    async (req, reply) => {
      const p = principalOf(req);
      requireEventsScope(req, req.params.id);
      await s.sandboxes.get(p.orgId, req.params.id);
      streams.admit(req.params.id);
      const release = s.connections?.acquireOrg(p.orgId);
      reply.hijack();
      const raw = reply.raw;
      // The client may have left while it was let in: nothing is kept for it then.
      if (req.raw.destroyed || raw.destroyed || raw.socket?.destroyed) {
        release?.();
        raw.destroy();
        return;
      }
      raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-request-id': String(req.id) });
      raw.write(': connected\n\n');
      const leave = streams.watch(req.params.id, p.orgId, req.query.interval ?? 2, {
        keyId: p.keyId,
        send: (text) => {
          // Only the latest sample matters: one a slow reader has not taken yet is not queued behind.
          if (raw.writableLength === 0) raw.write(text);
          else if (raw.writableLength > 256 * 1024) raw.destroy();
        },
        end: (text) => raw.end(text),
      });
      raw.once('close', () => {
        leave();
        release?.();
      });
    },
  );
}

interface Watcher {
  keyId: string;
  send: (text: string) => void;
  end: (text: string) => void;
}

/** Streams of one sandbox at most (each samples nothing of its own: see MetricsStreams). */
const MAX_STREAMS_PER_SANDBOX = 10;

/** One sampler per sandbox and interval, for everyone who watches it at that interval. */
class MetricsStreams {
  private samplers = new Map<string, { watchers: Set<Watcher>; timer: NodeJS.Timeout | undefined }>();
  private perSandbox = new Map<string, number>();

  constructor(private s: Services) {}

  /** Throws a 429 when the sandbox has all the streams it may have. */
  admit(sandboxId: string): void {
    const n = this.perSandbox.get(sandboxId) ?? 0;
    if (n >= MAX_STREAMS_PER_SANDBOX) {
      throw new ServiceError('RATE_LIMIT_EXCEEDED', `sandbox ${sandboxId} has ${n} metrics streams open: the limit is ${MAX_STREAMS_PER_SANDBOX}; close one and retry`, {
        retry_after: 5,
        limit: MAX_STREAMS_PER_SANDBOX,
      }, { 'retry-after': '5' });
    }
  }

  watch(sandboxId: string, orgId: string, interval: number, w: Watcher): () => void {
    const key = `${sandboxId}/${interval}`;
    let sampler = this.samplers.get(key);
    if (!sampler) {
      sampler = { watchers: new Set(), timer: undefined };
      this.samplers.set(key, sampler);
      const mine = sampler;
      const tick = async () => {
        let text: string;
        try {
          text = `event: metrics\ndata: ${JSON.stringify(await this.s.sandboxes.metrics(orgId, sandboxId))}\n\n`;
        } catch (err) {
          const end = `event: end\ndata: ${JSON.stringify({ id: sandboxId, reason: err instanceof ServiceError ? err.code : 'INTERNAL_ERROR' })}\n\n`;
          if (this.samplers.get(key) === mine) this.samplers.delete(key);
          for (const x of [...mine.watchers]) x.end(end);
          return;
        }
        for (const x of [...mine.watchers]) {
          // A stream lives only as long as the key that opened it.
          const live = await this.s.keys.authenticateKeyId(x.keyId, orgId).then(
            () => true,
            () => false,
          );
          if (!mine.watchers.has(x)) continue;
          if (live) x.send(text);
          else x.end(`event: end\ndata: ${JSON.stringify({ id: sandboxId, reason: 'AUTHENTICATION_ERROR' })}\n\n`);
        }
        if (mine.watchers.size > 0 && this.samplers.get(key) === mine) mine.timer = setTimeout(() => void tick(), interval * 1000);
      };
      mine.timer = setTimeout(() => void tick(), 0);
    }
    sampler.watchers.add(w);
    this.perSandbox.set(sandboxId, (this.perSandbox.get(sandboxId) ?? 0) + 1);
    const current = sampler;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      current.watchers.delete(w);
      const n = (this.perSandbox.get(sandboxId) ?? 1) - 1;
      if (n > 0) this.perSandbox.set(sandboxId, n);
      else this.perSandbox.delete(sandboxId);
      if (current.watchers.size === 0) {
        clearTimeout(current.timer);
        if (this.samplers.get(key) === current) this.samplers.delete(key);
      }
    };
  }
}
