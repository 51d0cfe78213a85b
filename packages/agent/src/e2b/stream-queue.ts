import { ServiceError } from '../proto.js';

/** Bytes queued for one slow stream before it is ended (the process's output is still kept). */
export const MAX_QUEUED_BYTES = 16 * 1024 * 1024;

/**
 * Items produced by callbacks (process output, watch events) and consumed by a server-streaming
 * handler's `for await`. Bounded: a client that reads too slowly is ended with an error rather
 * than buffered without limit.
 */
export class StreamQueue<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private bytes = 0;
  private closed = false;
  private failure: unknown = null;
  private wake: (() => void) | null = null;

  constructor(private readonly sizeOf: (item: T) => number = () => 64) {}

  push(item: T): void {
    if (this.closed) return;
    this.bytes += this.sizeOf(item);
    if (this.bytes > MAX_QUEUED_BYTES) {
      this.fail(new ServiceError('QUOTA_EXCEEDED', 'the client read the stream too slowly; connect again to follow it'));
      return;
    }
    this.items.push(item);
    this.signal();
  }

  /** No more items after those queued. */
  end(): void {
    this.closed = true;
    this.signal();
  }

  fail(err: unknown): void {
    if (this.closed) return;
    this.failure = err;
    this.items = [];
    this.closed = true;
    this.signal();
  }

  private signal(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.items.length > 0) {
        const item = this.items.shift()!;
        this.bytes -= this.sizeOf(item);
        yield item;
        continue;
      }
      if (this.failure) throw this.failure;
      if (this.closed) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }
}

/** The keepalive interval a client asks for (Keepalive-Ping-Interval, seconds), within bounds. */
export function keepaliveMs(header: string | null): number {
  const n = header === null ? NaN : Number(header);
  return Number.isFinite(n) && n >= 1 ? Math.min(n, 300) * 1000 : 50_000;
}
