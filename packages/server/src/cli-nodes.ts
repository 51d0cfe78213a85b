import { ServiceError } from '@sandboxd/protocol';
import type { NodeRow, NodeStatus, SandboxUsage, Store } from './store/types.js';

/** One row of `sandboxd nodes list`. */
export interface NodeListing {
  id: string;
  status: NodeStatus;
  /** Whether its lease runs (it heartbeats), and how long ago it last did. */
  up: boolean;
  heartbeatAgeSeconds: number;
  url: string;
  capacity: NodeRow['capacity'];
  /** What the store's sandboxes on it hold (those not deleted). */
  committed: SandboxUsage;
  /** How many sandboxes its runtime said it holds at its last heartbeat. */
  reportedSandboxes: number;
  /** Ready sandboxes of its warm pool at its last heartbeat, all keys together (part of reportedSandboxes). */
  warmReady: number;
}

const NONE: SandboxUsage = { active: 0, activeVcpu: 0, activeMemoryMb: 0, stopped: 0, diskGb: 0 };

export async function listNodes(store: Store, now = Date.now()): Promise<NodeListing[]> {
  const [nodes, usage] = await Promise.all([store.nodes.list(), store.sandboxes.usageByNode()]);
  return nodes.map((n) => ({
    id: n.id,
    status: n.status,
    up: Date.parse(n.leaseExpiresAt) > now,
    heartbeatAgeSeconds: Math.max(0, Math.round((now - Date.parse(n.heartbeatAt)) / 1000)),
    url: n.url,
    capacity: n.capacity,
    committed: usage[n.id] ?? NONE,
    reportedSandboxes: n.usage.sandboxes,
    warmReady: Object.values(n.warm).reduce((a, b) => a + b, 0),
  }));
}

export function nodeTableRows(list: NodeListing[]): Array<Record<string, string>> {
  return list.map((n) => ({
    id: n.id,
    status: n.status,
    up: n.up ? 'yes' : `no (${n.heartbeatAgeSeconds} s)`,
    sandboxes: `${n.committed.active + n.committed.stopped}/${n.capacity.maxSandboxes}`,
    vcpu: `${n.committed.activeVcpu}/${n.capacity.vcpu}`,
    memory_mb: `${n.committed.activeMemoryMb}/${n.capacity.memoryMb}`,
    disk_gb: `${n.committed.diskGb}/${n.capacity.diskGb}`,
    warm: String(n.warmReady),
    url: n.url,
  }));
}

async function need(store: Store, id: string): Promise<NodeRow> {
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(id)) throw new ServiceError('VALIDATION_ERROR', `"${id}" is not a node id`);
  const n = await store.nodes.byId(id);
  if (!n) throw new ServiceError('NOT_FOUND', `no node ${id} in the cluster`);
  return n;
}

/** cordon (takes nothing new), uncordon (active again), drain (takes nothing new; its sandboxes end on their own). */
export async function setNodeStatus(store: Store, id: string, status: NodeStatus): Promise<NodeRow> {
  await need(store, id);
  await store.nodes.setStatus(id, status);
  return (await store.nodes.byId(id))!;
}

/**
 * Drains a node: it takes no new sandbox, and this waits until none of the store's sandboxes is on
 * it any more (they end by their deadlines or their owners' deletes), reporting every `everyMs`.
 * Resolves false when `timeoutMs` passes first (the node stays draining).
 */
export async function drainNode(
  store: Store,
  id: string,
  opts: { timeoutMs?: number; everyMs?: number; onProgress?: (left: number) => void; signal?: AbortSignal } = {},
): Promise<boolean> {
  await setNodeStatus(store, id, 'draining');
  const deadline = opts.timeoutMs === undefined ? Infinity : Date.now() + opts.timeoutMs;
  for (;;) {
    const u = (await store.sandboxes.usageByNode())[id] ?? NONE;
    const left = u.active + u.stopped;
    opts.onProgress?.(left);
    if (left === 0) return true;
    if (Date.now() >= deadline || opts.signal?.aborted) return false;
    await new Promise((r) => setTimeout(r, Math.min(opts.everyMs ?? 5000, Math.max(1, deadline - Date.now()))));
  }
}

/**
 * Forgets a node. Its sandboxes in the store are marked deleted (reason `node_removed`): whatever
 * still runs on that machine is no longer served. A node whose lease still runs is refused unless
 * `force` (it is alive: drain it first, or stop it).
 */
export async function removeNode(store: Store, id: string, opts: { force?: boolean } = {}): Promise<{ sandboxes: number }> {
  const n = await need(store, id);
  if (Date.parse(n.leaseExpiresAt) > Date.now() && !opts.force) {
    throw new ServiceError('INVALID_STATE', `node ${id} is up (it heartbeats): drain it, or stop it, first; --force removes it anyway`);
  }
  let count = 0;
  const now = new Date().toISOString();
  for (const row of await store.sandboxes.live(id)) {
    if (row.status === 'deleted') continue;
    const done = await store.sandboxes.update(row.id, row.version, { status: 'deleted', deletedReason: 'node_removed', deletedAt: now, updatedAt: now });
    if (done) count++;
  }
  await store.nodes.remove(id);
  return { sandboxes: count };
}
