import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

type Gc = (options?: { type?: 'major' | 'minor'; execution?: 'sync' }) => void;
let gc: Gc | null = null;

/**
 * Streaming a large file through the agent allocates a 64 KiB buffer per socket read. V8 frees them
 * only when its heap fills, which a few small Buffer objects never do, so tens of MiB of dead
 * buffers pile up and their pages stay with the process afterwards. A young-generation collection
 * every few MiB (well under a millisecond on the agent's small heap) keeps the working set flat.
 */
export class TransferGc {
  private sinceGc = 0;

  constructor(private readonly everyBytes = 1024 * 1024) {}

  private total = 0;

  count(bytes: number): void {
    this.total += bytes;
    this.sinceGc += bytes;
    if (this.sinceGc < this.everyBytes) return;
    this.sinceGc = 0;
    collect('minor');
  }

  /** After a big transfer, one full collection gives the grown old generation back. */
  done(): void {
    if (this.total >= 4 * this.everyBytes) setImmediate(() => collect('major'));
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
