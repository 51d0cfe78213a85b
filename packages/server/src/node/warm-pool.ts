import { ServiceError } from '@sandboxd/protocol';
import { BootRate, budgetSandboxes, READY_SANDBOX_COST_MB, targetsFor } from './pool-sizing.js';
import { abandonedCreate, type WarmKey } from './warm-key.js';
import { PoolBoot, WarmKeys, type KeyState, type WarmKeyStats } from './warm-keys.js';

export interface WarmPoolOptions {
  /** Destroys a sandbox the pool booted and no longer wants. */
  runtime: { destroy(id: string): Promise<void> };
  log: (msg: string, extra?: Record<string, unknown>) => void;
  /** Routine events (a key's target moving as its rate changes, every few seconds while demand decays): at debug, when given. */
  debug?: (msg: string, extra?: Record<string, unknown>) => void;
  /** Ready sandboxes per key once it was asked for, whatever its rate; 0: none are held, every create boots. */
  minPerKey: number;
  /** Host memory the ready sandboxes may cost, all keys together (READY_SANDBOX_COST_MB each). */
  maxMemoryMb: number;
  /** Seconds of each key's demand to hold ready (rate × horizon). */
  horizonSeconds: number;
  /**
   * Ready sandboxes held at rest, all keys together, shared by long-term demand (at most the budget):
   * what serves a burst that no recent demand announced. Default 0 (only the floor).
   */
  reserveSandboxes?: number;
  /** Ready sandboxes beyond their key's target for this long are destroyed. */
  shrinkAfterMs: number;
  /** Boots at once, for waiting creates and refills together. */
  bootConcurrency: number;
  /** Of those, at most this many refill (default half): the rest stays free for creates that arrive. */
  refillConcurrency?: number;
  maxKeys?: number;
  /** A refill waits this long after a key's last create, so it does not compete with that create's own work. */
  refillDelayMs?: number;
  /** Time constant of the creation-rate average. */
  rateTauMs?: number;
  /** Time constant of the long-term creation rate, which shares out the reserve. */
  longRateTauMs?: number;
  /**
   * Seconds of the machine's spare boot capacity (measured: BootRate) that a key's target by rate
   * may ask for (default: the rate's time constant, 10 s: a target that takes longer to reach has
   * decayed before it is reached); 0: targets follow demand only (pool-sizing.ts).
   */
  capacitySeconds?: number;
  /** Period of the resize/shrink pass; 0: none (tests call tick()). */
  tickMs?: number;
  now?: () => number;
  /** The clock boots are timed with (BootRate); default performance.now. */
  bootClock?: () => number;
  costMb?: number;
}

export interface AcquireOptions {
  /** Aborted while still waiting: the wait ends (rejected), and the boot it started serves the next create or the pool. */
  signal?: AbortSignal;
  /** A create whose sandbox turned out dead: served before everyone, and not counted as demand again. */
  retry?: boolean;
  /** Told at once whether a ready sandbox served this create (a hit) or it waits for a boot. */
  onServed?: (hit: boolean) => void;
}

/**
 * Every create gets its sandbox here: one booted ahead of time, or one booted now. Per key (what a
 * sandbox boots: template, layers, resources, network), creates wait in arrival order and each
 * takes the first sandbox that becomes ready for its key, whether the pool already held it, a
 * refill just finished it, or it was booted for a create that arrived earlier and got another one.
 * Boots run `bootConcurrency` at a time (they are CPU-bound: a few run in parallel as fast as many,
 * and each create waits less), the oldest waiting create's key first, refills with what is left.
 *
 * The pool sizes itself from demand (pool-sizing.ts): each key keeps ⌈creation rate × horizon⌉
 * ready, at least `minPerKey`, all keys within the memory budget; ready sandboxes beyond the target
 * for `shrinkAfterMs` are destroyed. A ready sandbox has its final id and no row in the store until
 * a create takes it, so it belongs to no one, and a daemon crash leaves only runtime leftovers,
 * which the reconciliation at start removes.
 */
export class WarmPool {
  /** The keys, their waiting creates and the hand-off of each sandbox (warm-keys.ts). */
  private readonly keys: WarmKeys;
  private running = 0;
  private refilling = 0;
  private closed = false;
  /** Off while the node drains: nothing is held ready (stock). */
  private stocked = true;
  /** Creates a ready sandbox served at once, and creates that had to wait for a boot. */
  hits = 0;
  misses = 0;
  private tickTimer: NodeJS.Timeout | undefined;
  private refillTimer: NodeJS.Timeout | undefined;
  private destroying: Promise<void> = Promise.resolve();
  /** Creates under way on this node (foreground()): no refill starts while there is one. */
  private foregroundCount = 0;
  /** What the machine boots (sandboxes per second), from the boots that finished. */
  readonly bootRate = new BootRate();
  private idle: Array<() => void> = [];
  private readonly now: () => number;
  private readonly o: Required<Omit<WarmPoolOptions, 'now'>>;

  constructor(opts: WarmPoolOptions) {
    this.now = opts.now ?? Date.now;
    this.o = {
      refillConcurrency: Math.max(1, Math.floor(opts.bootConcurrency / 2)),
      maxKeys: 8,
      refillDelayMs: 100,
      rateTauMs: 10_000,
      longRateTauMs: 3_600_000,
      reserveSandboxes: 0,
      capacitySeconds: (opts.rateTauMs ?? 10_000) / 1000,
      bootClock: () => performance.now(),
      tickMs: 1000,
      costMb: READY_SANDBOX_COST_MB,
      ...opts,
      debug: opts.debug ?? (() => undefined),
    };
    this.keys = new WarmKeys(this.o, (id) => this.destroy(id));
    if (!(this.o.bootConcurrency >= 1)) throw new Error(`bootConcurrency must be at least 1, got ${opts.bootConcurrency}`);
    if (this.o.tickMs > 0) {
      this.tickTimer = setInterval(() => this.tick(), this.o.tickMs);
      this.tickTimer.unref();
    }
  }

  /** Whether sandboxes are held ready at all (otherwise every create boots, still in order). */
  get holds(): boolean {
    return this.o.minPerKey > 0 && this.budget > 0 && this.stocked && !this.closed;
  }

  /**
   * Whether the pool holds ready sandboxes at all (default: yes). Off, every ready one is destroyed
   * now and no refill starts; asks are still served, each by a boot of its own. Returns whether
   * this changed anything.
   */
  stock(on: boolean): boolean {
    if (this.stocked === on) return false;
    this.stocked = on;
    this.retarget(this.now());
    if (!on) for (const s of this.keys.values()) this.keys.shrink(s, this.now(), 0);
    this.pump();
    return true;
  }

  private get budget(): number {
    return budgetSandboxes(this.o.maxMemoryMb, this.o.costMb);
  }

  /**
   * A running sandbox for `k`, its agent answering: the first one ready for this key once the
   * creates that arrived before have theirs. `make` boots one (and destroys it if it fails).
   */
  acquire(k: WarmKey, make: (boot: PoolBoot) => Promise<string>, opts: AcquireOptions = {}): Promise<string> {
    if (this.closed) return Promise.reject(shuttingDown());
    if (opts.signal?.aborted) return Promise.reject(abandonedCreate());
    const now = this.now();
    const s = this.keys.stateFor(k, make, now);
    if (!opts.retry) {
      s.rate.observe(now);
      s.longRate.observe(now);
    }
    this.retarget(now);
    return new Promise<string>((resolve, reject) => {
      const served = this.keys.wait(s, resolve, reject, opts, () => this.pump());
      if (!opts.retry) {
        if (served) this.hits++;
        else this.misses++;
        opts.onServed?.(served);
      }
      this.pump();
      this.refillSoon();
    });
  }

  /**
   * A create is under way (waiting for its sandbox, or having it set up) until the returned
   * function is called: refills yield to it, none starts meanwhile (the boots in flight go on, at
   * their low CPU weight). The node's take calls it around the whole take.
   */
  foreground(): () => void {
    this.foregroundCount++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.foregroundCount--;
      if (this.foregroundCount > 0) return;
      this.pump();
      this.refillSoon();
    };
  }

  /** Forgets a template (deleted or rebuilt): its ready sandboxes are destroyed. */
  async dropTemplate(templateId: string): Promise<void> {
    // A pool id of sandboxes with volumes is `<source>+<volume id>+...`: dropped with its source
    // and with each of its volumes (services/volumes.ts).
    for (const s of this.keys.values()) if (s.k.templateId === templateId || s.k.templateId.split('+').includes(templateId)) this.keys.retire(s);
    await this.destroying;
  }

  /** Ids currently held ready (not yet sandboxes of anyone). */
  ids(): string[] {
    return this.keys.ids();
  }

  /** Creates waiting for a sandbox of `key` (none is ready): the next boot to end goes to the first. */
  waiting(key: string): number {
    return this.keys.waiting(key);
  }

  stats(): WarmKeyStats[] {
    return this.keys.stats(this.now());
  }

  /**
   * The periodic pass: targets follow the decaying rates, excess that outlived `shrinkAfterMs` is
   * destroyed, refills start. Runs every `tickMs`; public for tests with an injected clock.
   */
  tick(): void {
    if (this.closed) return;
    const now = this.now();
    this.retarget(now);
    for (const s of this.keys.values()) {
      this.keys.shrink(s, now, this.o.shrinkAfterMs);
      this.logTarget(s);
    }
    this.keys.forgetRetired();
    this.pump();
  }

  /** Rejects waiting creates, lets boots in flight finish, and destroys every sandbox held. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.tickTimer) clearInterval(this.tickTimer);
    if (this.refillTimer) clearTimeout(this.refillTimer);
    this.keys.empty(shuttingDown);
    while (this.running > 0) await new Promise<void>((r) => this.idle.push(r));
    await this.destroying;
  }

  // ---- sizing --------------------------------------------------------------------------------------

  private retarget(now: number): void {
    const rates = new Map<string, number>();
    const longRates = new Map<string, number>();
    for (const s of this.keys.values()) {
      if (s.retired) continue;
      rates.set(s.k.key, s.rate.perSecond(now));
      longRates.set(s.k.key, s.longRate.perSecond(now));
    }
    const bootsPerSecond = this.o.capacitySeconds > 0 ? this.bootRate.perSecond() : undefined;
    const policy = {
      minPerKey: this.o.minPerKey,
      horizonSeconds: this.o.horizonSeconds,
      budgetSandboxes: this.budget,
      reserveSandboxes: this.o.reserveSandboxes,
      ...(bootsPerSecond !== undefined ? { bootsPerSecond, capacitySeconds: this.o.capacitySeconds } : {}),
    };
    const targets = this.holds
      ? targetsFor(rates, policy, longRates)
      : new Map<string, number>();
    for (const s of this.keys.values()) s.target = s.retired ? 0 : (targets.get(s.k.key) ?? 0);
  }

  /** Says when a key's target moved by a quarter (or at least 2) since it was last said. */
  private logTarget(s: KeyState): void {
    const moved = Math.abs(s.target - s.loggedTarget);
    if (moved === 0 || (moved < 2 && s.target !== this.o.minPerKey) || moved < s.loggedTarget / 4) return;
    this.o.debug(`warm pool: ${s.k.label} target ${s.loggedTarget} → ${s.target}`, {
      rate_per_s: Math.round(s.rate.perSecond(this.now()) * 100) / 100,
      ready: s.ready.length,
      booting: s.booting,
      boots_per_s: Math.round((this.bootRate.perSecond() ?? 0) * 10) / 10,
    });
    s.loggedTarget = s.target;
  }

  // ---- boots and refills ---------------------------------------------------------------------------

  /**
   * Starts boots while slots are free: uncovered waiting creates first (oldest first), then refills,
   * but no refill while a create is under way or waiting (they would take the CPU from it). A
   * refill a create comes to wait on is promoted to the foreground first.
   */
  private pump(): void {
    if (this.closed) return;
    const now = this.now();
    for (const s of this.keys.values()) this.keys.promoteCovering(s);
    while (this.running < this.o.bootConcurrency) {
      const demand = this.keys.oldestUncovered();
      if (demand) {
        this.boot(demand, false);
        continue;
      }
      const quiet = this.foregroundCount === 0 && this.keys.waitingTotal() === 0;
      const refill = quiet && this.refilling < this.o.refillConcurrency ? this.neediestRefill(now) : undefined;
      if (!refill) return;
      this.boot(refill, true);
    }
  }

  private neediestRefill(now: number): KeyState | undefined {
    let best: KeyState | undefined;
    let bestDeficit = 0;
    for (const s of this.keys.values()) {
      if (s.retired || now < s.backoffUntil || now < s.lastUsed + this.o.refillDelayMs) continue;
      const deficit = s.target + s.waiters.length - s.ready.length - s.booting;
      if (deficit > bestDeficit) [best, bestDeficit] = [s, deficit];
    }
    return best;
  }

  /** Pumps again once the refill delay of the latest create has passed. */
  private refillSoon(): void {
    if (this.refillTimer || this.o.refillDelayMs <= 0) return;
    this.refillTimer = setTimeout(() => {
      this.refillTimer = undefined;
      this.pump();
    }, this.o.refillDelayMs + 1);
    this.refillTimer.unref();
  }

  private boot(s: KeyState, refill: boolean): void {
    this.running++;
    s.booting++;
    const ticket = new PoolBoot(refill);
    if (refill) {
      this.refilling++;
      s.background.push(ticket);
    }
    const t0 = this.o.bootClock();
    void s
      .make(ticket)
      .then(
        (id) => {
          // Boots in flight as this one ends (itself included): the throughput it ran at.
          this.bootRate.observe(this.o.bootClock() - t0, this.running);
          this.booted(s, id);
        },
        (err: unknown) => this.bootFailed(s, err),
      )
      .finally(() => {
        const i = s.background.indexOf(ticket);
        if (i >= 0) s.background.splice(i, 1);
        this.running--;
        if (refill) this.refilling--;
        if (this.running === 0) for (const r of this.idle.splice(0)) r();
        this.keys.forgetRetired();
        this.pump();
      });
  }

  private booted(s: KeyState, id: string): void {
    s.booting--;
    s.failures = 0;
    s.backoffUntil = 0;
    if (this.closed) return this.destroy(id);
    if (this.keys.handOff(s, id)) return;
    if (!s.retired && this.holds) {
      s.ready.push({ id, since: this.now() });
    } else {
      this.destroy(id);
    }
  }

  /**
   * A boot failed. Refills back off (1 s, doubling up to a minute). A create that is left without a
   * boot in flight for it fails with the error, the oldest first, as a cold create always did:
   * otherwise a broken template would keep creates waiting without end.
   */
  private bootFailed(s: KeyState, err: unknown): void {
    s.booting--;
    s.failures++;
    s.backoffUntil = this.now() + Math.min(60_000, 1000 * 2 ** (s.failures - 1));
    this.o.log(`warm pool: a boot for ${s.k.label} failed`, { error: err instanceof Error ? err.message : String(err), failures: s.failures });
    this.keys.failUncovered(s, err);
  }

  /** Destroys run one after another, in the background: a shrink must not take the CPU from creates. */
  private destroy(id: string): void {
    this.destroying = this.destroying.then(() =>
      this.o.runtime.destroy(id).catch((err: unknown) => this.o.log('warm pool: destroy failed', { id, error: String(err) })),
    );
  }
}

function shuttingDown(): ServiceError {
  return new ServiceError('RUNTIME_ERROR', 'sandboxd is shutting down; retry in a moment');
}
