import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ServiceError, type Sandbox, type SandboxMetrics } from '@sandboxd/protocol';
import type { Static } from '@sinclair/typebox';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { renderLogged } from '../errors.js';
import { cursorAfter } from '../../services/pages.js';
import { SandboxIdParams } from './params.js';
import { createBodyFor, e2bSnapshotRoutes, snapshotNamed } from './e2b-snapshots.js';
import { e2bVolumeRoutes } from './e2b-volumes.js';
import {
  connectedOf,
  createBodyOf,
  detailOf,
  forkBodyOf,
  fromSnapshot,
  E2bConnectBody,
  E2bCreateBody,
  E2bForkBody,
  E2bListQuery,
  E2bMetricsQuery,
  E2bNetworkBody,
  E2bPauseBody,
  E2bRefreshBody,
  E2bResumeBody,
  E2bTimeoutBody,
  listedOf,
  metadataFilter,
  networkBodyOf,
  stateFilter,
  stateOf,
  templateRef,
} from '../e2b-shapes.js';

/** The prefix E2B's clients are pointed at: `E2B_API_URL=http://HOST:PORT/e2b`. */
export const E2B_PREFIX = '/e2b';
/** A kept access token with less than this left is replaced on connect (tokens.ts; SANDBOXD_TOKEN_TTL_SECONDS). */
const RENEW_TOKEN_WITHIN_MS = 3600_000;
/** A list reads at most this many of our pages (of 100) for one of E2B's (a metadata filter may match few). */
const LIST_PAGES_READ = 10;
/** CPU samples kept for the next metrics read's percentage (per sandbox, newest last). */
const CPU_SAMPLES_KEPT = 10_000;

type Id = { Params: SandboxIdParams };

/**
 * E2B's control plane (issue 30), for E2B's unmodified clients: the same services as /v1, its
 * paths, bodies and answers (e2b-shapes.ts), and errors as `{code: <status>, message}`, which
 * its clients turn into their typed errors (401 AuthenticationError, 404 NotFoundError, 429
 * RateLimitError, ...). Keys: ours, in X-API-KEY.
 */
export async function e2bRoutes(app: FastifyInstance, s: Services): Promise<void> {
  await app.register(
    async (e2b) => {
      e2b.setErrorHandler((err, req, reply) => sendError(err, req, reply));
      e2b.setNotFoundHandler((req, reply) => sendError(new ServiceError('ROUTE_NOT_FOUND', `no route for ${req.method} ${req.url.split('?')[0]}`), req, reply));
      routes(e2b, s);
      e2bSnapshotRoutes(e2b, s);
      e2bVolumeRoutes(e2b, s);
    },
    { prefix: E2B_PREFIX },
  );
}

function sendError(err: unknown, req: FastifyRequest, reply: FastifyReply): void {
  const r = renderLogged(asE2b(err), req);
  void reply.code(r.status).headers(r.headers).send({ code: r.status, message: r.body.message });
}

/**
 * What E2B's clients take for "no such sandbox" is a 404 (kill answers false, getInfo throws
 * NotFoundError): another organization's sandbox (our 403, which says that it exists) and one that
 * expired (our 410) are that here.
 */
function asE2b(err: unknown): unknown {
  if (!(err instanceof ServiceError)) return err;
  const id = err.extra.id;
  const otherOrgs = err.code === 'PERMISSION_DENIED' && Object.keys(err.extra).length === 1;
  if ((otherOrgs || err.code === 'SANDBOX_EXPIRED') && typeof id === 'string' && id.startsWith('sb')) {
    return new ServiceError('NOT_FOUND', err.code === 'SANDBOX_EXPIRED' ? err.message : `sandbox ${id} not found`, { id });
  }
  const snap = err.extra.snapshot_id;
  if (otherOrgs && typeof snap === 'string') return new ServiceError('SNAPSHOT_NOT_FOUND', `snapshot ${snap} not found`, { snapshot_id: snap });
  return err;
}

function routes(app: FastifyInstance, s: Services): void {
  const read = guard(s.keys, 'sandboxes:read');
  const write = guard(s.keys, 'sandboxes:write');
  // Host mode: clients without E2B_SANDBOX_URL reach `https://{port}-{id}.{domain}`.
  const domain = s.config.gateway.mode === 'host' ? s.config.gateway.domain : null;
  const view = async (req: FastifyRequest, id: string): Promise<Sandbox> => s.sandboxes.render(await s.sandboxes.get(principalOf(req).orgId, id));
  const token = (req: FastifyRequest, id: string) => s.sandboxes.keptToken(principalOf(req).orgId, id, principalOf(req).keyId, RENEW_TOKEN_WITHIN_MS);

  /** Moves the deadline to `seconds` from now, never nearer (connect, refresh); none stays none. */
  const extend = async (req: FastifyRequest, sb: Sandbox, seconds: number | undefined) => {
    if (seconds === undefined || seconds < 1 || !sb.expires_at) return;
    if (Date.parse(sb.expires_at) >= Date.now() + seconds * 1000) return;
    await s.sandboxes.setTimeout(principalOf(req).orgId, sb.id, seconds);
  };

  /** Running again if it was paused (or stopped): whether it had to be woken. */
  const wake = async (req: FastifyRequest, sb: Sandbox): Promise<boolean> => {
    const org = principalOf(req).orgId;
    if (sb.status !== 'paused' && sb.status !== 'stopped') return false;
    try {
      await (sb.status === 'paused' ? s.sandboxes.resume(org, sb.id) : s.sandboxes.start(org, sb.id));
    } catch (err) {
      // Another connect woke it first: that is what was wanted.
      if (!(err instanceof ServiceError && err.code === 'INVALID_STATE' && (await view(req, sb.id)).status === 'running')) throw err;
    }
    return true;
  };

  const create = async (req: FastifyRequest<{ Body: E2bCreateBody }>, reply: FastifyReply) => {
    // `templateID` may be one of the organization's snapshots: by id, or by name when no template has it.
    const body = createBodyFor(createBodyOf(req.body), req.body.templateID);
    // A client that goes away while its create waits for a sandbox abandons it (as /v1).
    const gone = new AbortController();
    const onClose = () => {
      if (!reply.raw.writableFinished) gone.abort();
    };
    reply.raw.once('close', onClose);
    try {
      const p = principalOf(req);
      const opts = { signal: gone.signal, keyId: p.keyId, keepToken: true };
      const { sandbox, token: t } = await s.sandboxes.create(p.orgId, body, opts).catch(async (err: unknown) => {
        const named = err instanceof ServiceError && err.code === 'TEMPLATE_NOT_FOUND' ? await snapshotNamed(s, req, req.body.templateID) : undefined;
        if (!named) throw err;
        return s.sandboxes.create(p.orgId, fromSnapshot(body, named.id), opts);
      });
      return reply.code(201).send(connectedOf(sandbox, t, domain));
    } finally {
      reply.raw.off('close', onClose);
    }
  };
  for (const path of ['/sandboxes', '/v2/sandboxes']) {
    app.post<{ Body: E2bCreateBody }>(path, { schema: { body: E2bCreateBody }, preHandler: write }, create);
  }

  const list = async (req: FastifyRequest<{ Querystring: E2bListQuery }>, reply: FastifyReply, onlyRunning: boolean) => {
    const q = req.query;
    const states = onlyRunning ? new Set(['running']) : stateFilter(q.state);
    const wanted = metadataFilter(q.metadata);
    const after = q.startedAfter === undefined ? undefined : Date.parse(q.startedAfter);
    if (after !== undefined && Number.isNaN(after)) throw new ServiceError('VALIDATION_ERROR', 'startedAfter must be an ISO-8601 time');
    const limit = q.limit ?? 100;
    const match = (sb: Sandbox) =>
      states.has(stateOf(sb)) && wanted.every(([k, v]) => sb.metadata?.[k] === v) && (after === undefined || Date.parse(sb.created_at) >= after);
    const org = principalOf(req).orgId;
    const found: Sandbox[] = [];
    let cursor = q.nextToken;
    let next: string | null = null;
    for (let pages = 0; pages < LIST_PAGES_READ && found.length < limit; pages++) {
      const page = await s.sandboxes.list(org, {
        limit: 100,
        ...(states.size === 1 && states.has('running') ? { status: 'running' } : {}),
        ...(q.template ? { template: templateRef(q.template) } : {}),
        ...(cursor ? { cursor } : {}),
      });
      next = page.nextCursor;
      for (const [i, sb] of page.data.entries()) {
        if (!match(sb)) continue;
        found.push(sb);
        if (found.length === limit) {
          // Stopped inside the page: the next one begins after what was shown.
          if (i < page.data.length - 1) next = cursorAfter({ createdAt: sb.created_at, id: sb.id });
          break;
        }
      }
      if (!next) break;
      cursor = next;
    }
    if (next) void reply.header('x-next-token', next);
    return found.map(listedOf);
  };
  app.get<{ Querystring: E2bListQuery }>('/v2/sandboxes', { schema: { querystring: E2bListQuery }, preHandler: read }, (req, reply) => list(req, reply, false));
  // The first list: running ones only.
  app.get<{ Querystring: E2bListQuery }>('/sandboxes', { schema: { querystring: E2bListQuery }, preHandler: read }, (req, reply) => list(req, reply, true));

  app.get<Id>('/sandboxes/:id', { schema: { params: SandboxIdParams }, preHandler: read }, async (req) => {
    const sb = await view(req, req.params.id);
    s.sandboxes.touch(sb.id);
    return detailOf(sb, domain);
  });

  app.delete<Id>('/sandboxes/:id', { schema: { params: SandboxIdParams }, preHandler: write }, async (req, reply) => {
    await s.sandboxes.delete(principalOf(req).orgId, req.params.id);
    return reply.code(204).send();
  });

  app.post<Id & { Body: Static<typeof E2bTimeoutBody> }>(
    '/sandboxes/:id/timeout',
    { schema: { params: SandboxIdParams, body: E2bTimeoutBody }, preHandler: write },
    async (req, reply) => {
      if (req.body.timeout < 1) throw new ServiceError('VALIDATION_ERROR', 'timeout must be at least 1 second');
      const row = await s.sandboxes.setTimeout(principalOf(req).orgId, req.params.id, req.body.timeout);
      s.sandboxes.touch(row.id);
      return reply.code(204).send();
    },
  );

  app.post<Id & { Body: Static<typeof E2bRefreshBody> }>(
    '/sandboxes/:id/refreshes',
    { schema: { params: SandboxIdParams, body: E2bRefreshBody }, preHandler: write },
    async (req, reply) => {
      const sb = await view(req, req.params.id);
      await extend(req, sb, req.body.duration ?? sb.timeout_seconds ?? undefined);
      s.sandboxes.touch(sb.id);
      return reply.code(204).send();
    },
  );

  // `memory: false` keeps the files only: our stop.
  app.post<Id & { Body: Static<typeof E2bPauseBody> }>(
    '/sandboxes/:id/pause',
    { schema: { params: SandboxIdParams, body: E2bPauseBody }, preHandler: write },
    async (req, reply) => {
      const org = principalOf(req).orgId;
      await (req.body.memory === false ? s.sandboxes.stop(org, req.params.id) : s.sandboxes.pause(org, req.params.id));
      return reply.code(204).send();
    },
  );

  // Connect: running again if it was paused (201) or as it was (200), its deadline at least
  // `timeout` away, and its access token.
  const connect = async (req: FastifyRequest<Id & { Body: Static<typeof E2bConnectBody> }>, reply: FastifyReply) => {
    const before = await view(req, req.params.id);
    const woke = await wake(req, before);
    const sb = woke ? await view(req, before.id) : before;
    await extend(req, sb, req.body.timeout);
    const t = await token(req, sb.id);
    s.sandboxes.touch(sb.id);
    return reply.code(woke ? 201 : 200).send(connectedOf(await view(req, sb.id), t, domain));
  };
  for (const path of ['/sandboxes/:id/connect', '/v2/sandboxes/:id/connect']) {
    app.post<Id & { Body: Static<typeof E2bConnectBody> }>(path, { schema: { params: SandboxIdParams, body: E2bConnectBody }, preHandler: write }, connect);
  }

  // The older verb: only a paused sandbox resumes (a running one is a 409).
  app.post<Id & { Body: Static<typeof E2bResumeBody> }>(
    '/sandboxes/:id/resume',
    { schema: { params: SandboxIdParams, body: E2bResumeBody }, preHandler: write },
    async (req, reply) => {
      const before = await view(req, req.params.id);
      if (!(await wake(req, before))) {
        throw new ServiceError('INVALID_STATE', `sandbox ${before.id} is already running`, { id: before.id, current_state: before.status });
      }
      await extend(req, await view(req, before.id), req.body.timeout);
      const t = await token(req, before.id);
      return reply.code(201).send(connectedOf(await view(req, before.id), t, domain));
    },
  );

  // Forks: all made or none (a failed one undoes the others), each answered as a create.
  app.post<Id & { Body: E2bForkBody }>(
    '/sandboxes/:id/fork',
    { schema: { params: SandboxIdParams, body: E2bForkBody }, preHandler: write },
    async (req, reply) => {
      const p = principalOf(req);
      const made = await s.sandboxes.fork(p.orgId, req.params.id, forkBodyOf(req.body), { keyId: p.keyId, keepToken: true });
      return reply.code(201).send(made.map((m) => ({ sandbox: connectedOf(m.sandbox, m.token, domain) })));
    },
  );

  app.put<Id & { Body: E2bNetworkBody }>(
    '/sandboxes/:id/network',
    { schema: { params: SandboxIdParams, body: E2bNetworkBody }, preHandler: write },
    async (req, reply) => {
      await s.sandboxes.setNetwork(principalOf(req).orgId, req.params.id, networkBodyOf(req.body));
      return reply.code(204).send();
    },
  );

  // E2B's metrics are a series of samples; ours is the sandbox now, one sample, with its CPU use
  // since the last read (or over a quarter second when there was none lately).
  const cpuSeen = new Map<string, { at: number; usageSeconds: number }>();
  const sample = async (req: FastifyRequest, id: string) => ({ m: await s.sandboxes.metrics(principalOf(req).orgId, id), at: Date.now() });
  app.get<Id & { Querystring: Static<typeof E2bMetricsQuery> }>(
    '/sandboxes/:id/metrics',
    { schema: { params: SandboxIdParams, querystring: E2bMetricsQuery }, preHandler: read },
    async (req) => {
      let { m, at } = await sample(req, req.params.id);
      let cpuUsedPct = 0;
      if (m.status === 'running') {
        let prev = cpuSeen.get(m.sandbox_id);
        if (!prev || at - prev.at < 200 || at - prev.at > 600_000 || prev.usageSeconds > m.cpu.usage_seconds) {
          prev = { at, usageSeconds: m.cpu.usage_seconds };
          await new Promise((r) => setTimeout(r, 250));
          ({ m, at } = await sample(req, req.params.id));
        }
        cpuUsedPct = Math.max(0, (100 * (m.cpu.usage_seconds - prev.usageSeconds)) / ((at - prev.at) / 1000) / (m.cpu.vcpu || 1));
        cpuSeen.delete(m.sandbox_id);
        cpuSeen.set(m.sandbox_id, { at, usageSeconds: m.cpu.usage_seconds });
        if (cpuSeen.size > CPU_SAMPLES_KEPT) cpuSeen.delete(cpuSeen.keys().next().value!);
      }
      const unix = Math.floor(at / 1000);
      if ((req.query.start !== undefined && unix < req.query.start) || (req.query.end !== undefined && unix > req.query.end)) return [];
      return [metricOf(m, unix, cpuUsedPct)];
    },
  );
}

function metricOf(m: SandboxMetrics, unix: number, cpuUsedPct: number) {
  return {
    timestamp: m.timestamp,
    timestampUnix: unix,
    cpuCount: m.cpu.vcpu,
    cpuUsedPct: Math.round(cpuUsedPct * 100) / 100,
    memUsed: m.memory.used_bytes,
    memTotal: m.memory.limit_bytes,
    memCache: 0,
    diskUsed: m.disk.used_bytes,
    diskTotal: m.disk.total_bytes,
  };
}
