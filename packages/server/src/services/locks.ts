/** Serializes async work per key (one lifecycle operation at a time per sandbox). */
export class KeyedMutex {
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
