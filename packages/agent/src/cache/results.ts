import { createHash } from 'node:crypto';

/**
 * Opt-in cache of execution results (requests with `"cache": true`), keyed by language, code, the
 * effective env and the working directory. In memory, bounded by entries, bytes and age.
 */
export class ResultCache<T> {
  hits = 0;
  misses = 0;
  private map = new Map<string, { value: T; bytes: number; at: number }>();
  private bytes = 0;

  constructor(
    readonly maxEntries: number,
    private readonly maxBytes: number,
    readonly ttlMs: number,
  ) {}

  static key(parts: { language: string; code: string; env: Record<string, string>; cwd: string; stdin?: string }): string {
    const env = Object.keys(parts.env)
      .sort()
      .map((k) => `${k}=${parts.env[k]}`)
      .join('\0');
    return createHash('sha256').update(JSON.stringify([parts.language, parts.code, env, parts.cwd, parts.stdin ?? null])).digest('hex');
  }

  get(key: string): T | undefined {
    const e = this.map.get(key);
    if (!e || Date.now() - e.at > this.ttlMs) {
      if (e) this.remove(key);
      this.misses++;
      return undefined;
    }
    this.hits++;
    this.map.delete(key); // re-insert: Map order is the LRU order
    this.map.set(key, e);
    return e.value;
  }

  set(key: string, value: T, bytes: number): void {
    if (bytes > this.maxBytes / 4) return; // one huge result must not evict everything else
    this.remove(key);
    this.map.set(key, { value, bytes, at: Date.now() });
    this.bytes += bytes;
    for (const k of this.map.keys()) {
      if (this.map.size <= this.maxEntries && this.bytes <= this.maxBytes) break;
      this.remove(k);
    }
  }

  get size(): number {
    return this.map.size;
  }

  clear(): number {
    const n = this.map.size;
    this.map.clear();
    this.bytes = 0;
    return n;
  }

  private remove(key: string): void {
    const e = this.map.get(key);
    if (!e) return;
    this.bytes -= e.bytes;
    this.map.delete(key);
  }
}
