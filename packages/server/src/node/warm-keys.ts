import { RateEstimate } from './pool-sizing.js';
import { abandonedCreate, type WarmKey } from './warm-key.js';

/** A create waiting for a sandbox of its key. */
export interface Waiter {
  seq: number;
  /** Set when a ready sandbox was handed to it. */
  served?: boolean;
  resolve: (id: string) => void;
  reject: (err: unknown) => void;
  detach: () => void;
}

/**
 * A boot the pool started, as its `make` sees it. A refill (booted ahead for no one) is in the
 * background: the node boots it at a low CPU weight so that it yields to foreground work. Once a
 * create comes to wait on it, it is promoted to the foreground (the listeners run, once).
 */
export class PoolBoot {
  private listeners: Array<() => void> = [];

  constructor(private bg: boolean) {}

  get background(): boolean {
    return this.bg;
  }

  /** `fn` runs when this boot is promoted (never, if it is not in the background now). */
  onForeground(fn: () => void): void {
    if (this.bg) this.listeners.push(fn);
  }

  promote(): void {
    if (!this.bg) return;
    this.bg = false;
    for (const fn of this.listeners.splice(0)) fn();
  }
}

export interface KeyState {
  k: WarmKey;
  make: (boot: PoolBoot) => Promise<string>;
  lastUsed: number;
  ready: Array<{ id: string; since: number }>;
  waiters: Waiter[];
  /** Boots in flight for this key (each one's sandbox goes to the first waiter, or is kept ready). */
  booting: number;
  /** Of those, the ones still in the background (refills no create waits on), oldest first. */
  background: PoolBoot[];
  rate: RateEstimate;
  longRate: RateEstimate;
  target: number;
  loggedTarget: number;
  excessSince: number | undefined;
  /** Replaced (template rebuilt or deleted, or least used of too many keys): serves its waiters, keeps nothing. */
  retired: boolean;
  failures: number;
  backoffUntil: number;
}

export interface WarmKeyStats {
  label: string;
  key: string;
  ready: number;
  booting: number;
  waiting: number;
  target: number;
  ratePerSecond: number;
}

/**
 * The warm pool's keys, each with the sandboxes it holds ready, the creates waiting on it in
 * arrival order and its boots in flight, and the hand-off between them: a sandbox, held or just
 * booted, goes to the oldest create waiting on its key. The pool (warm-pool.ts) sizes the keys and
 * starts their boots.
 */
export class WarmKeys {
  private readonly states = new Map<string, KeyState>();
  private seq = 1;

  constructor(
    private readonly o: { maxKeys: number; rateTauMs: number; longRateTauMs: number },
    /** Destroys a sandbox that is no longer held. */
    private readonly destroy: (id: string) => void,
  ) {}

  values() {
    return this.states.values();
  }

  stateFor(k: WarmKey, make: (boot: PoolBoot) => Promise<string>, now: number): KeyState {
    let s = this.states.get(k.key);
    if (!s) {
      s = {
        k,
        make,
        lastUsed: now,
        ready: [],
        waiters: [],
        booting: 0,
        background: [],
        rate: new RateEstimate(this.o.rateTauMs),
        longRate: new RateEstimate(this.o.longRateTauMs),
        target: 0,
        loggedTarget: 0,
        excessSince: undefined,
        retired: false,
        failures: 0,
        backoffUntil: 0,
      };
      this.states.set(k.key, s);
      // Another generation of the same template is a rebuilt one: it will not be asked for again.
      for (const other of this.states.values()) if (other !== s && other.k.templateId === k.templateId && other.k.generation !== k.generation) this.retire(other);
    }
    // Asked for again after it was retired (least used of too many keys): it is wanted after all.
    s.retired = false;
    s.make = make;
    s.lastUsed = now;
    this.trimKeys();
    return s;
  }

  retire(s: KeyState): void {
    s.retired = true;
    s.target = 0;
    for (const e of s.ready.splice(0)) this.destroy(e.id);
    this.forgetRetired();
  }

  forgetRetired(): void {
    for (const [key, s] of this.states) if (s.retired && s.waiters.length === 0 && s.booting === 0) this.states.delete(key);
  }

  /** Least recently used keys beyond `maxKeys` are retired (never one that creates are waiting on). */
  private trimKeys(): void {
    const live = [...this.states.values()].filter((s) => !s.retired);
    if (live.length <= this.o.maxKeys) return;
    const idle = live.filter((s) => s.waiters.length === 0).sort((a, b) => a.lastUsed - b.lastUsed);
    for (const s of idle.slice(0, live.length - this.o.maxKeys)) this.retire(s);
  }

  /** Destroys the ready sandboxes of `s` beyond its target once they have been for `afterMs` (a retired key's at once). */
  shrink(s: KeyState, now: number, afterMs: number): void {
    const excess = s.ready.length - s.target;
    if (excess <= 0) {
      s.excessSince = undefined;
    } else if (s.excessSince === undefined) {
      s.excessSince = now;
    }
    if (excess > 0 && (s.retired || now - s.excessSince! >= afterMs)) {
      // The oldest go first: the ones left are the freshest.
      for (const e of s.ready.splice(0, excess)) this.destroy(e.id);
      s.excessSince = undefined;
    }
  }

  // ---- waiters and hand-off ------------------------------------------------------------------------

  /**
   * Queues a create on `s` (a retry before everyone) and serves the key: whether a ready sandbox
   * went to it at once. Aborted while still waiting, it leaves the queue, rejected, and `left` runs.
   */
  wait(s: KeyState, resolve: (id: string) => void, reject: (err: unknown) => void, opts: { signal?: AbortSignal; retry?: boolean }, left: () => void): boolean {
    const onAbort = () => {
      const i = s.waiters.indexOf(w);
      if (i < 0) return;
      s.waiters.splice(i, 1);
      reject(abandonedCreate());
      left();
    };
    const w: Waiter = {
      seq: opts.retry ? 0 : this.seq++,
      resolve,
      reject,
      detach: () => opts.signal?.removeEventListener('abort', onAbort),
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    if (opts.retry) s.waiters.unshift(w);
    else s.waiters.push(w);
    this.serve(s);
    return w.served === true;
  }

  /** Ready sandboxes go to waiting creates, oldest of each first. */
  private serve(s: KeyState): void {
    while (s.ready.length > 0 && s.waiters.length > 0) {
      const e = s.ready.shift()!;
      const w = s.waiters.shift()!;
      w.served = true;
      w.detach();
      w.resolve(e.id);
    }
  }

  /**
   * Creates waiting on `s` beyond its boots in the foreground promote as many of its background
   * boots (oldest first): a create never waits on a boot that yields to everything else.
   */
  promoteCovering(s: KeyState): void {
    while (s.background.length > 0 && s.waiters.length > s.booting - s.background.length) s.background.shift()!.promote();
  }

  /** Creates waiting on any key. */
  waitingTotal(): number {
    let n = 0;
    for (const s of this.states.values()) n += s.waiters.length;
    return n;
  }

  /** The key whose first waiter without a boot in flight for it arrived first. */
  oldestUncovered(): KeyState | undefined {
    let best: KeyState | undefined;
    let bestSeq = Infinity;
    for (const s of this.states.values()) {
      const w = s.waiters[s.booting];
      if (w && w.seq < bestSeq) [best, bestSeq] = [s, w.seq];
    }
    return best;
  }

  /** A sandbox just booted for `s` goes to its oldest waiting create: whether there was one. */
  handOff(s: KeyState, id: string): boolean {
    const w = s.waiters.shift();
    if (!w) return false;
    w.detach();
    w.resolve(id);
    return true;
  }

  /** A boot for `s` failed: the oldest create left without a boot in flight for it fails with its error. */
  failUncovered(s: KeyState, err: unknown): void {
    if (s.waiters.length > s.booting) {
      const w = s.waiters.shift()!;
      w.detach();
      w.reject(err);
    }
  }

  /** Rejects every waiting create with `error()` and destroys every sandbox held. */
  empty(error: () => unknown): void {
    for (const s of this.states.values()) {
      for (const w of s.waiters.splice(0)) {
        w.detach();
        w.reject(error());
      }
      for (const e of s.ready.splice(0)) this.destroy(e.id);
    }
  }

  // ---- what they hold ------------------------------------------------------------------------------

  /** Ids currently held ready (not yet sandboxes of anyone). */
  ids(): string[] {
    return [...this.states.values()].flatMap((s) => s.ready.map((e) => e.id));
  }

  /** Creates waiting for a sandbox of `key` (none is ready): the next boot to end goes to the first. */
  waiting(key: string): number {
    return this.states.get(key)?.waiters.length ?? 0;
  }

  stats(now: number): WarmKeyStats[] {
    return [...this.states.values()].map((s) => ({
      label: s.k.label,
      key: s.k.key,
      ready: s.ready.length,
      booting: s.booting,
      waiting: s.waiters.length,
      target: s.target,
      ratePerSecond: s.rate.perSecond(now),
    }));
  }
}
