import { ServiceError } from '../proto.js';

/** Bytes queued for one slow stream before it is ended (the process's output is still kept). */
export const MAX_QUEUED_BYTES = 16 * 1024 * 1024;

/**
 * Items produced by callbacks (process output, watch events) and consumed by a frame stream's writer
 * (sendFrames). Bounded: a client that reads too slowly is ended with an error rather
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

/** Keepalive interval when the client names none, and its bounds. */
export const DEFAULT_KEEPALIVE_MS = 50_000;
const MIN_KEEPALIVE_MS = 1000;
const MAX_KEEPALIVE_MS = 300_000;

/** The keepalive interval a client asks for (keepalive_ms), within bounds; absent: the default. */
export function keepaliveMs(value: unknown): number {
  if (value === undefined || value === null) return DEFAULT_KEEPALIVE_MS;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new ServiceError('VALIDATION_ERROR', 'keepalive_ms must be a number', { field: 'keepalive_ms' });
  return Math.min(Math.max(Math.round(value), MIN_KEEPALIVE_MS), MAX_KEEPALIVE_MS);
}
