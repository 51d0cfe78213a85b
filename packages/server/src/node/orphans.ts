import type { Node } from './types.js';
import type { Store } from '../store/types/index.js';

/** At most this many owners' claims (the node API bounds the ids in one). */
const MAX_OWNERS = 64;
const MAX_CLAIM_TTL_MS = 10 * 60_000;

export interface OrphanCollectorOptions {
  nodeId: string;
  node: Pick<Node, 'list' | 'destroy'>;
  /** What the store records on this node: the store itself, or control's registry (NodeRegistry.liveIds). */
  store?: Pick<Store, 'sandboxes'>;
  liveIds?: () => Promise<string[]>;
  /** Which of these (at most 1000) are this node's rows that were deleted: their removal here was missed, they go at once. */
  deletedIds?: (ids: string[]) => Promise<string[]>;
  /** How long a sandbox may be unknown to the store and unclaimed before it goes. */
  graceMs: number;
  /** The node's own sandboxes (its warm pool's, ready or booting): no one else's, never collected. */
  held?: () => Iterable<string>;
  /**
   * How long a sandbox this node handed out (a take's answer) may stay without a row or a claim
   * (default: none, the whole grace). Control claims what it takes within a claim interval and then
   * records it; one whose asker had gone (it gave up on a node that was stopped, and the answer
   * reached no one) is collected after this instead of the grace.
   */
  handedGraceMs?: number;
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
  /** Sandboxes handed out by a take and not yet seen recorded or claimed, since when. */
  private readonly handed = new Map<string, number>();
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

  /** A take handed sandbox `id` out: its asker claims or records it within handedGraceMs, or it is no one's. */
  handedOut(id: string, now = Date.now()): void {
    const grace = this.o.handedGraceMs;
    if (grace === undefined) return;
    this.handed.set(id, now);
    // Bounded: the oldest go first (a node hands out far fewer than this within a grace).
    if (this.handed.size > 10_000) this.handed.delete(this.handed.keys().next().value!);
    setTimeout(() => void this.collect(), grace + 250).unref();
  }

  /** Sandbox `id` was made anew here (a move's copy): what was seen of an earlier one of that id is forgotten. */
  forget(id: string): void {
    this.unowned.delete(id);
    this.handed.delete(id);
  }

  start(): void {
    const every = this.o.intervalMs ?? Math.min(60_000, Math.max(5_000, this.o.graceMs / 4));
    this.timer = setInterval(() => void this.collect(), every);
    this.timer.unref();
    // A look at once: what was deleted while this node was away goes now, and the grace of the
    // others starts.
    void this.collect();
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

  /**
   * Sandboxes held here that no row names and no claim covers, as the last look found them (each
   * goes once its grace is over): reported with every heartbeat, for the operator to see.
   */
  unownedCount(): number {
    return this.unowned.size;
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
    // Rows deleted while their removal here failed (this node was away): no grace for those.
    const unknown = held.filter((id) => !owned.has(id) && !this.claimed(id)).slice(0, 1000);
    const asked = new Set(unknown);
    const deleted = new Set((unknown.length && this.o.deletedIds ? await this.o.deletedIds(unknown).catch(() => []) : []).filter((id) => asked.has(id)));
    const heldSet = new Set(held);
    for (const id of this.unowned.keys()) if (!heldSet.has(id)) this.unowned.delete(id);
    for (const id of this.handed.keys()) if (!heldSet.has(id)) this.handed.delete(id);
    for (const id of held) {
      if (owned.has(id) || this.claimed(id)) {
        this.unowned.delete(id);
        this.handed.delete(id);
        continue;
      }
      const handedAt = this.handed.get(id);
      const since = this.unowned.get(id) ?? handedAt ?? now;
      this.unowned.set(id, since);
      if (since === now && !deleted.has(id)) continue;
      const handedLate = handedAt !== undefined && now - handedAt >= this.o.handedGraceMs!;
      if (!handedLate && !deleted.has(id) && now - since < this.o.graceMs) continue;
      this.o.log(
        deleted.has(id)
          ? 'destroying a sandbox whose row was deleted: its removal here was missed (this node was away)'
          : handedLate
            ? 'destroying a sandbox no one owns: handed out by a take, and neither recorded nor claimed since (its asker had gone)'
            : 'destroying a sandbox no one owns: no row of this node and no claim for it since the grace period began',
        { id, unowned_since: new Date(since).toISOString() },
      );
      try {
        await this.o.node.destroy(id);
        this.unowned.delete(id);
        this.handed.delete(id);
        this.destroyed.push(id);
        if (this.destroyed.length > 1000) this.destroyed.splice(0, this.destroyed.length - 1000);
      } catch (err) {
        this.o.log('destroying a sandbox no one owns failed', { id, error: String(err) });
      }
    }
  }
}
