import type { NodeStatus, SandboxUsage, Store } from '../store/types/index.js';

/** A node as the operator sees it: GET /v1/admin/nodes, `sandboxd cluster status`. */
export interface NodeView {
  id: string;
  status: NodeStatus;
  /** Whether it serves now: its lease runs (a cluster's node), or it is this process (the all-in-one's). */
  up: boolean;
  /** The all-in-one's machine, served in the daemon's own process: no lease, no URL. */
  inProcess: boolean;
  /** Its node API. */
  url: string | null;
  leaseExpiresAt: string | null;
  heartbeatAt: string | null;
  heartbeatAgeSeconds: number | null;
  registeredAt: string | null;
  /** What it has; maxSandboxes null: no bound of its own (the all-in-one's: the organizations' quotas bound it). */
  capacity: { vcpu: number; memoryMb: number; diskGb: number; maxSandboxes: number | null };
  /** What the store's sandboxes on it hold (those not deleted). */
  committed: SandboxUsage;
  /** What its runtime said it holds: at its last heartbeat, or now for the all-in-one's. */
  reported: { sandboxes: number; warmReady: number; orphans: number | null };
}

/**
 * The all-in-one daemon's one machine, as its node in process (LocalNode) shows itself: the
 * services know no node but through placement, so the role hands this over.
 */
export interface InProcessNode {
  id: string;
  capacity: { vcpu: number; memoryMb: number; diskGb: number };
  list(): Promise<string[]>;
  readyByKey(): Record<string, number>;
}

const NONE: SandboxUsage = { active: 0, activeVcpu: 0, activeMemoryMb: 0, stopped: 0, diskGb: 0 };
const sum = (counts: Record<string, number>) => Object.values(counts).reduce((a, b) => a + b, 0);

/** The nodes of the store's registry (a cluster's), as of `nowMs`: the store's clock, which writes their leases. */
export async function registryNodeViews(store: Pick<Store, 'nodes' | 'sandboxes'>, nowMs: number): Promise<NodeView[]> {
  const [nodes, usage] = await Promise.all([store.nodes.list(), store.sandboxes.usageByNode()]);
  return nodes.map((n) => ({
    id: n.id,
    status: n.status,
    up: Date.parse(n.leaseExpiresAt) > nowMs,
    inProcess: false,
    url: n.url,
    leaseExpiresAt: n.leaseExpiresAt,
    heartbeatAt: n.heartbeatAt,
    heartbeatAgeSeconds: Math.max(0, Math.round((nowMs - Date.parse(n.heartbeatAt)) / 1000)),
    registeredAt: n.registeredAt,
    capacity: n.capacity,
    committed: usage[n.id] ?? NONE,
    reported: { sandboxes: n.usage.sandboxes, warmReady: sum(n.warm), orphans: n.orphans ?? null },
  }));
}

/**
 * The all-in-one's machine: every row of the store is on it (rows made under an earlier host name
 * too), and what it holds is read from it now. Orphans are not counted: the daemon reconciles its
 * runtime with the store at each start, and in one process nothing can leave a sandbox to no one
 * while it runs.
 */
export async function inProcessNodeView(store: Pick<Store, 'sandboxes'>, node: InProcessNode): Promise<NodeView> {
  const [committed, held] = await Promise.all([store.sandboxes.usageAll(), node.list()]);
  return {
    id: node.id,
    status: 'active',
    up: true,
    inProcess: true,
    url: null,
    leaseExpiresAt: null,
    heartbeatAt: null,
    heartbeatAgeSeconds: null,
    registeredAt: null,
    capacity: { ...node.capacity, maxSandboxes: null },
    committed,
    reported: { sandboxes: held.length, warmReady: sum(node.readyByKey()), orphans: null },
  };
}

/** The service's nodes for the admin API: the registry's (control), or its own machine (the all-in-one). */
export class NodeViews {
  readonly mode: 'cluster' | 'all-in-one';

  constructor(
    private readonly store: Store,
    private readonly inProcess?: InProcessNode,
  ) {
    this.mode = inProcess ? 'all-in-one' : 'cluster';
  }

  async list(): Promise<NodeView[]> {
    if (this.inProcess) return [await inProcessNodeView(this.store, this.inProcess)];
    // Leases are written by the store's clock: they are read against it.
    const { now } = await this.store.replicas.list();
    return registryNodeViews(this.store, Date.parse(now));
  }
}

/** A node view in the API's words (AdminNode), as `sandboxd cluster status --json` prints it too. */
export function renderNodeView(n: NodeView) {
  return {
    id: n.id,
    status: n.status,
    up: n.up,
    in_process: n.inProcess,
    url: n.url,
    lease_expires_at: n.leaseExpiresAt,
    heartbeat_at: n.heartbeatAt,
    heartbeat_age_seconds: n.heartbeatAgeSeconds,
    registered_at: n.registeredAt,
    capacity: { vcpu: n.capacity.vcpu, memory_mb: n.capacity.memoryMb, disk_gb: n.capacity.diskGb, max_sandboxes: n.capacity.maxSandboxes },
    committed: {
      sandboxes: n.committed.active + n.committed.stopped,
      active: n.committed.active,
      stopped: n.committed.stopped,
      vcpu: n.committed.activeVcpu,
      memory_mb: n.committed.activeMemoryMb,
      disk_gb: n.committed.diskGb,
    },
    reported: { sandboxes: n.reported.sandboxes, warm_ready: n.reported.warmReady, orphans: n.reported.orphans },
  };
}
