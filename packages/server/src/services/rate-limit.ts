import { ServiceError } from '@sandboxd/protocol';

/** A sliding-window counter per key: at most `limit` events in any `windowMs`. */
export class SlidingWindowLimiter {
  private events = new Map<string, number[]>();
  constructor(private limit: number, private windowMs: number, private what: string) {}

  /** Records one event for `key` or throws 429 with the seconds until a slot frees up. */
  take(key: string, now = Date.now()): void {
    const list = (this.events.get(key) ?? []).filter((t) => t > now - this.windowMs);
    if (list.length >= this.limit) {
      const retryAfter = Math.max(1, Math.ceil((list[0]! + this.windowMs - now) / 1000));
      this.events.set(key, list);
      throw new ServiceError(
        'RATE_LIMIT_EXCEEDED',
        `${this.what}: at most ${this.limit} per ${Math.round(this.windowMs / 1000)} s; retry in ${retryAfter} s`,
        { retry_after: retryAfter },
        { 'retry-after': String(retryAfter) },
      );
    }
    list.push(now);
    this.events.set(key, list);
  }

  usage(key: string, now = Date.now()): number {
    return (this.events.get(key) ?? []).filter((t) => t > now - this.windowMs).length;
  }
}
