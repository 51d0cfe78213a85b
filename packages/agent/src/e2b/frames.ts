import type { ServerResponse } from 'node:http';
import { ENVD_FRAME, ServiceError, type EnvdFrameKind } from '../proto.js';
import type { OutputKind } from './output-ring.js';
import { StreamQueue } from './stream-queue.js';

/**
 * The frame stream of the agent's /e2b/rt/ routes (the daemon's gateway turns it into E2B's
 * Connect stream): each frame `[kind: u8][length: u32 BE][payload]`.
 */
export const FRAMES_CONTENT_TYPE = 'application/vnd.sandboxd.frames';

export const FRAME = ENVD_FRAME;
export type FrameKind = EnvdFrameKind;

/** Largest payload of one frame; longer output is split. */
export const MAX_FRAME_BYTES = 1024 * 1024;
const HEADER_BYTES = 5;

export function encodeFrame(kind: FrameKind, payload: Uint8Array = new Uint8Array(0)): Buffer {
  if (payload.length > MAX_FRAME_BYTES) throw new RangeError(`a frame carries at most ${MAX_FRAME_BYTES} bytes`);
  const frame = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  frame.writeUInt8(kind, 0);
  frame.writeUInt32BE(payload.length, 1);
  frame.set(payload, HEADER_BYTES);
  return frame;
}

export function jsonFrame(value: unknown): Buffer {
  return encodeFrame(FRAME.json, Buffer.from(JSON.stringify(value), 'utf8'));
}

/** Output of a process as frames of its stream's kind, none larger than MAX_FRAME_BYTES. */
export function outputFrames(kind: OutputKind, data: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let off = 0; off < data.length; off += MAX_FRAME_BYTES) out.push(encodeFrame(FRAME[kind], data.subarray(off, off + MAX_FRAME_BYTES)));
  return out;
}

export interface Frame {
  kind: number;
  payload: Buffer;
}

/** Splits bytes read from a frame stream into frames; a partial frame waits for the next push. */
export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): Frame[] {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    const frames: Frame[] = [];
    while (this.buf.length >= HEADER_BYTES) {
      const length = this.buf.readUInt32BE(1);
      if (this.buf.length < HEADER_BYTES + length) break;
      frames.push({ kind: this.buf.readUInt8(0), payload: this.buf.subarray(HEADER_BYTES, HEADER_BYTES + length) });
      this.buf = this.buf.subarray(HEADER_BYTES + length);
    }
    return frames;
  }

  /** Bytes of a frame not complete yet. */
  get pending(): number {
    return this.buf.length;
  }
}

/** A bounded queue of encoded frames (a slow reader is ended with QUOTA_EXCEEDED). */
export function frameQueue(): StreamQueue<Buffer> {
  return new StreamQueue<Buffer>((f) => f.length);
}

const KEEPALIVE_FRAME = encodeFrame(FRAME.keepalive);

function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}

/**
 * Answers 200 with the frames of `queue` as they come, written with backpressure (the queue holds
 * what waits, and fails past its bound), a keepalive every `keepaliveMs`, and an error frame when
 * the queue fails. The client going away ends the queue; resolves once the response is done.
 */
export async function sendFrames(res: ServerResponse, queue: StreamQueue<Buffer>, keepaliveMs: number): Promise<void> {
  res.writeHead(200, { 'content-type': FRAMES_CONTENT_TYPE, 'cache-control': 'no-store' });
  res.flushHeaders();
  const gone = () => queue.end();
  res.once('close', gone);
  const keepalive = setInterval(() => queue.push(KEEPALIVE_FRAME), keepaliveMs);
  try {
    for await (const frame of queue) {
      if (res.destroyed) break;
      if (!res.write(frame)) await drained(res);
    }
  } catch (err) {
    const e = err instanceof ServiceError ? err : new ServiceError('INTERNAL_ERROR', 'the stream failed');
    if (!res.destroyed) res.write(jsonErrorFrame(e));
  } finally {
    clearInterval(keepalive);
    res.off('close', gone);
  }
  res.end();
}

function jsonErrorFrame(e: ServiceError): Buffer {
  return encodeFrame(FRAME.error, Buffer.from(JSON.stringify({ code: e.code, message: e.message }), 'utf8'));
}
