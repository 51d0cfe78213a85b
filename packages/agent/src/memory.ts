import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

type Gc = (options?: { type?: 'major' | 'minor'; execution?: 'sync' }) => void;
let gc: Gc | null = null;

/**
 * Streaming a large file through the agent allocates a 64 KiB buffer per socket read. V8 frees them
 * only when its heap fills, which a few small Buffer objects never do, so tens of MiB of dead
 * buffers pile up and their pages stay with the process afterwards. So a young-generation
 * collection (well under a millisecond on the agent's small heap) runs every `everyBytes`.
 * Buffers still queued for the disk at two young collections in a row are promoted to the old
 * generation, which only a full collection frees: collecting every MiB promoted most of a slow
 * disk's queue (+18 MiB of dead buffers over a 200 MB upload here, +49 MiB on a slower disk).
 * Every 4 MiB, a queued buffer rarely lives through two; and should the external memory still held
 * after a young collection grow by `majorAfterBytes` anyway, a full collection (a few ms) runs.
 * Measured over a 200 MB upload: peak +6–9 MiB, and 9.6 MiB private after (bench/agent).
 */
export class TransferGc {
  private sinceGc = 0;
  private total = 0;
  private readonly baseline = getHeapStatistics().external_memory;

  constructor(
    private readonly everyBytes = 4 * 1024 * 1024,
    private readonly majorAfterBytes = 16 * 1024 * 1024,
  ) {}

  count(bytes: number): void {
    this.total += bytes;
    this.sinceGc += bytes;
    if (this.sinceGc < this.everyBytes) return;
    this.sinceGc = 0;
    collect('minor');
    if (getHeapStatistics().external_memory - this.baseline > this.majorAfterBytes) collect('major');
  }

  /** After a big transfer, one full collection gives the grown old generation back. */
  done(): void {
    if (this.total >= this.everyBytes) setImmediate(() => collect('major'));
  }
}

export function collect(type: 'minor' | 'major'): void {
  if (!gc) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as Gc;
  }
  // Node 20's V8 runs a scavenge for any options object; a full collection takes no argument.
  if (type === 'minor') gc({ type });
  else gc();
}

/**
 * Once the agent has been idle for a moment after a burst of requests, one full collection returns
 * the old-generation pages the burst left fragmented (V8 would wait ~30 s for its memory reducer).
 */
export class IdleCollector {
  private timer: NodeJS.Timeout | null = null;
  private requests = 0;

  /** A lone request (a health check) is not a burst: it would make every idle agent collect. */
  constructor(
    private readonly idleMs = 1500,
    private readonly minRequests = 20,
  ) {}

  activity(): void {
    if (++this.requests < this.minRequests) return;
    if (this.timer) this.timer.refresh();
    else {
      this.timer = setTimeout(() => this.fire(), this.idleMs);
      this.timer.unref();
    }
  }

  private fire(): void {
    this.timer = null;
    this.requests = 0;
    collect('major');
  }
}
