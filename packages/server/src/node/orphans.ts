import type { Node } from './types.js';
import type { Store } from '../store/types.js';

/** At most this many owners' claims (the node API bounds the ids in one). */
const MAX_OWNERS = 64;
const MAX_CLAIM_TTL_MS = 10 * 60_000;

export interface OrphanCollectorOptions {
  nodeId: string;
  node: Pick<Node, 'list' | 'destroy'>;
  /** What the store records on this node: the store itself, or control's registry (NodeRegistry.liveIds). */
  store?: Pick<Store, 'sandboxes'>;
  liveIds?: () => Promise<string[]>;
  /** How long a sandbox may be unknown to the store and unclaimed before it goes. */
  graceMs: number;
  /** The node's own sandboxes (its warm pool's, ready or booting): no one else's, never collected. */
  held?: () => Iterable<string>;
  /** How often to look (default: a quarter of the grace, between 5 s and 60 s). */
  intervalMs?: number;
  log: (msg: string, extra?: Record<string, unknown>) => void;
}

/**
 * A node's own collection of sandboxes no one owns. In a cluster, a control replica creates a
 * sandbox on a node (or takes a ready one from the node's warm pool) before the store records it:
 * if that replica dies in between, the sandbox belongs to no one. The node's warm pool's ready
 * sandboxes are the node's own (`held`) until handed out. Control replicas claim what they hold unrecorded (PUT /node/v1/claims, renewed, with a
 * lifetime); a sandbox this node holds that no live row of this node names and no claim covers,
 * seen so for the whole grace period, is destroyed. A node that just started has seen nothing for
 * long: every sandbox gets the whole grace from its start.
 */
export class OrphanCollector {
  private readonly claims = new Map<string, { ids: Set<string>; expiresAt: number }>();
  /** Sandboxes found unowned, since when. */
  private readonly unowned = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly o: OrphanCollectorOptions) {}

  /** A control replica (`owner`) holds these sandboxes of this node unrecorded, for `ttlMs`. Replaces its last claim. */
  claim(owner: string, ids: string[], ttlMs: number): void {
    if (!this.claims.has(owner) && this.claims.size >= MAX_OWNERS) this.expire();
    if (!this.claims.has(owner) && this.claims.size >= MAX_OWNERS) throw new RangeError(`more than ${MAX_OWNERS} owners claim sandboxes here`);
    this.claims.set(owner, { ids: new Set(ids), expiresAt: Date.now() + Math.min(Math.max(ttlMs, 0), MAX_CLAIM_TTL_MS) });
  }

  private expire(now = Date.now()): void {
    for (const [owner, c] of this.claims) if (c.expiresAt <= now) this.claims.delete(owner);
  }

  private claimed(id: string): boolean {
    for (const c of this.claims.values()) if (c.ids.has(id)) return true;
    return false;
  }

  start(): void {
    const every = this.o.intervalMs ?? Math.min(60_000, Math.max(5_000, this.o.graceMs / 4));
    this.timer = setInterval(() => void this.collect(), every);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  /** One look: returns the ids it destroyed. A store that cannot answer makes it do nothing. */
  collect(now = Date.now()): Promise<void> {
    this.running ??= this.look(now)
      .catch((err: unknown) => this.o.log('looking for sandboxes no one owns failed', { error: String(err) }))
      .finally(() => (this.running = undefined));
    return this.running;
  }

  /** What the last looks destroyed (for tests and the log). */
  readonly destroyed: string[] = [];

  private async look(now: number): Promise<void> {
    this.expire(now);
    const held = await this.o.node.list();
    // Read after the listing: a create recorded between the two is seen as owned.
    const owned = new Set(this.o.liveIds ? await this.o.liveIds() : (await this.o.store!.sandboxes.live(this.o.nodeId)).map((r) => r.id));
    // Read after the listing too: a ready sandbox handed out meanwhile is control's from now (its
    // claim or row covers it, or its grace begins).
    for (const id of this.o.held?.() ?? []) owned.add(id);
    const heldSet = new Set(held);
    for (const id of this.unowned.keys()) if (!heldSet.has(id)) this.unowned.delete(id);
    for (const id of held) {
      if (owned.has(id) || this.claimed(id)) {
        this.unowned.delete(id);
        continue;
      }
      const since = this.unowned.get(id);
      if (since === undefined) {
        this.unowned.set(id, now);
        continue;
      }
      if (now - since < this.o.graceMs) continue;
      this.o.log('destroying a sandbox no one owns: no row of this node and no claim for it since the grace period began', { id, unowned_since: new Date(since).toISOString() });
      try {
        await this.o.node.destroy(id);
        this.unowned.delete(id);
        this.destroyed.push(id);
        if (this.destroyed.length > 1000) this.destroyed.splice(0, this.destroyed.length - 1000);
      } catch (err) {
        this.o.log('destroying a sandbox no one owns failed', { id, error: String(err) });
      }
    }
  }
}
