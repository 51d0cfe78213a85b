/**
 * Finds where one cell's output ends on a stream: the kernel writes `\0sbx-end:NONCE\0` after it.
 * Bytes that may be the start of the marker are held back until the next chunk tells.
 */
export class EndScanner {
  private held = Buffer.alloc(0);
  ended = false;
  constructor(private readonly marker: Buffer) {}

  /** The bytes of `chunk` that are the cell's output (nothing once the marker was seen). */
  feed(chunk: Buffer): Buffer {
    if (this.ended) return Buffer.alloc(0);
    const buf = this.held.length ? Buffer.concat([this.held, chunk]) : chunk;
    const at = buf.indexOf(this.marker);
    if (at >= 0) {
      this.ended = true;
      this.held = Buffer.alloc(0);
      return buf.subarray(0, at);
    }
    let keep = Math.min(this.marker.length - 1, buf.length);
    while (keep > 0 && !buf.subarray(buf.length - keep).equals(this.marker.subarray(0, keep))) keep--;
    this.held = Buffer.from(buf.subarray(buf.length - keep));
    return buf.subarray(0, buf.length - keep);
  }

  /** What is held back, when the stream ended without the marker. */
  flush(): Buffer {
    const rest = this.held;
    this.held = Buffer.alloc(0);
    return rest;
  }
}
