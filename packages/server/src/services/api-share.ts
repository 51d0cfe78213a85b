import { ServiceError } from '@sandboxd/protocol';

export interface ApiShareOptions {
  /** Requests a second each organization is served at, sustained (0: no limit). */
  rate: number;
  /** Requests an organization may make at once above the rate, after a pause (the bucket's size). */
  burst: number;
  /** The longest a request waits for its turn; one that would wait longer is refused (429). */
  maxWaitMs: number;
  now?: () => number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/**
 * Each organization's share of the API: a token bucket per organization. A request within the
 * bucket is served at once; past it, it waits for its turn (held, costing the daemon nothing), so
 * that one organization calling without pause is served at its rate and the others' requests do
 * not queue behind its own; a request that would wait longer than `maxWaitMs` is refused at once
 * with `429 RATE_LIMIT_EXCEEDED` and a Retry-After. Kept per process (each control replica serves
 * its own share).
 */
export class ApiShare {
  private readonly buckets = new Map<string, Bucket>();
  private readonly now: () => number;

  constructor(private readonly o: ApiShareOptions) {
    this.now = o.now ?? (() => performance.now());
  }

  /** Admits one request of `orgId`: undefined when at once, a promise of its turn, or throws 429. */
  admit(orgId: string): Promise<void> | undefined {
    const { rate, burst, maxWaitMs } = this.o;
    if (rate <= 0) return undefined;
    const now = this.now();
    let b = this.buckets.get(orgId);
    if (!b) {
      if (this.buckets.size >= 4096) this.forgetFull(now);
      b = { tokens: burst, at: now };
      this.buckets.set(orgId, b);
    }
    b.tokens = Math.min(burst, b.tokens + ((now - b.at) * rate) / 1000);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return undefined;
    }
    // Turns are taken in order: the balance goes below zero by the requests already waiting.
    const waitMs = ((1 - b.tokens) * 1000) / rate;
    if (waitMs > maxWaitMs) {
      const retryAfter = Math.max(1, Math.ceil((waitMs - maxWaitMs) / 1000));
      throw new ServiceError(
        'RATE_LIMIT_EXCEEDED',
        `this organization's API requests: at most ${rate} per second (a burst of ${burst}), and as many wait their turn as ${Math.round(maxWaitMs / 1000)} s holds; retry in ${retryAfter} s`,
        { retry_after: retryAfter },
        { 'retry-after': String(retryAfter) },
      );
    }
    b.tokens -= 1;
    return new Promise((resolve) => setTimeout(resolve, waitMs));
  }

  /** Organizations whose bucket has refilled are the same as unknown ones: forgotten. */
  private forgetFull(now: number): void {
    for (const [org, b] of this.buckets) {
      if (b.tokens + ((now - b.at) * this.o.rate) / 1000 >= this.o.burst) this.buckets.delete(org);
    }
  }
}
