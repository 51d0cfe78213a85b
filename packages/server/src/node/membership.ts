import { createHash } from 'node:crypto';
import { ServiceError } from '@sandboxd/protocol';
import type { NodeCapacity, NodeRegistration, NodeReport, NodeRow, NodeStatus, SandboxUsage, Store } from '../store/types/index.js';
import type { Node } from './types.js';

/**
 * Where a node keeps its entry and reads what the store says of its sandboxes: the store itself
 * (a node with the database's credentials), or control's registry (node/registry-client.ts: a node
 * with a registry credential only, which can touch nothing but its own entry).
 */
export interface NodeRegistry {
  register(reg: NodeRegistration, leaseMs: number): Promise<NodeRow>;
  /** undefined: the node was removed by an operator. */
  heartbeat(id: string, report: NodeReport, leaseMs: number): Promise<NodeRow | undefined>;
  /** What the store's rows on node `id` commit. */
  usage(id: string): Promise<SandboxUsage | undefined>;
  /** The ids of the live sandboxes the store records on node `id`. */
  liveIds(id: string): Promise<string[]>;
  /** Which of `ids` (at most 1000) are rows of node `id` that were deleted: their removal there was missed. */
  deletedIds?(id: string, ids: string[]): Promise<string[]>;
}

/**
 * The registry as the store itself. A node an operator removed registers again only once admitted
 * (`sandboxd nodes admit`): a node with the database's credentials has nothing else to show.
 */
export function storeRegistry(store: Pick<Store, 'nodes' | 'sandboxes'>): NodeRegistry {
  return {
    register: async (reg, leaseMs) => {
      const row = await store.nodes.registerUnlessRemoved(reg, leaseMs);
      if (row) return row;
      const at = await store.nodes.removedAt(reg.id);
      throw new ServiceError('PERMISSION_DENIED', `node ${reg.id} was removed from the cluster${at ? ` at ${at}` : ''} (\`sandboxd nodes remove\`): it registers again once an operator admits it (\`sandboxd nodes admit ${reg.id}\`)`);
    },
    heartbeat: (id, report, leaseMs) => store.nodes.heartbeat(id, report, leaseMs),
    usage: async (id) => (await store.sandboxes.usageByNode())[id],
    liveIds: async (id) => (await store.sandboxes.live(id)).map((r) => r.id),
    deletedIds: (id, ids) => store.sandboxes.deletedAmong(id, ids),
  };
}

export interface NodeMembershipOptions {
  /** The registry (absent: the store's, `store` then required). */
  registry?: NodeRegistry;
  store?: Store;
  /** The node whose sandboxes it reports. */
  node: Pick<Node, 'list'>;
  id: string;
  url: string;
  capacity: NodeCapacity;
  leaseMs: number;
  /** The layers this node holds (their ids): reported as a digest of the set, which control reads when it changes. */
  layers?: () => Promise<string[]>;
  /** Ready sandboxes of the node's warm pool, per key: reported, so that placement prefers a node with one of the key asked. */
  warm?: () => Record<string, number>;
  /** Sandboxes here that no one owns, as the orphan collector counts them (undefined: not counted yet): reported, for the operator. */
  orphans?: () => number | undefined;
  /** Told the status an operator gave the node, as its registration and each heartbeat answer it (a draining node empties its warm pool). */
  onStatus?: (status: NodeStatus) => void;
  log?: (msg: string, extra?: Record<string, unknown>) => void;
}

/** How often a node whose heartbeats keep failing says so again. */
const FAILURE_LOG_EVERY_MS = 60_000;

/** The digest a node reports of the set of layers it holds (ids sorted, one per line). */
export function layersDigestOf(ids: string[]): string {
  return `sha256:${createHash('sha256').update([...ids].sort().join('\n')).digest('hex')}`;
}

/**
 * A node's place in the cluster's registry: it registers (keeping the status an operator gave it),
 * then heartbeats every third of its lease with what it holds. A heartbeat that finds the node
 * removed by the operator stops here: a removed node does not come back by itself.
 */
export class NodeMembership {
  private timer?: NodeJS.Timeout;
  /** When the heartbeat under way began (0: none). */
  private beatingSince = 0;
  /** Heartbeats failed in a row, and when the last of them was logged. */
  private failures = 0;
  private failureLoggedAt = 0;
  private stopped = false;
  private readonly log: NonNullable<NodeMembershipOptions['log']>;

  private readonly registry: NodeRegistry;

  constructor(private readonly o: NodeMembershipOptions) {
    this.log = o.log ?? (() => undefined);
    if (!o.registry && !o.store) throw new TypeError('NodeMembership needs a registry or a store');
    this.registry = o.registry ?? storeRegistry(o.store!);
  }

  async start(): Promise<NodeRow> {
    const row = await this.registry.register({ id: this.o.id, url: this.o.url, capacity: this.o.capacity }, this.o.leaseMs);
    this.log(`node ${row.id} registered (${row.status}) at ${row.url}, lease ${Math.round(this.o.leaseMs / 1000)} s`);
    this.o.onStatus?.(row.status);
    this.timer = setInterval(() => void this.beat(), Math.max(500, Math.floor(this.o.leaseMs / 3)));
    return row;
  }

  /**
   * start(), tried again every `retryMs` until it succeeds (or stop()): a node whose registry is
   * control may come up before control does. Resolves once registered; false if stopped first.
   */
  async startWhenReachable(retryMs: number): Promise<boolean> {
    for (let attempt = 1; !this.stopped; attempt++) {
      try {
        await this.start();
        return true;
      } catch (err) {
        if (attempt === 1 || attempt % 30 === 0) this.log(`node ${this.o.id} cannot register yet (trying again every ${retryMs / 1000} s): ${String(err)}`);
        await new Promise((r) => setTimeout(r, retryMs));
      }
    }
    return false;
  }

  /** One heartbeat: what the runtime holds (every sandbox it has, from its own listing) and what the store's rows on this node commit. */
  async beat(): Promise<NodeRow | undefined> {
    if (this.stopped) return undefined;
    // One at a time; but one that hangs (its connection died with a network cut, and waits for the
    // query timeout) does not hold the next beyond half the lease: the next takes a new connection.
    const now = Date.now();
    if (this.beatingSince && now - this.beatingSince < this.o.leaseMs / 2) return undefined;
    const mine = now;
    this.beatingSince = mine;
    try {
      const [ids, used, layers] = await Promise.all([this.o.node.list(), this.registry.usage(this.o.id), this.o.layers?.().catch(() => undefined)]);
      const orphans = this.o.orphans?.();
      const row = await this.registry.heartbeat(
        this.o.id,
        {
          usage: { sandboxes: ids.length, vcpu: used?.activeVcpu ?? 0, memoryMb: used?.activeMemoryMb ?? 0, diskGb: used?.diskGb ?? 0 },
          warm: this.o.warm?.() ?? {},
          layersDigest: layers ? layersDigestOf(layers) : null,
          ...(orphans === undefined ? {} : { orphans }),
        },
        this.o.leaseMs,
      );
      if (!row) {
        this.log(
          `node ${this.o.id} was removed from the cluster by an operator: no more heartbeats (to bring it back, admit it again: \`sandboxd nodes admit ${this.o.id}\` for a node on the database, a new credential from \`sandboxd cluster node-credential ${this.o.id}\` for one registering through control; then restart it)`,
        );
        this.stop();
      } else {
        this.o.onStatus?.(row.status);
      }
      if (this.failures > 0) this.log(`node ${this.o.id}: heartbeats go through again (${this.failures} missed)`);
      this.failures = 0;
      return row;
    } catch (err) {
      // The lease covers a few missed beats (a restart of PostgreSQL). A beat goes every third of
      // the lease: an outage is said when it begins and then once a minute, not at every beat.
      this.failures++;
      if (this.failures === 1 || Date.now() - this.failureLoggedAt >= FAILURE_LOG_EVERY_MS) {
        this.failureLoggedAt = Date.now();
        this.log(`node ${this.o.id}: heartbeat failed${this.failures > 1 ? ` (${this.failures} in a row)` : ''}: ${String(err)}`);
      }
      return undefined;
    } finally {
      if (this.beatingSince === mine) this.beatingSince = 0;
    }
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }
}
