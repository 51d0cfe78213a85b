import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import type { NodeCapacity, NodeReport, NodeRow, NodeUsage } from '../../store/types/index.js';

const NODE_ID_RE = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const MAX_NUMBER = 1e12;
const MAX_WARM_KEYS = 1000;

const bad = (message: string) => new ServiceError('VALIDATION_ERROR', message);

function amount(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > MAX_NUMBER) throw bad(`${what} must be a number from 0 to ${MAX_NUMBER}`);
  return v;
}

function object(v: unknown, what: string): Record<string, unknown> {
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw bad(`${what} must be an object`);
  return v as Record<string, unknown>;
}

function capacityOf(v: unknown): NodeCapacity {
  const c = object(v, 'capacity');
  return { vcpu: amount(c.vcpu, 'capacity.vcpu'), memoryMb: amount(c.memoryMb, 'capacity.memoryMb'), diskGb: amount(c.diskGb, 'capacity.diskGb'), maxSandboxes: amount(c.maxSandboxes, 'capacity.maxSandboxes') };
}

function leaseOf(v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1000 || v > 3_600_000) throw bad('lease_ms must be a whole number of milliseconds from 1000 to 3600000');
  return v;
}

function reportOf(v: unknown): NodeReport {
  const r = object(v, 'report');
  const u = object(r.usage, 'report.usage');
  const usage: NodeUsage = { sandboxes: amount(u.sandboxes, 'usage.sandboxes'), vcpu: amount(u.vcpu, 'usage.vcpu'), memoryMb: amount(u.memoryMb, 'usage.memoryMb'), diskGb: amount(u.diskGb, 'usage.diskGb') };
  const w = object(r.warm ?? {}, 'report.warm');
  const keys = Object.keys(w);
  if (keys.length > MAX_WARM_KEYS) throw bad(`report.warm holds at most ${MAX_WARM_KEYS} keys`);
  const warm: Record<string, number> = {};
  for (const k of keys) {
    if (k.length > 200 || !/^[\w:.-]+$/.test(k)) throw bad('report.warm keys must be short words');
    const n = w[k];
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 1e6) throw bad('report.warm values must be whole numbers');
    warm[k] = n;
  }
  const digest = r.layersDigest;
  if (digest !== null && (typeof digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(digest))) throw bad('report.layersDigest must be a sha256 digest or null');
  const orphans = r.orphans;
  if (orphans !== undefined && (typeof orphans !== 'number' || !Number.isInteger(orphans) || orphans < 0 || orphans > 1e6)) throw bad('report.orphans must be a whole number');
  return {
    usage,
    warm,
    layersDigest: digest,
    ...(r.capacity === undefined ? {} : { capacity: capacityOf(r.capacity) }),
    ...(orphans === undefined ? {} : { orphans }),
  };
}

/** What a node is told of its entry: no more than it needs (its status, and the lease it holds). */
function entry(row: NodeRow): Record<string, unknown> {
  return { id: row.id, url: row.url, status: row.status, lease_expires_at: row.leaseExpiresAt };
}

/**
 * Control's registry for nodes that hold no database credentials (node/registry-client.ts): a node
 * registers, heartbeats and reads what the store records on it here, with the registry credential
 * control's key signed for it (`sandboxd cluster node-credential`), and for its own entry only.
 * Everything in a body is a node's claim, checked field by field. Not part of the public API.
 */
export function internalNodeRoutes(app: FastifyInstance, s: Services): void {
  const registryOf = () => {
    if (!s.nodeRegistry) throw new ServiceError('ROUTE_NOT_FOUND', "the nodes' registry is control's");
    return s.nodeRegistry;
  };
  const nodeOf = async (req: FastifyRequest<{ Params: { id: string } }>) => {
    const registry = registryOf();
    const id = req.params.id;
    if (!NODE_ID_RE.test(id)) throw bad('bad node id');
    return registry.authorize(req.headers.authorization, id);
  };

  app.put<{ Params: { id: string } }>('/internal/v1/nodes/:id', async (req) => {
    const claims = await nodeOf(req);
    const id = claims.nodeId;
    const body = object(req.body, 'the body');
    const url = body.url;
    if (typeof url !== 'string' || url.length > 300 || !/^https?:\/\/[^/?#\s@]+$/.test(url)) throw bad('url must be http(s)://host:port');
    const row = await registryOf().register(claims, { url, capacity: capacityOf(body.capacity) }, leaseOf(body.lease_ms));
    req.log.info({ node: id, url, status: row.status }, 'a node registered through the registry');
    return entry(row);
  });

  app.post<{ Params: { id: string } }>('/internal/v1/nodes/:id/heartbeat', async (req) => {
    const { nodeId: id } = await nodeOf(req);
    const body = object(req.body, 'the body');
    const row = await s.store.nodes.heartbeat(id, reportOf(body.report), leaseOf(body.lease_ms));
    if (!row) throw new ServiceError('NOT_FOUND', `node ${id} was removed from the cluster`);
    return entry(row);
  });

  app.get<{ Params: { id: string } }>('/internal/v1/nodes/:id/sandboxes', async (req) => {
    const { nodeId: id } = await nodeOf(req);
    const [usage, live] = await Promise.all([s.store.sandboxes.usageByNode(), s.store.sandboxes.live(id)]);
    return { usage: usage[id] ?? null, ids: live.map((r) => r.id) };
  });

  // Which of the sandboxes a node holds unowned were deleted (their removal on the node was missed:
  // it was away): the node removes those at once rather than after the orphans' grace.
  app.post<{ Params: { id: string } }>('/internal/v1/nodes/:id/deleted', async (req) => {
    const { nodeId: id } = await nodeOf(req);
    const ids = object(req.body, 'the body').ids;
    if (!Array.isArray(ids) || ids.length > 1000 || !ids.every((x) => typeof x === 'string' && /^[a-z0-9][a-z0-9-]{0,62}$/.test(x))) throw bad('ids must be a list of at most 1000 sandbox ids');
    return { ids: await s.store.sandboxes.deletedAmong(id, ids as string[]) };
  });

  // A node renews its credential past half its life (node/registry-client.ts), with the one it holds.
  app.post<{ Params: { id: string } }>('/internal/v1/nodes/:id/credential', async (req) => {
    const claims = await nodeOf(req);
    const renewed = await registryOf().renew(claims);
    req.log.info({ node: claims.nodeId, expires_at: renewed.expiresAt }, 'a node renewed its registry credential');
    return { credential: renewed.credential, expires_at: renewed.expiresAt };
  });
}
