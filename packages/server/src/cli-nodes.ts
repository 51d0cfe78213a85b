import { ServiceError } from '@sandboxd/protocol';
import type { NodeRow, NodeStatus, SandboxUsage, Store } from './store/types/index.js';

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

const NODE_ID_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

async function need(store: Store, id: string): Promise<NodeRow> {
  if (!NODE_ID_RE.test(id)) throw new ServiceError('VALIDATION_ERROR', `"${id}" is not a node id`);
  const n = await store.nodes.byId(id);
  if (!n) throw new ServiceError('NOT_FOUND', `no node ${id} in the cluster`);
  return n;
}

/** cordon (takes nothing new), uncordon (active again); a drain is control's (drainNode). */
export async function setNodeStatus(store: Store, id: string, status: NodeStatus): Promise<NodeRow> {
  await need(store, id);
  await store.nodes.setStatus(id, status);
  return (await store.nodes.byId(id))!;
}

/** One answer of control's drain of a node (POST /v1/admin/nodes/{id}/drain), as read here. */
export interface DrainAnswer {
  moved: Array<{ id: string; organization_id: string; status: string; node_id: string }>;
  failed: Array<{ id: string; organization_id: string; status: string; error: { code: string; message: string } }>;
  running: Array<{ id: string; organization_id: string; expires_at: string | null }>;
  left: number;
  drained: boolean;
}

/** Where a drain stands: what moved so far, of how many; what failed at the last call; what runs there still. */
export interface DrainProgress {
  moved: number;
  of: number;
  failed: number;
  running: number;
}

export interface DrainOutcome {
  drained: boolean;
  /** Every sandbox moved, across the calls. */
  moved: DrainAnswer['moved'];
  /** As the last call left them: each still on the node, as it was. */
  failed: DrainAnswer['failed'];
  running: DrainAnswer['running'];
}

/**
 * Drains a node through control (`ask`: one drain call; control holds the nodes' clients and the
 * layers the moves go through): it takes nothing new, its warm pool empties, its stopped and
 * paused sandboxes move to other nodes, and with `stopRunning` its running ones are stopped and
 * moved too. A call moves what it can in its time: calls follow at once while any is left, then
 * every `everyMs` while running ones remain (one its owner stops meanwhile moves at the next call;
 * one that failed is tried again), until the node holds none or `timeoutMs` passes. When only
 * sandboxes that failed to move are left, it ends at once. Run again, it goes on from there.
 */
export async function drainNode(
  ask: (body: { stop_running: boolean }) => Promise<DrainAnswer>,
  opts: { stopRunning?: boolean; timeoutMs?: number; everyMs?: number; onProgress?: (p: DrainProgress) => void; signal?: AbortSignal } = {},
): Promise<DrainOutcome> {
  const deadline = opts.timeoutMs === undefined ? Infinity : Date.now() + opts.timeoutMs;
  const moved = new Map<string, DrainAnswer['moved'][number]>();
  for (;;) {
    const a = await ask({ stop_running: opts.stopRunning ?? false });
    for (const m of a.moved) moved.set(m.id, m);
    opts.onProgress?.({ moved: moved.size, of: moved.size + a.failed.length + a.left, failed: a.failed.length, running: a.running.length });
    const outcome = { drained: a.drained, moved: [...moved.values()], failed: a.failed, running: a.running };
    if (a.drained || opts.signal?.aborted) return outcome;
    if (a.left > 0) continue;
    if (a.running.length === 0 || Date.now() >= deadline) return outcome;
    await new Promise((r) => setTimeout(r, Math.min(opts.everyMs ?? 5000, Math.max(1, deadline - Date.now()))));
  }
}

/** What `sandboxd nodes drain` says once it ends. */
export function drainSummary(id: string, r: DrainOutcome): string {
  const lines = [r.drained ? `node ${id} is drained: no sandbox left on it` : `node ${id} is still draining (it takes nothing new)`];
  if (r.moved.length) lines.push(`moved ${r.moved.length} sandbox(es): ${r.moved.map((m) => `${m.id} (${m.status}) to ${m.node_id}`).join(', ')}`);
  for (const f of r.failed) lines.push(`could not move ${f.id} (organization ${f.organization_id}, ${f.status}; it stays where it was): ${f.error.code}: ${f.error.message}`);
  if (r.running.length) {
    lines.push(`running on it, left to end by their deadlines or their owners (--stop-running stops and moves them):`);
    for (const x of r.running) lines.push(`  ${x.id}  organization ${x.organization_id}  ${x.expires_at ? `expires ${x.expires_at}` : 'no deadline'}`);
  }
  return lines.join('\n');
}

/**
 * Forgets a node. Its sandboxes in the store are marked deleted (reason `node_removed`): whatever
 * still runs on that machine is no longer served. A node whose lease still runs is refused unless
 * `force` (it is alive: drain it first, or stop it). The removal is recorded first, and outlives the
 * node's row: from then on the registry refuses the node's credentials made before it, and a node on
 * the database cannot register until admitted (admitNode), so a removed node does not come back
 * with a restart (nor one that is up with its next heartbeat).
 */
export async function removeNode(store: Store, id: string, opts: { force?: boolean } = {}): Promise<{ sandboxes: number }> {
  const n = await need(store, id);
  if (Date.parse(n.leaseExpiresAt) > Date.now() && !opts.force) {
    throw new ServiceError('INVALID_STATE', `node ${id} is up (it heartbeats): drain it, or stop it, first; --force removes it anyway`);
  }
  const removedAt = await store.nodes.recordRemoval(id);
  let count = 0;
  const now = new Date().toISOString();
  for (const row of await store.sandboxes.live(id)) {
    if (row.status === 'deleted') continue;
    const done = await store.sandboxes.update(row.id, row.version, { status: 'deleted', deletedReason: 'node_removed', deletedAt: now, updatedAt: now });
    if (done) count++;
  }
  await store.nodes.remove(id);
  // A credential's time is in whole seconds, and one of the removal's second counts as made before
  // it: once this returns, a credential made for the node (to admit it again) is of a later second.
  const wait = (Math.floor(Date.parse(removedAt) / 1000) + 1) * 1000 - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, Math.min(wait, 1000)));
  return { sandboxes: count };
}

/** Clears node `id`'s removal: it may register again (`sandboxd nodes admit`); whether one was recorded. */
export async function admitNode(store: Store, id: string): Promise<{ admitted: boolean }> {
  if (!NODE_ID_RE.test(id)) throw new ServiceError('VALIDATION_ERROR', `"${id}" is not a node id`);
  return { admitted: await store.nodes.admit(id) };
}
