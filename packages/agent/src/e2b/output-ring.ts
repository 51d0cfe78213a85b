/** Which stream a chunk of process output came from. */
export type OutputKind = 'stdout' | 'stderr' | 'pty';

export interface OutputChunk {
  kind: OutputKind;
  data: Buffer;
}

/**
 * The output a process wrote, kept so that a client that connects later sees it: at most
 * `capBytes` per stream, the oldest chunks of a stream dropped first. Order across streams is
 * kept as it arrived.
 */
export class OutputRing {
  private chunks: OutputChunk[] = [];
  private head = 0;
  private readonly bytes: Record<OutputKind, number> = { stdout: 0, stderr: 0, pty: 0 };
  /** Bytes dropped per stream since the start (a replay says how much it misses). */
  readonly dropped: Record<OutputKind, number> = { stdout: 0, stderr: 0, pty: 0 };

  /** `onSize` hears every change of the bytes kept (a table keeps a budget across rings). */
  constructor(
    private readonly capBytes: number,
    private readonly onSize: (delta: number) => void = () => undefined,
  ) {}

  /** Bytes kept, all streams. */
  get total(): number {
    return this.bytes.stdout + this.bytes.stderr + this.bytes.pty;
  }

  /** Drops the oldest output (any stream) until at most `maxBytes` are kept. */
  trimTo(maxBytes: number): void {
    while (this.total > maxBytes && this.head < this.chunks.length) {
      const c = this.chunks[this.head]!;
      const over = this.total - maxBytes;
      if (c.data.length > over) {
        this.chunks[this.head] = { kind: c.kind, data: c.data.subarray(over) };
        this.account(c.kind, -over);
      } else {
        this.chunks[this.head] = { kind: c.kind, data: Buffer.alloc(0) };
        this.account(c.kind, -c.data.length);
      }
      while (this.head < this.chunks.length && this.chunks[this.head]!.data.length === 0) this.head++;
    }
  }

  private account(kind: OutputKind, delta: number): void {
    this.bytes[kind] += delta;
    if (delta < 0) this.dropped[kind] -= delta;
    this.onSize(delta);
  }

  push(kind: OutputKind, data: Buffer): void {
    if (data.length === 0) return;
    if (data.length > this.capBytes) {
      this.dropped[kind] += data.length - this.capBytes;
      data = data.subarray(data.length - this.capBytes);
    }
    this.chunks.push({ kind, data });
    this.bytes[kind] += data.length;
    this.onSize(data.length);
    while (this.bytes[kind] > this.capBytes) this.dropOldest(kind);
    if (this.head > 1024 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
  }

  /** What is kept, oldest first. */
  snapshot(): OutputChunk[] {
    return this.chunks.slice(this.head).filter((c) => c.data.length > 0);
  }

  size(kind: OutputKind): number {
    return this.bytes[kind];
  }

  private dropOldest(kind: OutputKind): void {
    for (let i = this.head; i < this.chunks.length; i++) {
      const c = this.chunks[i]!;
      if (c.kind !== kind || c.data.length === 0) continue;
      const over = this.bytes[kind] - this.capBytes;
      if (c.data.length > over) {
        // Only part of this chunk is too much: keep its tail.
        this.chunks[i] = { kind, data: c.data.subarray(over) };
        this.account(kind, -over);
      } else {
        this.chunks[i] = { kind, data: Buffer.alloc(0) };
        this.account(kind, -c.data.length);
      }
      break;
    }
    while (this.head < this.chunks.length && this.chunks[this.head]!.data.length === 0) this.head++;
  }
}
