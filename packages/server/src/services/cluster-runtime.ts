import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import { describeCause, ServiceError } from '@sandboxd/protocol';
import { unpackLayer } from '../images/layer-tar.js';
import type { ClusterSigner } from '../runtime/cluster-auth.js';
import type { EgressPolicy } from '../runtime/egress-policy.js';
import type { ListeningPort } from '../runtime/listening.js';
import { RemoteRuntime } from '../runtime/remote-runtime.js';
import type { LayerSource, Runtime, RuntimeStatus, SandboxResources, SandboxSpec, SandboxStats, StepRunOptions } from '../runtime/types.js';
import type { NodeRow, SandboxRow, SandboxUsage, Store } from '../store/types.js';
import { clusterWarmKeyOf } from './warm-pool.js';
import { agentJson, waitForAgent } from './agent-client.js';
import { newSandboxId, withSandboxId } from './sandbox-identity.js';

export interface ClusterRuntimeOptions {
  store: Store;
  auth: ClusterSigner;
  /** The CA bundle (PEM) the certificates of https:// nodes are checked against (SANDBOXD_CLUSTER_CA_FILE; absent: the system's). */
  ca?: string;
  /** How far past its reported cores and memory a node may be committed (1: not at all). */
  overcommit?: { cpu: number; memory: number };
  /** How old the node list may be before a call reads it again (default 2 s). */
  refreshMs?: number;
  /** How old a read of the nodes' commitments begun by prepareTake may be for placement to use it (default 100 ms). */
  usageReuseMs?: number;
  /** How often this process claims on each node what it holds there unrecorded (default 30 s; 0: never). */
  claimEveryMs?: number;
  /** How long a sandbox booted on a node without a warm pool (an earlier version) may take to answer (default 15 s). */
  agentReadyTimeoutMs?: number;
  /** Control's layers, which nodes fetch when they lack them (absent: nodes get this machine's paths). */
  layers?: LayerSource;
  /** Most bytes of a snapshot's layer tar taken from a node (RemoteRuntimeOptions.exportMaxBytes). */
  exportMaxBytes?: number;
  log?: (msg: string) => void;
}

/** How long an agent may take to answer PUT /env before its sandbox is taken for broken (as a create waits). */
const AGENT_ENV_TIMEOUT_MS = 2000;

/** A sandbox that did not take its create's env (set through the relay): destroyed, the next one is asked for. */
class EnvRefused extends Error {
  constructor(readonly error: ServiceError) {
    super(error.message);
  }
}

/** Creates that start within this many ms share one read of the nodes' commitments (prepareTake). */
const USAGE_SHARE_MS = 5;
/** Placement uses a read of the commitments begun at most this long ago (a create's own prepareTake's). */
const USAGE_REUSE_MS = 100;
/** How long a recorded sandbox is remembered for reads begun before its row (well past USAGE_REUSE_MS). */
const LATELY_MS = 2000;

/** Placement: a node that holds a sandbox's layers is preferred while it is at most this much more committed (memory, as a fraction) than the least committed. */
const LAYERS_PREFERENCE = 0.1;
/**
 * Placement: a node with a ready sandbox of the key asked counts as this much less committed (on top
 * of the layers', which it holds too), so it comes first among nodes about as committed. Small,
 * because a node's pool refills from the demand it sees: a large (or unbounded) preference sends
 * create after create to the node whose pool warmed first while the others, seeing none, never warm;
 * a small one lets the next node take a create (a cold one), whose pool then warms as well, and
 * from then on every create is served ready wherever it goes.
 */
const WARM_PREFERENCE = 0.05;

interface Known {
  row: NodeRow;
  remote: RemoteRuntime;
  /** The layers it holds, as last read (for the digest `layersDigest`); read again when the digest changes. */
  layers?: { digest: string; ids: Set<string> };
  readingLayers?: boolean;
}

/**
 * The runtime of a cluster: every verb goes to the node that holds the sandbox (RemoteRuntime), and
 * a create goes to the node placement picks. Nodes come from the store's registry (they register
 * and heartbeat themselves); a node whose lease ran out takes nothing new and its sandboxes answer
 * NODE_UNAVAILABLE until it is back.
 *
 * Placement: among active (not cordoned or draining) nodes with a lease, those with room for the
 * sandbox (cores and memory of what their live sandboxes hold, within the overcommit ratios; disk
 * and the number of sandboxes without), the one whose memory would be least committed, a node
 * holding its layers counting as a tenth less and one with a ready sandbox of its key in its warm
 * pool (as it reported) a twentieth less again, then the one with fewer sandboxes. What this process created or took and the
 * services have not recorded yet (a create in flight) counts as well: the store's rows count the
 * rest. The nodes' ready sandboxes count against no one until taken (their pools' budgets bound them).
 */
export class ClusterRuntime implements Runtime {
  private readonly nodes = new Map<string, Known>();
  /** Sandboxes created here and not yet recorded by the services, with what they hold (`warm`: it came ready from the node's pool). */
  private readonly reserved = new Map<string, { nodeId: string; resources: SandboxResources; warm?: boolean }>();
  /** Asks for a ready sandbox under way: the node is picked, the id not known yet; they count against the node as reserved ones do. */
  private readonly asking = new Set<{ nodeId: string; resources: SandboxResources }>();
  /** Sandboxes recorded in the last LATELY_MS, in order: a read of the commitments begun before may lack them. */
  private readonly lately = new Map<string, { nodeId: string; resources: SandboxResources; at: number }>();
  /** The read of the nodes' commitments the last prepareTake began. */
  private prepared: { startedAt: number; usage: Promise<Record<string, SandboxUsage>> } | undefined;
  /**
   * Ready sandboxes this process took from each node, per warm key, since the node's last report
   * (its row's version): placement counts them off what the node reported, so a burst goes to a
   * node with ready sandboxes only for as many as it has.
   */
  private readonly takenSince = new Map<string, { version: number; byKey: Map<string, number> }>();
  /** The node of sandboxes this process has placed or looked up. */
  private readonly nodeById = new Map<string, string>();
  /**
   * The node that listed a sandbox no row records (a leftover, for reconcile to destroy there). Only
   * a fallback: a node's listing is its own word, and a node must not draw another's sandboxes (their
   * calls, their agents' traffic) to itself by listing them.
   */
  private readonly listedOn = new Map<string, string>();
  private refreshedAt = 0;
  private refreshing?: Promise<void>;
  private readonly oomWatchers = new Set<(id: string, kills: number) => void>();
  private readonly oomStops = new Map<string, () => void>();
  private readonly log: (msg: string) => void;
  /** This process's name in its claims (services/orphans.ts). */
  readonly owner = randomUUID();
  private claimTimer: NodeJS.Timeout | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private claimSoonTimer: NodeJS.Timeout | undefined;

  /** A new sandbox is claimed within half a second, not at the next round (creates come in bursts: one claim each node). */
  private claimSoon(): void {
    if (this.claimSoonTimer || (this.o.claimEveryMs ?? 30_000) === 0) return;
    this.claimSoonTimer = setTimeout(() => {
      this.claimSoonTimer = undefined;
      void this.claimAll();
    }, 500);
    this.claimSoonTimer.unref();
  }

  constructor(private readonly o: ClusterRuntimeOptions) {
    this.log = o.log ?? (() => undefined);
  }

  /**
   * Claims on every node what this process holds there and the store does not record yet (its
   * creates under way, the ready sandboxes it took from the node's pool), so that the node does not collect them as no one's; a
   * claim lasts four rounds, so a process that dies stops claiming and its leftovers go.
   */
  async claimAll(): Promise<void> {
    const every = this.o.claimEveryMs ?? 30_000;
    const ttl = Math.max(1, Math.min(600, Math.ceil((every * 4) / 1000)));
    const byNode = new Map<string, string[]>();
    for (const [id, r] of this.reserved) byNode.set(r.nodeId, [...(byNode.get(r.nodeId) ?? []), id]);
    await Promise.all(
      [...this.nodes.entries()].map(([nodeId, k]) =>
        this.leased(k.row) ? k.remote.claim(this.owner, byNode.get(nodeId) ?? [], ttl).catch((err: unknown) => this.log(`claiming sandboxes on node ${nodeId} failed: ${String(err)}`)) : undefined,
      ),
    );
  }

  /** Reads the node list again when it is older than refreshMs (or at once with `force`). */
  async refresh(force = false): Promise<void> {
    if (!force && Date.now() - this.refreshedAt < (this.o.refreshMs ?? 2000)) return;
    this.refreshing ??= (async () => {
      try {
        let rows: NodeRow[];
        try {
          rows = await this.o.store.nodes.list();
          this.storeAway = false;
        } catch (err) {
          // The store is away (a restart of PostgreSQL): the nodes as last read are served as they
          // were, and the leases they had are not held against them (nodes cannot renew them meanwhile).
          if (this.nodes.size === 0) throw err;
          if (!this.storeAway) this.log(`the node list cannot be read (${String(err)}); serving the nodes as last read`);
          this.storeAway = true;
          this.refreshedAt = Date.now();
          return;
        }
        const seen = new Set<string>();
        for (const row of rows) {
          seen.add(row.id);
          const known = this.nodes.get(row.id);
          if (known && known.row.url === row.url) {
            known.row = row;
            continue;
          }
          if (known) {
            this.stopOom(row.id);
            this.guards.delete(known.remote);
            void known.remote.close();
          }
          const remote = new RemoteRuntime({ nodeId: row.id, url: row.url, auth: this.o.auth, layers: this.o.layers, unpack: unpackLayer, ca: this.o.ca, exportMaxBytes: this.o.exportMaxBytes, log: this.log });
          this.nodes.set(row.id, { row, remote });
          if (this.oomWatchers.size > 0) this.startOom(row.id, remote);
        }
        for (const id of [...this.nodes.keys()]) {
          if (!seen.has(id)) {
            this.stopOom(id);
            const gone = this.nodes.get(id);
            if (gone) {
              this.guards.delete(gone.remote);
              void gone.remote.close();
            }
            this.nodes.delete(id);
          }
        }
        this.refreshedAt = Date.now();
        this.failLostCalls();
        for (const k of this.nodes.values()) this.readLayers(k);
      } finally {
        this.refreshing = undefined;
      }
    })();
    await this.refreshing;
  }

  /** Reads, in the background, the layers of a node whose reported set changed (placement prefers nodes that hold a sandbox's). */
  private readLayers(k: Known): void {
    const digest = k.row.layersDigest;
    if (!digest || k.layers?.digest === digest || k.readingLayers || !this.leased(k.row)) return;
    k.readingLayers = true;
    k.remote
      .layerIds()
      .then(
        (ids) => void (k.layers = { digest, ids: new Set(ids) }),
        (err: unknown) => this.log(`node ${k.row.id}: cannot read its layers: ${String(err)}`),
      )
      .finally(() => (k.readingLayers = false));
  }

  /** The nodes as this process last read them. */
  known(): NodeRow[] {
    return [...this.nodes.values()].map((n) => n.row);
  }

  nodeOf(id: string): string | undefined {
    return this.reserved.get(id)?.nodeId ?? this.nodeById.get(id);
  }

  /**
   * Its row counts it now. Not before: between the node's answer and the row (creates of one
   * organization wait for each other to insert theirs, a burst's for long) the reservation must go
   * on counting it, or placement sees that node emptier than it is and sends it the next ones too.
   */
  recorded(id: string): void {
    const r = this.reserved.get(id);
    this.reserved.delete(id);
    if (!r) return;
    const now = performance.now();
    this.lately.set(id, { nodeId: r.nodeId, resources: r.resources, at: now });
    const keep = Math.max(LATELY_MS, 2 * (this.o.usageReuseMs ?? USAGE_REUSE_MS));
    for (const [k, v] of this.lately) {
      if (now - v.at <= keep) break;
      this.lately.delete(k);
    }
  }

  /**
   * A create is about to take a sandbox: what placement needs of the store (each node's
   * commitments) is read now, while the create is admitted, instead of after. Creates that start
   * within USAGE_SHARE_MS share one read.
   */
  prepareTake(): void {
    const now = performance.now();
    if (this.prepared && now - this.prepared.startedAt <= USAGE_SHARE_MS) return;
    this.prepared = this.readUsage(now);
  }

  private readUsage(now: number): { startedAt: number; usage: Promise<Record<string, SandboxUsage>> } {
    const usage = this.o.store.sandboxes.usageByNode();
    usage.catch(() => undefined);
    return { startedAt: now, usage };
  }

  /**
   * The node of a sandbox as its row (just read by the caller) records it: the calls about it then
   * need no read of their own (holder). A row in state creating may be a create's placeholder, which
   * names no node: not taken.
   */
  remember(row: Pick<SandboxRow, 'id' | 'nodeId' | 'status'>): void {
    if (row.status === 'creating' || row.status === 'deleted') return;
    this.nodeById.set(row.id, row.nodeId);
  }

  /**
   * Whether the node's lease ran when the list was last read (every refreshMs): between two reads
   * the answer holds still, so a node that heartbeats on time is never taken for lost because the
   * list is a second old; one that stopped is seen at the first read after its lease ran out.
   */
  private leased(row: NodeRow): boolean {
    return Date.parse(row.leaseExpiresAt) > (this.refreshedAt || Date.now());
  }

  nodeUp(nodeId: string): boolean {
    const known = this.nodes.get(nodeId);
    return known !== undefined && (this.storeAway || this.leased(known.row));
  }

  /** The last read of the node list failed (the store is away). */
  private storeAway = false;

  /** The node that holds `id`, answering; undefined when no node holds it. */
  private async holder(id: string): Promise<RemoteRuntime | undefined> {
    let nodeId = this.nodeById.get(id);
    if (!nodeId) {
      nodeId = (await this.o.store.sandboxes.byId(id))?.nodeId ?? this.listedOn.get(id);
      if (!nodeId) return undefined;
      this.nodeById.set(id, nodeId);
    }
    await this.refresh();
    let known = this.nodes.get(nodeId);
    if (!known) throw new ServiceError('NODE_UNAVAILABLE', `sandbox ${id} is on node ${nodeId}, which has left the cluster`, { id, node: nodeId });
    // A node back since the last read (another replica may have put a sandbox on it already) is
    // served at once, not up to refreshMs later: the list is read again, at most every quarter second.
    if (!this.storeAway && !this.leased(known.row) && Date.now() - this.refreshedAt >= 250) {
      await this.refresh(true);
      known = this.nodes.get(nodeId) ?? known;
    }
    if (!this.storeAway && !this.leased(known.row)) throw new ServiceError('NODE_UNAVAILABLE', `sandbox ${id} is on node ${nodeId}, which is not answering; it is served again when the node is back`, { id, node: nodeId, retry_after: 10 });
    return this.guarded(nodeId, known.remote);
  }

  /** Calls under way to each node, to fail at once when its lease runs out (see whileLeased). */
  private readonly inFlight = new Map<string, Set<(err: Error) => void>>();
  private readonly guards = new Map<RemoteRuntime, RemoteRuntime>();

  /**
   * A call to a node that is cut off waits for its own timeout (30 s for most verbs): a node whose
   * lease runs out meanwhile (the node list is read every refreshMs) fails its calls under way at
   * once with NODE_UNAVAILABLE, as the calls after it do. What the node does with a call it gets
   * late is its own (a create it finishes is no one's, and it collects it: services/orphans.ts).
   */
  private whileLeased<T>(nodeId: string, p: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let set = this.inFlight.get(nodeId);
      if (!set) this.inFlight.set(nodeId, (set = new Set()));
      const waiters = set;
      waiters.add(reject);
      p.then(resolve, reject).finally(() => {
        waiters.delete(reject);
        if (waiters.size === 0 && this.inFlight.get(nodeId) === waiters) this.inFlight.delete(nodeId);
      });
    });
  }

  /** Nodes seen lost at the last read, so that onNodeLost is told once per loss. */
  private readonly lost = new Set<string>();
  /** Told when a node is first seen lost (its lease ran out, or it left the registry). */
  onNodeLost?: (nodeId: string) => void;

  /** Fails the calls under way to nodes that left or whose lease ran out (after each read of the list). */
  private failLostCalls(): void {
    if (this.storeAway) return;
    for (const [nodeId, k] of this.nodes) {
      if (this.leased(k.row)) this.lost.delete(nodeId);
      else if (!this.lost.has(nodeId)) {
        this.lost.add(nodeId);
        this.onNodeLost?.(nodeId);
      }
    }
    for (const [nodeId, waiters] of this.inFlight) {
      const known = this.nodes.get(nodeId);
      if (known && this.leased(known.row)) continue;
      const err = new ServiceError('NODE_UNAVAILABLE', `node ${nodeId} stopped answering during the call; it is served again when the node is back`, { node: nodeId, retry_after: 10 });
      for (const reject of waiters) reject(err);
    }
  }

  /** The node's runtime, every call of which is raced against its lease (whileLeased). */
  private guarded(nodeId: string, remote: RemoteRuntime): RemoteRuntime {
    let g = this.guards.get(remote);
    if (!g) {
      g = new Proxy(remote, {
        get: (target, key) => {
          const v: unknown = Reflect.get(target, key);
          if (typeof v !== 'function') return v;
          return (...args: unknown[]) => {
            const r: unknown = (v as (...a: unknown[]) => unknown).apply(target, args);
            return r instanceof Promise ? this.whileLeased(nodeId, r) : r;
          };
        },
      });
      this.guards.set(remote, g);
    }
    return g;
  }

  private async must(id: string): Promise<RemoteRuntime> {
    const r = await this.holder(id);
    if (!r) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
    return r;
  }

  /** Ready sandboxes of `key` the node reported and this process has not taken since. */
  private readyOn(row: NodeRow, key: string): number {
    const t = this.takenSince.get(row.id);
    const taken = t && t.version === row.version ? (t.byKey.get(key) ?? 0) : 0;
    return Math.max(0, (row.warm[key] ?? 0) - taken);
  }

  private noteTaken(nodeId: string, key: string): void {
    const row = this.nodes.get(nodeId)?.row;
    if (!row) return;
    let t = this.takenSince.get(nodeId);
    if (!t || t.version !== row.version) this.takenSince.set(nodeId, (t = { version: row.version, byKey: new Map() }));
    t.byKey.set(key, (t.byKey.get(key) ?? 0) + 1);
  }

  /**
   * The node a new sandbox goes to (see the class comment). `warmKey`: the key of a sandbox asked
   * from the nodes' warm pools (clusterWarmKeyOf), whose holders are preferred. `hold` is called
   * with the node as it is picked, before anything else runs: what it holds there counts for the
   * next placement (concurrent creates of a burst otherwise all see the same commitments, and go to
   * the same node).
   */
  async place(resources: SandboxResources, layerIds: string[] = [], warmKey?: string, hold?: (nodeId: string) => void): Promise<string> {
    await this.refresh();
    // The read prepareTake began for this create (or one begun now). What this process placed and
    // has not recorded is added (reserved, asking), and so is what it recorded since the read
    // began: those rows may be missing from it. (At the boundary one may count twice: never less.)
    const now = performance.now();
    const read = this.prepared && now - this.prepared.startedAt <= (this.o.usageReuseMs ?? USAGE_REUSE_MS) ? this.prepared : this.readUsage(now);
    const usage = await read.usage;
    const extra = new Map<string, SandboxUsage>();
    const since = [...this.lately.values()].filter((r) => r.at >= read.startedAt);
    for (const r of [...this.reserved.values(), ...this.asking, ...since]) {
      const u = extra.get(r.nodeId) ?? { active: 0, activeVcpu: 0, activeMemoryMb: 0, stopped: 0, diskGb: 0 };
      u.active += 1;
      u.activeVcpu += r.resources.vcpu;
      u.activeMemoryMb += r.resources.memoryMb;
      u.diskGb += r.resources.diskGb;
      extra.set(r.nodeId, u);
    }
    const over = this.o.overcommit ?? { cpu: 16, memory: 1.5 };
    let best: { id: string; score: number; sandboxes: number } | undefined;
    for (const { row, layers } of this.nodes.values()) {
      if (row.status !== 'active' || !this.leased(row)) continue;
      const u = usage[row.id];
      const x = extra.get(row.id);
      const vcpu = (u?.activeVcpu ?? 0) + (x?.activeVcpu ?? 0) + resources.vcpu;
      const memoryMb = (u?.activeMemoryMb ?? 0) + (x?.activeMemoryMb ?? 0) + resources.memoryMb;
      const diskGb = (u?.diskGb ?? 0) + (x?.diskGb ?? 0) + resources.diskGb;
      const sandboxes = (u?.active ?? 0) + (u?.stopped ?? 0) + (x?.active ?? 0) + 1;
      const c = row.capacity;
      if (vcpu > c.vcpu * over.cpu || memoryMb > c.memoryMb * over.memory || diskGb > c.diskGb || sandboxes > c.maxSandboxes) continue;
      const memory = memoryMb / c.memoryMb;
      // A node that already holds the sandbox's layers boots it without fetching them first.
      // It counts as that much less committed (LAYERS_PREFERENCE of its memory), so sandboxes of one
      // template gather on the nodes that have it without piling up there.
      // A node whose set is not read yet (it just joined, or its answer failed) is not held back:
      // the preference only ever favours, it never piles a burst onto the first node read.
      const has = layerIds.length > 0 && (layers === undefined || layerIds.every((l) => layers.ids.has(l)));
      // The order among nodes about as committed: first one with a ready sandbox of the key (it
      // holds the layers too, so it gets both preferences), then one with the layers, then the
      // least committed. A ready one is handed over in milliseconds, where a boot takes a few
      // hundred on a node with the layers and seconds (a fetch) on one without; and what it hands
      // over already runs there (its pool paid for it). It cannot pile a burst up: only as many go
      // to it as it reported ready, less what this process took since. Both preferences are
      // bounded, so the least committed node still wins when the others are well ahead.
      const warm = warmKey !== undefined && this.readyOn(row, warmKey) > 0;
      const score = memory - (has ? LAYERS_PREFERENCE : 0) - (warm ? WARM_PREFERENCE : 0);
      if (!best || score < best.score || (score === best.score && (sandboxes < best.sandboxes || (sandboxes === best.sandboxes && row.id < best.id)))) {
        best = { id: row.id, score, sandboxes };
      }
    }
    if (!best) {
      const up = [...this.nodes.values()].filter((n) => n.row.status === 'active' && this.leased(n.row)).length;
      throw new ServiceError('NO_CAPACITY', up === 0 ? 'no node of the cluster is up to take the sandbox; try again later' : `no node has room for a sandbox of ${resources.vcpu} vCPU, ${resources.memoryMb} MB and ${resources.diskGb} GB now; try again later`, { retry_after: 5 });
    }
    hold?.(best.id);
    return best.id;
  }

  async setupHost(): Promise<void> {
    await this.refresh(true);
    // Read again every refreshMs even when nothing calls: listings say which nodes are away.
    this.refreshTimer ??= setInterval(() => void this.refresh().catch(() => undefined), this.o.refreshMs ?? 2000);
    this.refreshTimer.unref();
    const every = this.o.claimEveryMs ?? 30_000;
    if (every > 0 && !this.claimTimer) {
      this.claimTimer = setInterval(() => void this.refresh().then(() => this.claimAll(), () => undefined), every);
      this.claimTimer.unref();
    }
  }

  async create(spec: SandboxSpec): Promise<void> {
    let nodeId = this.nodeById.get(spec.id);
    if (!nodeId) {
      nodeId = await this.place(spec.resources, spec.layerIds, undefined, (picked) => {
        this.nodeById.set(spec.id, picked);
        this.reserved.set(spec.id, { nodeId: picked, resources: spec.resources });
      });
      this.claimSoon();
    }
    const known = this.nodes.get(nodeId);
    try {
      if (!known) throw new ServiceError('NODE_UNAVAILABLE', `node ${nodeId} has left the cluster`, { node: nodeId });
      await this.whileLeased(nodeId, known.remote.create(spec));
    } catch (err) {
      // The node undid what it made; the id may be placed again.
      this.reserved.delete(spec.id);
      this.nodeById.delete(spec.id);
      throw err;
    }
  }

  /**
   * A running sandbox of `spec` from the warm pool of the node placement picks (preferring one that
   * reported ready sandboxes of its key), or booted there now: the node gives its id. Held as
   * reserved (claimed on the node, counted against it) until the services record it.
   */
  async takeReady(spec: SandboxSpec, pool: { id: string; label: string }, agentEnv?: Record<string, string>): Promise<string> {
    // A sandbox that did not take the env here (the fallback below) is destroyed, and the next one
    // asked for, as a create does on one machine; the third fails the create.
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.takeOnce(spec, pool, agentEnv);
      } catch (err) {
        if (!(err instanceof EnvRefused) || attempt >= 3) throw err instanceof EnvRefused ? err.error : err;
      }
    }
  }

  private async takeOnce(spec: SandboxSpec, pool: { id: string; label: string }, agentEnv?: Record<string, string>): Promise<string> {
    const key = clusterWarmKeyOf(spec, pool.id).key;
    const ask = { nodeId: '', resources: spec.resources };
    const nodeId = await this.place(spec.resources, spec.layerIds, key, (picked) => {
      ask.nodeId = picked;
      this.asking.add(ask);
      this.noteTaken(picked, key);
    });
    try {
      const known = this.nodes.get(nodeId);
      if (!known) throw new ServiceError('NODE_UNAVAILABLE', `node ${nodeId} has left the cluster`, { node: nodeId });
      const { id, warm, ours, envSet } = await this.whileLeased<{ id: string; warm: boolean; ours?: boolean; envSet?: boolean }>(nodeId, known.remote.askWarm(spec, pool, agentEnv)).catch((err: unknown) => {
        // A node of an earlier version has no warm pool to ask: it boots one of an id given here,
        // as every create did before (so control may be upgraded before its nodes).
        if (!(err instanceof ServiceError && err.code === 'ROUTE_NOT_FOUND')) throw err;
        return this.bootOn(nodeId, known, spec);
      });
      // The node picks the id. One this process or the store knows already is another sandbox
      // (a node taken over naming one of another node's): taken, it would draw that sandbox's calls
      // and agent traffic to this node, and the create's undo would destroy it. Refused, untouched
      // from here. (The node set the env on it already, as it is told: a node taken over reads all
      // it hosts anyway.)
      if (!ours && (this.nodeById.has(id) || this.reserved.has(id) || (await this.o.store.sandboxes.byId(id)))) {
        throw new ServiceError('RUNTIME_ERROR', `node ${nodeId} answered with a sandbox that is not a new one; try again`).withDetail(`node ${nodeId} answered ${id}, which is known already`);
      }
      this.nodeById.set(id, nodeId);
      this.reserved.set(id, { nodeId, resources: spec.resources, warm });
      if (warm) this.warmHits++;
      else this.warmMisses++;
      this.claimSoon();
      // A node that did not set the env (of an earlier version, or env_vars too big for an ask):
      // set here, through the relay, as every create did before.
      if (agentEnv && !envSet) await this.setAgentEnv(nodeId, known, id, agentEnv);
      return id;
    } finally {
      this.asking.delete(ask);
    }
  }

  /** PUT /env on the agent of `id` through its node's relay; a sandbox that does not take it is destroyed. */
  private async setAgentEnv(nodeId: string, known: Known, id: string, env: Record<string, string>): Promise<void> {
    try {
      const res = await agentJson((timeoutMs) => known.remote.dialAgent(id, timeoutMs), 'PUT', '/env', { env_vars: env }, AGENT_ENV_TIMEOUT_MS);
      if (res.status !== 200) throw new Error(`agent answered ${res.status}`);
    } catch (err) {
      this.log(`node ${nodeId}: sandbox ${id} did not take its env (${describeCause(err)}); destroying it`);
      await known.remote.destroy(id).catch(() => undefined);
      this.reserved.delete(id);
      this.nodeById.delete(id);
      throw new EnvRefused(new ServiceError('RUNTIME_ERROR', 'the sandbox did not answer; try again').withDetail(`sandbox ${id} on node ${nodeId}: ${describeCause(err)}`));
    }
  }

  /** A sandbox booted on `nodeId` with an id picked here (`ours`), as creates were before the nodes' pools. */
  private async bootOn(nodeId: string, known: Known, spec: SandboxSpec): Promise<{ id: string; warm: boolean; ours: true; envSet?: boolean }> {
    const id = newSandboxId();
    this.nodeById.set(id, nodeId);
    this.reserved.set(id, { nodeId, resources: spec.resources });
    this.claimSoon();
    try {
      await this.whileLeased(nodeId, known.remote.create(withSandboxId(spec, id)));
      await waitForAgent((timeoutMs) => known.remote.dialAgent(id, timeoutMs), this.o.agentReadyTimeoutMs ?? 15_000);
      return { id, warm: false, ours: true };
    } catch (err) {
      await known.remote.destroy(id).catch(() => undefined);
      this.reserved.delete(id);
      this.nodeById.delete(id);
      throw err;
    }
  }

  /**
   * Every node's warm pool forgets `poolId` (a template deleted or rebuilt). A node that does not
   * answer keeps its ready sandboxes of it until its pool retires the key (a rebuilt template's
   * next ask, or too many keys): they are never handed out for a deleted template, no create asks.
   */
  async dropWarm(poolId: string): Promise<void> {
    await this.refresh();
    await Promise.all(
      [...this.nodes.values()].map((k) =>
        this.leased(k.row) ? k.remote.dropWarm(poolId).catch((err: unknown) => this.log(`node ${k.row.id}: its warm pool could not drop ${poolId}: ${String(err)}`)) : undefined,
      ),
    );
  }

  /** Creates this process had served by a node's ready sandbox, and booted for them (the metrics' pool hits and misses). */
  warmHits = 0;
  warmMisses = 0;

  /** Ready sandboxes the nodes reported, all keys together, as last read (the metrics' pool gauge). */
  warmReady(): number {
    let n = 0;
    for (const { row } of this.nodes.values()) if (row.status === 'active' && this.leased(row)) for (const v of Object.values(row.warm)) n += v;
    return n;
  }

  wasWarm(id: string): boolean {
    return this.reserved.get(id)?.warm === true;
  }

  async start(spec: SandboxSpec): Promise<void> {
    await (await this.must(spec.id)).start(spec);
  }
  async pause(id: string): Promise<void> {
    await (await this.must(id)).pause(id);
  }
  async resume(id: string): Promise<void> {
    await (await this.must(id)).resume(id);
  }
  async stop(id: string): Promise<void> {
    await (await this.must(id)).stop(id);
  }

  async destroy(id: string): Promise<void> {
    try {
      const r = await this.holder(id);
      if (r) await r.destroy(id);
    } finally {
      // Also when the node could not be told: a sandbox no row holds is then claimed no more, and
      // its node collects it after the grace (one with a row is found again through the store).
      this.reserved.delete(id);
      this.nodeById.delete(id);
      this.listedOn.delete(id);
    }
  }

  async status(id: string): Promise<RuntimeStatus> {
    const r = await this.holder(id);
    return r ? r.status(id) : 'missing';
  }

  /** By node, one call each; a node that is not answering fails the whole call (its sandboxes are not "missing"). */
  async statuses(ids: string[]): Promise<Map<string, RuntimeStatus>> {
    const byNode = new Map<RemoteRuntime, string[]>();
    const out = new Map<string, RuntimeStatus>();
    for (const id of ids) {
      const r = await this.holder(id);
      if (!r) out.set(id, 'missing');
      else byNode.set(r, [...(byNode.get(r) ?? []), id]);
    }
    for (const [r, group] of byNode) for (const [id, st] of await r.statuses(group)) out.set(id, st);
    // In the order asked, as the other runtimes answer.
    return new Map(ids.map((id) => [id, out.get(id) ?? 'missing']));
  }

  /** Every sandbox the nodes that answer hold. */
  async list(): Promise<string[]> {
    await this.refresh();
    const all = new Set<string>();
    for (const { row, remote } of this.nodes.values()) {
      if (!this.leased(row)) continue;
      try {
        for (const id of await remote.list()) {
          all.add(id);
          if (!this.listedOn.has(id)) this.listedOn.set(id, row.id);
        }
      } catch (err) {
        this.log(`node ${row.id}: cannot list its sandboxes: ${String(err)}`);
      }
    }
    return [...all].sort();
  }

  async stats(id: string): Promise<SandboxStats> {
    return (await this.must(id)).stats(id);
  }
  async listeningPorts(id: string): Promise<ListeningPort[]> {
    const r = await this.holder(id);
    return r ? r.listeningPorts(id) : [];
  }
  async setEgress(id: string, policy: EgressPolicy): Promise<void> {
    await (await this.must(id)).setEgress(id, policy);
  }
  async resetDisk(id: string, diskGb: number): Promise<void> {
    await (await this.must(id)).resetDisk(id, diskGb);
  }
  async exportLayer(id: string, dest: string, opts?: { maxBytes?: number }): Promise<{ bytes: number; allocated: number; entries: number; frozenMs: number }> {
    return (await this.must(id)).exportLayer(id, dest, opts);
  }
  runStep(opts: StepRunOptions): Promise<{ exitCode: number; timedOut: boolean }> {
    return Promise.reject(new ServiceError('INVALID_STATE', `build steps run on control's machine, not on the nodes (build step ${opts.id})`));
  }

  agentSocket(id: string): string {
    throw new ServiceError('RUNTIME_ERROR', `sandbox ${id} runs on a node of the cluster: its agent is reached through the node`);
  }

  async dialAgent(id: string, timeoutMs?: number): Promise<Socket> {
    return (await this.must(id)).dialAgent(id, timeoutMs);
  }

  watchOom(onKill: (id: string, kills: number) => void): () => void {
    this.oomWatchers.add(onKill);
    for (const [id, { remote }] of this.nodes) if (!this.oomStops.has(id)) this.startOom(id, remote);
    return () => {
      this.oomWatchers.delete(onKill);
      if (this.oomWatchers.size === 0) for (const id of [...this.oomStops.keys()]) this.stopOom(id);
    };
  }

  private startOom(nodeId: string, remote: RemoteRuntime): void {
    this.oomStops.set(
      nodeId,
      remote.watchOom((id, kills) => {
        // Only the node that holds the sandbox speaks for it.
        void (async () => {
          const holder = this.nodeById.get(id) ?? (await this.o.store.sandboxes.byId(id))?.nodeId;
          if (holder !== nodeId) return this.log(`node ${nodeId} reported an OOM kill of sandbox ${id}, which it does not hold: ignored`);
          for (const w of this.oomWatchers) w(id, kills);
        })().catch((err: unknown) => this.log(`node ${nodeId}: an OOM report of ${id} could not be checked: ${String(err)}`));
      }),
    );
  }

  private stopOom(nodeId: string): void {
    this.oomStops.get(nodeId)?.();
    this.oomStops.delete(nodeId);
  }

  async close(): Promise<void> {
    if (this.claimTimer) clearInterval(this.claimTimer);
    if (this.refreshTimer) clearInterval(this.refreshTimer);
    if (this.claimSoonTimer) clearTimeout(this.claimSoonTimer);
    for (const id of [...this.oomStops.keys()]) this.stopOom(id);
    await Promise.all([...this.nodes.values()].map((k) => k.remote.close()));
  }
}
