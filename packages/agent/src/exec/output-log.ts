import { utf8SafeEnd } from './capture.js';

export type OutputStream = 'stdout' | 'stderr';

/** What a read returns: output as it was written, or the bytes the ring no longer holds. */
export type LogItem = { kind: 'output'; stream: OutputStream; offset: number; data: Buffer } | { kind: 'lost'; offset: number; bytes: number };

export interface LogRead {
  items: LogItem[];
  /** Where the next read starts: the end of what this one returned. */
  next: number;
  /** Bytes between `since` and `next` that the ring no longer holds. */
  lostBytes: number;
}

interface Chunk {
  offset: number;
  block: Buffer;
  from: number;
  to: number;
}

/** Smallest and largest block a stream appends into; small writes share one, so a line costs no object. */
const MIN_BLOCK = 1024;
const MAX_BLOCK = 16 * 1024;

/** One stream's chunks, oldest first; dropping from the front is O(1). */
class StreamQueue {
  chunks: Chunk[] = [];
  head = 0;
  bytes = 0;
  /** Bytes of this stream written and no longer kept. */
  dropped = 0;
  private blockSize = MIN_BLOCK;

  constructor(readonly name: OutputStream) {}

  get first(): Chunk | undefined {
    return this.chunks[this.head];
  }

  append(offset: number, data: Buffer): void {
    const last = this.chunks.length > this.head ? this.chunks[this.chunks.length - 1]! : undefined;
    // Contiguous with this stream's last chunk and room left in its block: copy in place.
    if (last && last.offset + (last.to - last.from) === offset && last.to + data.length <= last.block.length) {
      data.copy(last.block, last.to);
      last.to += data.length;
    } else {
      this.blockSize = Math.min(MAX_BLOCK, this.blockSize * 2);
      const block = Buffer.allocUnsafe(Math.max(data.length, this.blockSize));
      data.copy(block, 0);
      this.chunks.push({ offset, block, from: 0, to: data.length });
    }
    this.bytes += data.length;
  }

  /** Drops `bytes` from the front, whole characters only (a partial one goes too). */
  dropFront(bytes: number): void {
    while (bytes > 0 && this.head < this.chunks.length) {
      const c = this.chunks[this.head]!;
      const len = c.to - c.from;
      if (len <= bytes) {
        this.chunks[this.head] = undefined as unknown as Chunk;
        this.head++;
        this.bytes -= len;
        this.dropped += len;
        bytes -= len;
        continue;
      }
      let cut = c.from + bytes;
      while (cut < c.to && (c.block[cut]! & 0xc0) === 0x80) cut++;
      this.bytes -= cut - c.from;
      this.dropped += cut - c.from;
      c.offset += cut - c.from;
      c.from = cut;
      if (c.from === c.to) {
        this.chunks[this.head] = undefined as unknown as Chunk;
        this.head++;
      }
      bytes = 0;
    }
    if (this.head > 64 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
  }

  /** Index of the first chunk that ends after `offset`. */
  seek(offset: number): number {
    let lo = this.head;
    let hi = this.chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const c = this.chunks[mid]!;
      if (c.offset + (c.to - c.from) <= offset) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/**
 * A process's combined output, kept while it runs and after: at most `capPerStreamBytes` of each
 * stream, the oldest dropped first. Every byte has an offset in one sequence of both streams, so a
 * client that read up to an offset can ask for what follows and learn exactly how much it missed.
 * Bytes are taken in whole UTF-8 characters (a character split between two writes waits for its
 * end), so that every chunk and every read is text that decodes cleanly.
 */
export class OutputLog {
  private readonly streams: Record<OutputStream, StreamQueue> = { stdout: new StreamQueue('stdout'), stderr: new StreamQueue('stderr') };
  private readonly pending: Record<OutputStream, Buffer | null> = { stdout: null, stderr: null };
  private readonly listeners = new Set<() => void>();
  /** Offset of the next byte written: every byte ever taken, kept or not. */
  end = 0;
  closed = false;

  constructor(readonly capPerStreamBytes: number) {
    if (!(capPerStreamBytes >= 4)) throw new RangeError('capPerStreamBytes must be at least 4');
  }

  /** The offset of the oldest byte still kept (`end` when nothing is). */
  get start(): number {
    const a = this.streams.stdout.first?.offset ?? this.end;
    const b = this.streams.stderr.first?.offset ?? this.end;
    return Math.min(a, b);
  }

  /** Bytes held now, both streams. */
  get keptBytes(): number {
    return this.streams.stdout.bytes + this.streams.stderr.bytes;
  }

  write(stream: OutputStream, chunk: Buffer): void {
    if (this.closed || chunk.length === 0) return;
    const held = this.pending[stream];
    let data = held ? Buffer.concat([held, chunk]) : chunk;
    const safe = utf8SafeEnd(data);
    this.pending[stream] = safe < data.length ? Buffer.from(data.subarray(safe)) : null;
    data = data.subarray(0, safe);
    if (data.length > 0) this.take(stream, data);
  }

  /** No more output: a character left incomplete is taken as it is, and followers are told. */
  close(): void {
    if (this.closed) return;
    for (const s of ['stdout', 'stderr'] as const) {
      const held = this.pending[s];
      this.pending[s] = null;
      if (held) this.take(s, held);
    }
    this.closed = true;
    this.notify();
  }

  /** Drops everything kept (the offsets stay: a later read reports it all lost). */
  release(): void {
    for (const q of Object.values(this.streams)) q.dropFront(q.bytes);
  }

  /** Called after each write and at close; returns the function that stops it. */
  follow(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  get followers(): number {
    return this.listeners.size;
  }

  /**
   * What is kept from `since`, in write order, up to `maxBytes` of output (at least one whole
   * character when any is there). Gaps (dropped bytes) come as `lost` items.
   */
  read(since: number, maxBytes = Infinity): LogRead {
    if (!Number.isSafeInteger(since) || since < 0) throw new RangeError('since must be a non-negative integer');
    if (since > this.end) throw new RangeError(`since ${since} is past the end (${this.end})`);
    const items: LogItem[] = [];
    const out = this.streams.stdout;
    const err = this.streams.stderr;
    let i = out.seek(since);
    let j = err.seek(since);
    let pos = since;
    let lostBytes = 0;
    let budget = maxBytes;
    let cutShort = false;
    while (budget > 0) {
      const a = out.chunks[i];
      const b = err.chunks[j];
      if (!a && !b) break;
      const [c, q] = !b || (a && a.offset < b.offset) ? [a!, out] : [b, err];
      if (q === out) i++;
      else j++;
      if (c.offset > pos) {
        items.push({ kind: 'lost', offset: pos, bytes: c.offset - pos });
        lostBytes += c.offset - pos;
        pos = c.offset;
      }
      let from = c.from + (pos - c.offset);
      // A read that starts inside a character (an offset a client made up) starts at the next one.
      while (from < c.to && (c.block[from]! & 0xc0) === 0x80) from++;
      let to = c.to;
      if (to - from > budget) {
        to = from + utf8SafeEnd(c.block.subarray(from, from + budget));
        if (to === from) to = Math.min(c.to, from + charLength(c.block[from]!)); // one character, whatever the budget
      }
      if (to > from) {
        const data = c.block.subarray(from, to);
        const prev = items[items.length - 1];
        // Consecutive pieces of one stream read as one.
        if (prev?.kind === 'output' && prev.stream === q.name && prev.offset + prev.data.length === c.offset + (from - c.from)) {
          prev.data = Buffer.concat([prev.data, data]);
        } else {
          items.push({ kind: 'output', stream: q.name, offset: c.offset + (from - c.from), data });
        }
        budget -= to - from;
      }
      pos = c.offset + (to - c.from);
      if (to < c.to) {
        cutShort = true;
        break;
      }
    }
    if (!cutShort && budget > 0 && pos < this.end) {
      // The rest was dropped (a released log).
      items.push({ kind: 'lost', offset: pos, bytes: this.end - pos });
      lostBytes += this.end - pos;
      pos = this.end;
    }
    return { items, next: pos, lostBytes };
  }

  /**
   * The last `maxBytes` (at most) kept of one stream as text, and whether that is not all it wrote:
   * the finished record of a background process (`stdout`, `stderr`, `truncated`), read from here
   * so that its output is held once.
   */
  tail(stream: OutputStream, maxBytes: number): { text: string; truncated: boolean } {
    const q = this.streams[stream];
    const parts: Buffer[] = [];
    let n = 0;
    for (let i = q.chunks.length - 1; i >= q.head && n < maxBytes; i--) {
      const c = q.chunks[i]!;
      let from = Math.max(c.from, c.to - (maxBytes - n));
      while (from < c.to && (c.block[from]! & 0xc0) === 0x80) from++;
      parts.push(c.block.subarray(from, c.to));
      n += c.to - from;
    }
    const text = Buffer.concat(parts.reverse(), n).toString('utf8');
    return { text, truncated: q.dropped > 0 || n < q.bytes };
  }

  private take(stream: OutputStream, data: Buffer): void {
    const q = this.streams[stream];
    if (data.length > this.capPerStreamBytes) {
      // Only its tail could be kept: the rest counts as written and dropped.
      let cut = data.length - this.capPerStreamBytes;
      while (cut < data.length && (data[cut]! & 0xc0) === 0x80) cut++;
      this.end += cut;
      q.dropped += cut;
      data = data.subarray(cut);
    }
    q.append(this.end, data);
    this.end += data.length;
    if (q.bytes > this.capPerStreamBytes) q.dropFront(q.bytes - this.capPerStreamBytes);
    this.notify();
  }

  private notify(): void {
    for (const l of this.listeners) l();
  }
}

/** Bytes of the UTF-8 character that starts with `lead` (1 for a byte that starts none). */
function charLength(lead: number): number {
  return lead >= 0xf0 && lead < 0xf8 ? 4 : lead >= 0xe0 && lead < 0xf0 ? 3 : lead >= 0xc0 && lead < 0xe0 ? 2 : 1;
}
