/**
 * Collects one output stream up to a byte cap. Past the cap it keeps counting and drops the bytes,
 * so a flooding process never blocks on a full pipe and never grows the agent's memory.
 */
export class CappedOutput {
  private chunks: Buffer[] = [];
  private kept = 0;
  /** Every byte seen, kept or not. */
  totalBytes = 0;

  constructor(readonly capBytes: number) {}

  get truncated(): boolean {
    return this.totalBytes > this.kept;
  }

  push(chunk: Buffer): void {
    this.totalBytes += chunk.length;
    const room = this.capBytes - this.kept;
    if (room <= 0) return;
    const part = chunk.length <= room ? chunk : chunk.subarray(0, room);
    this.chunks.push(part);
    this.kept += part.length;
  }

  /** UTF-8 text of what was kept; a multi-byte character cut by the cap is dropped, not mangled. */
  text(): string {
    if (this.chunks.length === 0) return '';
    let buf = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.kept);
    this.chunks = [buf];
    if (this.truncated) buf = buf.subarray(0, utf8SafeEnd(buf));
    return buf.toString('utf8');
  }
}

/** Length of `buf` without a trailing incomplete UTF-8 sequence. */
export function utf8SafeEnd(buf: Buffer): number {
  const n = buf.length;
  // Walk back over at most 3 continuation bytes to the lead byte of the last character.
  for (let i = n - 1, seen = 0; i >= 0 && seen < 4; i--, seen++) {
    const b = buf[i]!;
    if ((b & 0xc0) === 0x80) continue; // continuation byte
    const need = b < 0x80 ? 1 : (b & 0xe0) === 0xc0 ? 2 : (b & 0xf0) === 0xe0 ? 3 : (b & 0xf8) === 0xf0 ? 4 : 1;
    return n - i >= need ? n : i;
  }
  return n;
}
