import { randomUUID } from 'node:crypto';
import { isProgrammingError, ServiceError } from '@sandboxd/protocol';
import type { Node, NodeSpec, Taken, TakeAsk, WarmStats } from '../node/types.js';
import { abandonedCreate, warmKeyOf } from '../node/warm-key.js';
import type { SandboxResources } from '../runtime/types.js';
import type { SandboxUsage } from '../store/types/index.js';
import { addUsage, choose, type Overcommit } from './choose.js';
import type { NodeSet } from './node-set.js';

export interface PlacementOptions {
  nodes: NodeSet;
  /** What the store's rows commit on each node (read only for nodes with a capacity bound). */
  usage: () => Promise<Record<string, SandboxUsage>>;
  /**
   * Whether a sandbox id a node answered is a new one (nodes pick the ids of what they boot ahead):
   * a node taken over that names one of another node's sandboxes would draw that sandbox's calls
   * to itself. Absent: the nodes are this process's own.
   */
  isNew?: (id: string) => Promise<boolean>;
  /** How far past a node's cores and memory it may be committed (default 16 and 1.5). */
  overcommit?: Overcommit;
  /** How old a read of the nodes' commitments begun by prepare() may be for a take to use it (default 100 ms). */
  usageReuseMs?: number;
  /** How often this process claims on each node what it holds there unrecorded (default 0: never). */
  claimEveryMs?: number;
  log: (msg: string) => void;
}

/** A sandbox this process took from a node, with the node. */
export interface Placed extends Taken {
  nodeId: string;
}

/** Nodes one take asks at most before it fails with the last one's error. */
const MAX_TAKE_TRIES = 3;

/**
 * Whether another node may succeed where one failed: an outage of that node (away, failing, its
 * boot or layer fetch broken, an answer not a node's), not the asker's doing (an abandoned take)
 * and not a bug of ours.
 */
function failsOver(err: unknown): boolean {
  if (err instanceof ServiceError) return err.status >= 500 && err.code !== 'INTERNAL_ERROR';
  return err instanceof Error && !isProgrammingError(err);
}

/** Takes that start within this many ms share one read of the nodes' commitments (prepare). */
const USAGE_SHARE_MS = 5;
const USAGE_REUSE_MS = 100;
/** How long a recorded sandbox is remembered for reads begun before its row (well past USAGE_REUSE_MS). */
const LATELY_MS = 2000;

/**
 * Between the services and the nodes: chooses the node of each new sandbox (placement/choose.ts)
 * and hands out the others by the node a sandbox's row names. The same over the all-in-one
 * daemon's one machine and over a cluster's registered nodes (placement/node-set.ts).
 *
 * What this process took and the services have not recorded yet (a create in flight) counts
 * against its node as the store's rows count the rest, and is claimed on the node (so that the
 * node does not collect it as no one's, node/orphans.ts); the nodes' ready sandboxes count against
 * no one until taken (their pools' budgets bound them).
 */
export class Placement {
  /** This process's name in its claims. */
  readonly owner = randomUUID();
  /** Sandboxes taken here and not yet recorded by the services, with what they hold. */
  private readonly reserved = new Map<string, { nodeId: string; resources: SandboxResources }>();
  /** Takes (and moves) under way: the node is picked, the id not known yet; they count against the node as reserved ones do. */
  private readonly asking = new Set<{ nodeId: string; resources: SandboxResources; ask: object }>();
  /** Sandboxes recorded in the last LATELY_MS, in order: a read of the commitments begun before may lack them. */
  private readonly lately = new Map<string, { nodeId: string; resources: SandboxResources; at: number }>();
  /** The read of the nodes' commitments the last prepare() began. */
  private prepared: { startedAt: number; usage: Promise<Record<string, SandboxUsage>> } | undefined;
  private claimTimer: NodeJS.Timeout | undefined;
  private claimSoonTimer: NodeJS.Timeout | undefined;
  /** Takes a node served from its warm pool, and takes it booted for (the metrics' hits and misses). */
  private hits = 0;
  private misses = 0;

  constructor(private readonly o: PlacementOptions) {}

  async start(): Promise<void> {
    await this.o.nodes.start();
    const every = this.o.claimEveryMs ?? 0;
    if (every > 0 && !this.claimTimer) {
      this.claimTimer = setInterval(() => void this.claimAll(), every);
      this.claimTimer.unref();
    }
  }

  /** The node `nodeId` (as a sandbox's row names it), each call reaching it while it is up. */
  node(nodeId: string): Node {
    return this.o.nodes.node(nodeId);
  }

  /** Whether the node answers as last seen. */
  nodeUp(nodeId: string): boolean {
    return this.o.nodes.up(nodeId);
  }

  /**
   * A take is about to come (a create being admitted): what placement reads of the store is read
   * now, instead of after. Takes that start within USAGE_SHARE_MS share one read.
   */
  prepare(): void {
    if (!this.o.nodes.bounded) return;
    const now = performance.now();
    if (this.prepared && now - this.prepared.startedAt <= USAGE_SHARE_MS) return;
    this.prepared = this.readUsage(now);
  }

  private readUsage(now: number): { startedAt: number; usage: Promise<Record<string, SandboxUsage>> } {
    const usage = this.o.usage();
    usage.catch(() => undefined);
    return { startedAt: now, usage };
  }

  /**
   * A running sandbox of the ask's spec from the node chosen for it (one with a ready sandbox of
   * its key preferred), its agent answering, with the ask's env and policy. Held as reserved
   * (claimed on the node, counted against it) until the services record it (recorded) or let go
   * of it (discard).
   */
  async take(ask: TakeAsk): Promise<Placed> {
    // A node that cannot take it (away, failing, refusing) is passed over for the next best one:
    // each node at most once per take, and at most MAX_TAKE_TRIES of them.
    const tried = new Set<string>();
    for (;;) {
      const nodeId = await this.chooseFor(ask, tried);
      try {
        return await this.takeOn(nodeId, ask);
      } catch (err) {
        tried.add(nodeId);
        if (!failsOver(err) || tried.size >= MAX_TAKE_TRIES || ask.signal?.aborted) throw err;
        // No other node may take it (read afresh: a node back since the last read may): the node's
        // own error says more than NO_CAPACITY would.
        if ((await this.o.nodes.candidates(true)).every((c) => tried.has(c.id))) throw err;
        this.o.log(`node ${nodeId} could not take a sandbox (${err instanceof Error ? err.message : String(err)}); asking another`);
      }
    }
  }

  /** The node chosen for the take, not one of `tried`, held for it (counted against it) as it is chosen. */
  private chooseFor(ask: TakeAsk, tried: ReadonlySet<string>): Promise<string> {
    const key = warmKeyOf(ask.spec, ask.poolId).key;
    const hold = (picked: string) => {
      this.asking.add({ nodeId: picked, resources: ask.spec.resources, ask });
      this.o.nodes.noteTaken(picked, key);
    };
    return this.choose(ask.spec.resources, ask.spec.layerIds ?? [], key, hold, tried);
  }

  private async takeOn(nodeId: string, ask: TakeAsk): Promise<Placed> {
    const resources = ask.spec.resources;
    try {
      const { id, warm } = await this.node(nodeId).take(ask);
      if (this.o.isNew && (this.reserved.has(id) || !(await this.o.isNew(id)))) {
        // Not a new one: another sandbox, untouched from here (its undo would destroy it).
        throw new ServiceError('RUNTIME_ERROR', `node ${nodeId} answered with a sandbox that is not a new one; try again`).withDetail(`node ${nodeId} answered ${id}, which is known already`);
      }
      this.reserved.set(id, { nodeId, resources });
      if (warm) this.hits++;
      else this.misses++;
      this.claimSoon();
      // The asker went away as its node answered: no one would hold the sandbox.
      if (ask.signal?.aborted) {
        await this.discard({ id, nodeId }).catch((err: unknown) => this.o.log(`destroying the sandbox of an abandoned take failed: ${String(err)}`));
        throw abandonedCreate();
      }
      return { id, nodeId, warm };
    } finally {
      for (const a of this.asking) if (a.ask === ask && a.nodeId === nodeId) this.asking.delete(a);
    }
  }

  /**
   * Sandbox `spec.id`, moved off the nodes of `passOver` (a drain): booted on the node chosen for
   * it as a new sandbox's would be, its agent answering, and held as reserved as a take's is until
   * the services record it there (recorded) or let go of it (discard). A node that cannot take it
   * is passed over for the next, as for a take.
   */
  async receive(spec: NodeSpec, passOver: ReadonlySet<string>): Promise<Placed> {
    const tried = new Set(passOver);
    for (;;) {
      const held = { nodeId: '', resources: spec.resources, ask: spec };
      const hold = (picked: string) => {
        held.nodeId = picked;
        this.asking.add(held);
      };
      const nodeId = await this.choose(spec.resources, spec.layerIds ?? [], undefined, hold, tried);
      try {
        await this.node(nodeId).receive(spec);
        this.reserved.set(spec.id, { nodeId, resources: spec.resources });
        this.claimSoon();
        return { id: spec.id, nodeId, warm: false };
      } catch (err) {
        tried.add(nodeId);
        if (!failsOver(err) || tried.size - passOver.size >= MAX_TAKE_TRIES) throw err;
        if ((await this.o.nodes.candidates()).every((c) => tried.has(c.id))) throw err;
        this.o.log(`node ${nodeId} could not take sandbox ${spec.id} moved to it (${err instanceof Error ? err.message : String(err)}); asking another`);
      } finally {
        this.asking.delete(held);
      }
    }
  }

  /**
   * The node a new sandbox of `resources` would go to now (placement/choose.ts), or NO_CAPACITY
   * when none has room. `warmKey`: its warm pool key, whose holders of ready sandboxes are preferred.
   * `hold` is called with the node as it is chosen, before anything else runs: what it holds there
   * then counts for the next choice (concurrent takes of a burst otherwise all see the same
   * commitments, and go to the same node).
   */
  async choose(resources: SandboxResources, layerIds: string[] = [], warmKey?: string, hold?: (nodeId: string) => void, passOver: ReadonlySet<string> = new Set()): Promise<string> {
    const candidates = (await this.o.nodes.candidates()).filter((c) => !passOver.has(c.id));
    const read = candidates.some((c) => c.capacity) ? this.usageRead() : undefined;
    const rows = read ? await read.usage : {};
    // From here to the hold nothing awaits: a take of the same burst that chooses next counts this one.
    const usage = read ? this.withUnrecorded(rows, read.startedAt) : new Map<string, SandboxUsage>();
    const nodeId = choose(candidates, usage, resources, layerIds, warmKey, this.o.overcommit ?? { cpu: 16, memory: 1.5 });
    if (nodeId) {
      hold?.(nodeId);
      return nodeId;
    }
    throw new ServiceError(
      'NO_CAPACITY',
      candidates.length === 0 ? 'no node of the cluster is up to take the sandbox; try again later' : `no node has room for a sandbox of ${resources.vcpu} vCPU, ${resources.memoryMb} MB and ${resources.diskGb} GB now; try again later`,
      { retry_after: 5 },
    );
  }

  /** The read of what the rows commit that prepare() began for this take, or one begun now. */
  private usageRead(): { startedAt: number; usage: Promise<Record<string, SandboxUsage>> } {
    const now = performance.now();
    return this.prepared && now - this.prepared.startedAt <= (this.o.usageReuseMs ?? USAGE_REUSE_MS) ? this.prepared : this.readUsage(now);
  }

  /**
   * What the rows commit on each node (a read begun at `startedAt`), plus what this process placed
   * and has not recorded (reserved, asking) and what it recorded since the read began: those rows
   * may be missing from it. (At the boundary one may count twice: never less.)
   */
  private withUnrecorded(rows: Record<string, SandboxUsage>, startedAt: number): Map<string, SandboxUsage> {
    const out = new Map(Object.entries(rows));
    const since = [...this.lately.values()].filter((r) => r.at >= startedAt);
    for (const r of [...this.reserved.values(), ...this.asking, ...since]) {
      out.set(r.nodeId, addUsage(out.get(r.nodeId), { active: 1, activeVcpu: r.resources.vcpu, activeMemoryMb: r.resources.memoryMb, stopped: 0, diskGb: r.resources.diskGb }));
    }
    return out;
  }

  /**
   * The services recorded sandbox `id` (its row, on its node, is in the store): its row counts it
   * from now on. Not before: between the node's answer and the row (creates of one organization
   * wait for each other to insert theirs) the reservation goes on counting it.
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
   * A sandbox taken and not recorded (its create failed or was refused): destroyed on its node.
   * Let go of also when the node could not be told: it is claimed no more, and its node collects
   * it after the grace.
   */
  async discard(p: { id: string; nodeId: string }): Promise<void> {
    try {
      await this.node(p.nodeId).destroy(p.id);
    } finally {
      this.reserved.delete(p.id);
    }
  }

  /** Every sandbox the nodes that answer hold, with its node (a node that cannot list is logged and left out). */
  async list(): Promise<Array<{ id: string; nodeId: string }>> {
    const out: Array<{ id: string; nodeId: string }> = [];
    for (const node of await this.o.nodes.upNodes()) {
      try {
        for (const id of await node.list()) out.push({ id, nodeId: node.id });
      } catch (err) {
        this.o.log(`node ${node.id}: cannot list its sandboxes: ${String(err)}`);
      }
    }
    return out;
  }

  /**
   * Every node's warm pool forgets `poolId` (a template deleted or rebuilt). A node that does not
   * answer keeps its ready sandboxes of it until its pool retires the key: they are never handed
   * out for a deleted template, no create asks.
   */
  async dropWarm(poolId: string): Promise<void> {
    await Promise.all((await this.o.nodes.upNodes()).map((n) => n.dropWarm(poolId).catch((err: unknown) => this.o.log(`node ${n.id}: its warm pool could not drop ${poolId}: ${String(err)}`))));
  }

  /** The nodes' warm pools: ready and booting sandboxes, and the takes served ready or not. */
  warmStats(): WarmStats {
    return { ...this.o.nodes.warm(), hits: this.hits, misses: this.misses };
  }

  /** Calls `listener` when a node is first seen lost (its lease ran out, or it left the cluster). */
  onNodeLost(listener: (nodeId: string) => void): void {
    this.o.nodes.onLost(listener);
  }

  /** OOM kills in sandboxes, as the nodes report them, with the node that reported each. */
  watchOom(onKill: (id: string, kills: number, nodeId: string) => void): () => void {
    return this.o.nodes.watchOom(onKill);
  }

  /**
   * Claims on every node what this process holds there unrecorded, so that the node does not
   * collect it as no one's; a claim lasts four rounds, so a process that dies stops claiming and
   * its leftovers go.
   */
  async claimAll(): Promise<void> {
    const every = this.o.claimEveryMs ?? 0;
    const ttlSeconds = Math.max(1, Math.min(600, Math.ceil((every * 4) / 1000)));
    const byNode = new Map<string, string[]>();
    for (const [id, r] of this.reserved) byNode.set(r.nodeId, [...(byNode.get(r.nodeId) ?? []), id]);
    await this.o.nodes.claim(this.owner, byNode, ttlSeconds).catch((err: unknown) => this.o.log(`claiming sandboxes failed: ${String(err)}`));
  }

  /** A new sandbox is claimed within half a second, not at the next round (creates come in bursts: one claim each node). */
  private claimSoon(): void {
    if (this.claimSoonTimer || !(this.o.claimEveryMs ?? 0)) return;
    this.claimSoonTimer = setTimeout(() => {
      this.claimSoonTimer = undefined;
      void this.claimAll();
    }, 500);
    this.claimSoonTimer.unref();
  }

  async close(): Promise<void> {
    if (this.claimTimer) clearInterval(this.claimTimer);
    if (this.claimSoonTimer) clearTimeout(this.claimSoonTimer);
    await this.o.nodes.close();
  }
}
