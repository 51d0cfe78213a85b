import { ServiceError } from '@sandboxd/protocol';
import type { Node } from '../node/types.js';
import type { RemoteNode } from '../node/remote-node.js';
import type { NodeRow, Store } from '../store/types/index.js';
import type { Candidate } from './choose.js';
import type { NodeSet } from './node-set.js';

export interface RegisteredNodesOptions {
  store: Pick<Store, 'nodes'>;
  /** The client of a registered node (its URL as the registry has it). */
  connect: (row: NodeRow) => RemoteNode;
  /** How old the node list may be before a call reads it again (default 2 s). */
  refreshMs?: number;
  log: (msg: string) => void;
}

interface Known {
  row: NodeRow;
  remote: RemoteNode;
  /** The layers it holds, as last read (for the digest `layersDigest`); read again when the digest changes. */
  layers?: { digest: string; ids: Set<string> };
  readingLayers?: boolean;
  /** Ready sandboxes this process took from it per warm key since its last report (its row's version). */
  taken?: { version: number; byKey: Map<string, number> };
}

/** A read of the node list asked for afresh (candidates(true)) is skipped when the last one is this recent. */
const FRESH_READ_MS = 250;
/**
 * The nodes of a cluster, from the store's registry (nodes register and heartbeat themselves). A
 * node whose lease ran out takes nothing new and its sandboxes answer NODE_UNAVAILABLE until it is
 * back; calls under way to it fail at once when its lease is seen to run out. While the store is
 * away (a restart of PostgreSQL), the nodes as last read are served as they were, and the leases
 * they had are not held against them (nodes cannot renew them meanwhile).
 */
export class RegisteredNodes implements NodeSet {
  readonly bounded = true;
  private readonly nodes = new Map<string, Known>();
  private refreshedAt = 0;
  private refreshing?: Promise<void>;
  private refreshTimer: NodeJS.Timeout | undefined;
  /** The last read of the node list failed (the store is away). */
  private storeAway = false;
  /** When the store was first seen away, and when it answered again (0: not since this process started). */
  private storeAwaySince = 0;
  private storeBackAt = 0;
  /** Nodes seen lost at the last read, so that onLost is told once per loss. */
  private readonly lost = new Set<string>();
  /** Calls under way to each node, to fail at once when its lease runs out. */
  private readonly inFlight = new Map<string, Set<(err: Error) => void>>();
  private readonly handles = new Map<string, Node>();
  private readonly oomWatchers = new Set<(id: string, kills: number, nodeId: string) => void>();
  private readonly oomStops = new Map<string, () => void>();
  private readonly lostListeners: Array<(nodeId: string) => void> = [];

  constructor(private readonly o: RegisteredNodesOptions) {}

  async start(): Promise<void> {
    await this.refresh(true);
    // Read again every refreshMs even when nothing calls: listings say which nodes are away.
    this.refreshTimer ??= setInterval(() => void this.refresh().catch(() => undefined), this.o.refreshMs ?? 2000);
    this.refreshTimer.unref();
  }

  /** The nodes as this process last read them. */
  known(): NodeRow[] {
    return [...this.nodes.values()].map((n) => n.row);
  }

  /** Reads the node list again when it is older than refreshMs (or at once with `force`). */
  async refresh(force = false): Promise<void> {
    if (!force && Date.now() - this.refreshedAt < (this.o.refreshMs ?? 2000)) return;
    this.refreshing ??= this.read().finally(() => (this.refreshing = undefined));
    await this.refreshing;
  }

  private async read(): Promise<void> {
    let rows: NodeRow[];
    try {
      rows = await this.o.store.nodes.list();
      if (this.storeAway) this.storeBackAt = Date.now();
      this.storeAway = false;
    } catch (err) {
      if (this.nodes.size === 0) throw err;
      if (!this.storeAway) {
        this.o.log(`the node list cannot be read (${String(err)}); serving the nodes as last read`);
        this.storeAwaySince = Date.now();
      }
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
      if (known) this.forget(row.id, known);
      const remote = this.o.connect(row);
      this.nodes.set(row.id, { row, remote });
      if (this.oomWatchers.size > 0) this.startOom(row.id, remote);
    }
    for (const [id, known] of [...this.nodes]) if (!seen.has(id)) this.forget(id, known);
    this.refreshedAt = Date.now();
    this.failLostCalls();
    for (const k of this.nodes.values()) this.readLayers(k);
  }

  private forget(id: string, known: Known): void {
    this.stopOom(id);
    this.nodes.delete(id);
    void known.remote.close();
  }

  /**
   * Whether the node's lease ran when the list was last read (every refreshMs): between two reads
   * the answer holds still, so a node that heartbeats on time is never taken for lost because the
   * list is a second old; one that stopped is seen at the first read after its lease ran out.
   */
  private leased(row: NodeRow): boolean {
    const at = this.refreshedAt || Date.now();
    const expires = Date.parse(row.leaseExpiresAt);
    if (expires > at) return true;
    // The store was away: no node could renew its lease meanwhile (its heartbeats go to the store).
    // A lease that still ran when the store went away counts again from its return, whole; a node
    // lost before the outage stays lost.
    const lengthMs = expires - Date.parse(row.heartbeatAt);
    return this.storeBackAt > 0 && expires > this.storeAwaySince && at < this.storeBackAt + lengthMs;
  }

  up(nodeId: string): boolean {
    const known = this.nodes.get(nodeId);
    return known !== undefined && (this.storeAway || this.leased(known.row));
  }

  async candidates(fresh = false): Promise<Candidate[]> {
    await this.refresh(fresh && Date.now() - this.refreshedAt >= FRESH_READ_MS);
    const out = this.takers();
    // None up in a list read a while ago: a node that registered since (a cluster just started, a
    // node back) takes this create, not one up to refreshMs later. Read again, at most every quarter second.
    if (out.length === 0 && !this.storeAway && Date.now() - this.refreshedAt >= 250) {
      await this.refresh(true);
      return this.takers();
    }
    return out;
  }

  /** The nodes of the list as last read that take new sandboxes. */
  private takers(): Candidate[] {
    const out: Candidate[] = [];
    for (const k of this.nodes.values()) {
      if (k.row.status !== 'active' || !this.leased(k.row)) continue;
      out.push({ id: k.row.id, capacity: k.row.capacity, layers: k.layers?.ids, ready: (key) => this.readyOn(k, key) });
    }
    return out;
  }

  /** Whether any node is up and active (to say why none took a sandbox). */
  anyUp(): boolean {
    return [...this.nodes.values()].some((n) => n.row.status === 'active' && this.leased(n.row));
  }

  /** Ready sandboxes of `key` the node reported and this process has not taken since. */
  private readyOn(k: Known, key: string): number {
    const taken = k.taken && k.taken.version === k.row.version ? (k.taken.byKey.get(key) ?? 0) : 0;
    return Math.max(0, (k.row.warm[key] ?? 0) - taken);
  }

  /** This process asked `nodeId` for a sandbox of `key`: one of its reported ready ones is counted off. */
  noteTaken(nodeId: string, key: string): void {
    const k = this.nodes.get(nodeId);
    if (!k) return;
    if (!k.taken || k.taken.version !== k.row.version) k.taken = { version: k.row.version, byKey: new Map() };
    k.taken.byKey.set(key, (k.taken.byKey.get(key) ?? 0) + 1);
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
        (err: unknown) => this.o.log(`node ${k.row.id}: cannot read its layers: ${String(err)}`),
      )
      .finally(() => (k.readingLayers = false));
  }

  node(nodeId: string): Node {
    let h = this.handles.get(nodeId);
    if (!h) {
      h = this.handle(nodeId);
      this.handles.set(nodeId, h);
    }
    return h;
  }

  /** The node's client, once it is known and leased (read again when it may be back). */
  private async reach(nodeId: string): Promise<RemoteNode> {
    await this.refresh();
    let known = this.nodes.get(nodeId);
    if (!known) throw new ServiceError('NODE_UNAVAILABLE', `node ${nodeId} has left the cluster`, { node: nodeId });
    // A node back since the last read (another replica may have put a sandbox on it already) is
    // served at once, not up to refreshMs later: the list is read again, at most every quarter second.
    if (!this.storeAway && !this.leased(known.row) && Date.now() - this.refreshedAt >= 250) {
      await this.refresh(true);
      known = this.nodes.get(nodeId) ?? known;
    }
    if (!this.storeAway && !this.leased(known.row)) throw new ServiceError('NODE_UNAVAILABLE', `node ${nodeId} is not answering; its sandboxes are served again when it is back`, { node: nodeId, retry_after: 10 });
    return known.remote;
  }

  /** node(): every verb reaches the node's client, raced against its lease. */
  private handle(nodeId: string): Node {
    const via =
      <A extends unknown[], R>(call: (r: RemoteNode, ...args: A) => Promise<R>) =>
      async (...args: A): Promise<R> =>
        this.whileLeased(nodeId, call(await this.reach(nodeId), ...args));
    return {
      id: nodeId,
      take: via((r, ask) => r.take(ask)),
      dropWarm: via((r, poolId) => r.dropWarm(poolId)),
      start: via((r, spec) => r.start(spec)),
      receive: via((r, spec) => r.receive(spec)),
      pause: via((r, id) => r.pause(id)),
      resume: via((r, id) => r.resume(id)),
      stop: via((r, id) => r.stop(id)),
      destroy: via((r, id) => r.destroy(id)),
      status: via((r, id) => r.status(id)),
      statuses: via((r, ids) => r.statuses(ids)),
      list: via((r) => r.list()),
      stats: via((r, id) => r.stats(id)),
      listeningPorts: via((r, id) => r.listeningPorts(id)),
      setEgress: via((r, id, policy) => r.setEgress(id, policy)),
      resetDisk: via((r, id, diskGb) => r.resetDisk(id, diskGb)),
      exportLayer: via((r, id, dest, opts) => r.exportLayer(id, dest, opts)),
      dialAgent: via((r, id, timeoutMs) => r.dialAgent(id, timeoutMs)),
      layerIds: via((r) => r.layerIds()),
      watchOom: () => {
        throw new Error('watch the nodes through the node set (watchOom), not one handle');
      },
      close: async () => undefined,
    };
  }

  /**
   * A call to a node that is cut off waits for its own timeout (30 s for most verbs): a node whose
   * lease runs out meanwhile fails its calls under way at once with NODE_UNAVAILABLE, as the calls
   * after it do. What the node does with a call it gets late is its own (a create it finishes is
   * no one's, and it collects it: node/orphans.ts).
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

  /** Fails the calls under way to nodes that left or whose lease ran out (after each read of the list). */
  private failLostCalls(): void {
    if (this.storeAway) return;
    for (const [nodeId, k] of this.nodes) {
      if (this.leased(k.row)) this.lost.delete(nodeId);
      else if (!this.lost.has(nodeId)) {
        this.lost.add(nodeId);
        for (const l of this.lostListeners) l(nodeId);
      }
    }
    for (const [nodeId, waiters] of this.inFlight) {
      const known = this.nodes.get(nodeId);
      if (known && this.leased(known.row)) continue;
      const err = new ServiceError('NODE_UNAVAILABLE', `node ${nodeId} stopped answering during the call; it is served again when the node is back`, { node: nodeId, retry_after: 10 });
      for (const reject of waiters) reject(err);
    }
  }

  onLost(listener: (nodeId: string) => void): void {
    this.lostListeners.push(listener);
  }

  async upNodes(): Promise<Node[]> {
    await this.refresh();
    return [...this.nodes.values()].filter((k) => this.leased(k.row)).map((k) => this.node(k.row.id));
  }

  /** Claims on every node what this process holds there and the store does not record yet (node/orphans.ts). */
  async claim(owner: string, byNode: ReadonlyMap<string, string[]>, ttlSeconds: number): Promise<void> {
    await Promise.all(
      [...this.nodes.entries()].map(([nodeId, k]) =>
        this.leased(k.row) ? k.remote.claim(owner, byNode.get(nodeId) ?? [], ttlSeconds).catch((err: unknown) => this.o.log(`claiming sandboxes on node ${nodeId} failed: ${String(err)}`)) : undefined,
      ),
    );
  }

  warm(): { ready: number; booting: number } {
    let ready = 0;
    for (const { row } of this.nodes.values()) if (row.status === 'active' && this.leased(row)) for (const v of Object.values(row.warm)) ready += v;
    return { ready, booting: 0 };
  }

  watchOom(onKill: (id: string, kills: number, nodeId: string) => void): () => void {
    this.oomWatchers.add(onKill);
    for (const [id, { remote }] of this.nodes) if (!this.oomStops.has(id)) this.startOom(id, remote);
    return () => {
      this.oomWatchers.delete(onKill);
      if (this.oomWatchers.size === 0) for (const id of [...this.oomStops.keys()]) this.stopOom(id);
    };
  }

  private startOom(nodeId: string, remote: RemoteNode): void {
    this.oomStops.set(
      nodeId,
      remote.watchOom((id, kills) => {
        for (const w of this.oomWatchers) w(id, kills, nodeId);
      }),
    );
  }

  private stopOom(nodeId: string): void {
    this.oomStops.get(nodeId)?.();
    this.oomStops.delete(nodeId);
  }

  async close(): Promise<void> {
    if (this.refreshTimer) clearInterval(this.refreshTimer);
    for (const id of [...this.oomStops.keys()]) this.stopOom(id);
    await Promise.all([...this.nodes.values()].map((k) => k.remote.close()));
  }
}
