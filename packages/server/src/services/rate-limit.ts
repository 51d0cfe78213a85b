import { randomUUID } from 'node:crypto';
import { ServiceError } from '@sandboxd/protocol';
import type { Store } from '../store/types/index.js';

/** A limit on events per key (an organization's sandbox creates): in this process, or shared through the store. */
export interface RateLimiter {
  /** Records one event for `key`, or throws 429 with the seconds until a slot frees up. */
  take(key: string): void | Promise<void>;
  usage(key: string): number | Promise<number>;
  /**
   * The window of `key` as it is now, for takes the caller serializes per key itself (the
   * organization's admission lock): read once, then taken from in turn, then recorded together.
   */
  window?(key: string): Promise<RateWindow>;
}

/** A window read once (RateLimiter.window): its takes are decided here and recorded by commit. */
export interface RateWindow {
  /** The 429 for one more event, or undefined when it fits (then it counts as taken). */
  take(): ServiceError | undefined;
  /** Records the events taken. */
  commit(): Promise<void>;
  /** The events the window still has room for after those taken. */
  remaining(): number;
}

function exceeded(what: string, limit: number, windowMs: number, retryAfter: number): ServiceError {
  return new ServiceError('RATE_LIMIT_EXCEEDED', `${what}: at most ${limit} per ${Math.round(windowMs / 1000)} s; retry in ${retryAfter} s`, { retry_after: retryAfter }, { 'retry-after': String(retryAfter) });
}

/** A sliding-window counter per key: at most `limit` events in any `windowMs`. */
export class SlidingWindowLimiter implements RateLimiter {
  private events = new Map<string, number[]>();
  constructor(private limit: number, private windowMs: number, private what: string) {}

  /** Records one event for `key` or throws 429 with the seconds until a slot frees up. */
  take(key: string, now = Date.now()): void {
    const list = (this.events.get(key) ?? []).filter((t) => t > now - this.windowMs);
    if (list.length >= this.limit) {
      const retryAfter = Math.max(1, Math.ceil((list[0]! + this.windowMs - now) / 1000));
      this.events.set(key, list);
      throw exceeded(this.what, this.limit, this.windowMs, retryAfter);
    }
    list.push(now);
    this.events.set(key, list);
  }

  usage(key: string, now = Date.now()): number {
    return (this.events.get(key) ?? []).filter((t) => t > now - this.windowMs).length;
  }

  async window(key: string): Promise<RateWindow> {
    return {
      take: () => {
        try {
          this.take(key);
          return undefined;
        } catch (err) {
          if (err instanceof ServiceError) return err;
          throw err;
        }
      },
      commit: async () => undefined,
      remaining: () => Math.max(0, this.limit - this.usage(key)),
    };
  }
}

/**
 * The same sliding window, counted in the store, so that every replica of control sharing it
 * enforces one limit together. An event is recorded first and counted with the others after: two
 * replicas racing for the last slot may both refuse (never both admit), and the one refused takes
 * its event back.
 */
export class SharedWindowLimiter implements RateLimiter {
  private lastPurge = 0;
  constructor(
    private readonly store: Pick<Store, 'rates'>,
    private readonly limit: number,
    private readonly windowMs: number,
    private readonly what: string,
    private readonly scope = 'creates',
  ) {}

  async take(key: string, now = Date.now()): Promise<void> {
    const k = `${this.scope}:${key}`;
    const id = randomUUID();
    await this.store.rates.record(k, now, id);
    const { n, oldest } = await this.store.rates.count(k, now - this.windowMs);
    if (n > this.limit) {
      await this.store.rates.remove(id);
      const retryAfter = Math.max(1, Math.ceil(((oldest ?? now) + this.windowMs - now) / 1000));
      throw exceeded(this.what, this.limit, this.windowMs, retryAfter);
    }
    if (now - this.lastPurge > this.windowMs) {
      this.lastPurge = now;
      await this.store.rates.purge(now - 2 * this.windowMs).catch(() => 0);
    }
  }

  async usage(key: string, now = Date.now()): Promise<number> {
    return (await this.store.rates.count(`${this.scope}:${key}`, now - this.windowMs)).n;
  }

  /**
   * One count of the window, then takes decided against it: exact only while the caller keeps
   * every other take of `key` out (every replica's: the organization's admission lock), which is
   * what saves the record-then-count of take (two round trips in a row).
   */
  async window(key: string, now = Date.now()): Promise<RateWindow> {
    const k = `${this.scope}:${key}`;
    const { n, oldest } = await this.store.rates.count(k, now - this.windowMs);
    let taken = 0;
    return {
      take: () => {
        if (n + taken >= this.limit) {
          const retryAfter = Math.max(1, Math.ceil(((oldest ?? now) + this.windowMs - now) / 1000));
          return exceeded(this.what, this.limit, this.windowMs, retryAfter);
        }
        taken++;
        return undefined;
      },
      commit: async () => {
        await Promise.all(Array.from({ length: taken }, () => this.store.rates.record(k, now, randomUUID())));
        if (now - this.lastPurge > this.windowMs) {
          this.lastPurge = now;
          await this.store.rates.purge(now - 2 * this.windowMs).catch(() => 0);
        }
      },
      remaining: () => Math.max(0, this.limit - n - taken),
    };
  }
}
