import type { Coordination } from '../store/types/index.js';

/** One piece of work at a time per key: what the services lock a sandbox or an organization with. */
export interface Mutex {
  run<T>(key: string, fn: () => Promise<T>): Promise<T>;
  /** Whether work of this process holds (or waits for) `key` now. */
  busy(key: string): boolean;
  /** Whether work of any process holds `key` now (absent: this process is the only one, `busy` says it). */
  held?(key: string): Promise<boolean>;
}

/** Serializes async work per key within this process (one lifecycle operation at a time per sandbox). */
export class KeyedMutex implements Mutex {
  private tails = new Map<string, Promise<void>>();

  /** Whether work holds (or waits for) `key` now. */
  busy(key: string): boolean {
    return this.tails.has(key);
  }

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = prev.then(() => mine);
    this.tails.set(key, tail);
    await prev;
    try {
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}

/**
 * A KeyedMutex across the control replicas of a cluster: the key's lock in this process, then the
 * lock of `<scope>:<key>` in the store's coordination (PostgreSQL), so one replica at a time works
 * on a sandbox (or admits for an organization). This process's own waiters queue here, and only
 * the first asks the store. A wait for another replica's work lasts as long as that work; a store
 * that is away fails the wait with StoreUnavailableError (503) in bounded time.
 *
 * `busy` answers for this process's work only, at once; `held` for every replica's, from the store
 * (the sweep passes over a sandbox another replica works on, a snapshot's copy say, rather than
 * wait for it with the rest of its turn).
 */
export class ReplicaMutex implements Mutex {
  private readonly local = new KeyedMutex();

  constructor(
    private readonly coordination: Pick<Coordination, 'exclusive' | 'tryExclusive'>,
    private readonly scope: string,
  ) {}

  busy(key: string): boolean {
    return this.local.busy(key);
  }

  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    return this.local.run(key, () => this.coordination.exclusive(`${this.scope}:${key}`, fn));
  }

  /** Taken and given back at once if no one holds it: two queries on the store's locks connection. */
  async held(key: string): Promise<boolean> {
    if (this.local.busy(key)) return true;
    return !(await this.coordination.tryExclusive(`${this.scope}:${key}`, async () => undefined)).ran;
  }
}

/** Runs at most `size` tasks at once; the others wait in arrival order. */
export class Slots {
  private running = 0;
  private waiting: Array<() => void> = [];

  constructor(private readonly size: number) {
    if (!(size >= 1)) throw new Error(`slots: size must be at least 1, got ${size}`);
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    // A freed slot passes straight to the oldest waiting task, so none can slip in between.
    if (this.running >= this.size) await new Promise<void>((r) => this.waiting.push(r));
    else this.running++;
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }
}
