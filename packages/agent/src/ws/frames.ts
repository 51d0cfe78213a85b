import type { WebSocket } from 'ws';

/**
 * Gap between frames: real clients drop frames that arrive in one read (real-client-notes §1.11).
 * 1 ms suffices on an idle machine; a few more give a busy client (or proxy) room to keep up.
 */
export const MIN_FRAME_GAP_MS = 4;
/** Largest data payload of one coalesced output frame. */
const MAX_FRAME_DATA = 256 * 1024;

type Frame = Record<string, unknown> & { type: string };

/**
 * Sends JSON frames one at a time, at least MIN_FRAME_GAP_MS apart. Output that arrives while a
 * frame waits is appended to it (same type), so a chatty process costs few frames, not many.
 */
export class PacedSender {
  private queue: Frame[] = [];
  private timer: NodeJS.Timeout | null = null;
  private lastSentAt = 0;
  private idle: Array<() => void> = [];

  constructor(private readonly ws: WebSocket) {}

  output(type: string, data: string): void {
    if (data === '') return;
    const last = this.queue[this.queue.length - 1];
    if (last && last.type === type && typeof last.data === 'string' && last.data.length + data.length <= MAX_FRAME_DATA) {
      last.data += data;
      return;
    }
    this.send({ type, data });
  }

  send(frame: Frame): void {
    if (this.ws.readyState !== this.ws.OPEN) return;
    this.queue.push(frame);
    this.schedule();
  }

  /** Frames waiting to be sent. */
  get pending(): number {
    return this.queue.length;
  }

  /** Resolves once every queued frame has been handed to the socket. */
  drained(): Promise<void> {
    if (this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.queue = [];
    for (const r of this.idle.splice(0)) r();
  }

  private schedule(): void {
    if (this.timer) return;
    const wait = Math.max(0, Math.ceil(this.lastSentAt + MIN_FRAME_GAP_MS - performance.now()));
    this.timer = setTimeout(() => this.flushOne(), wait);
  }

  private flushOne(): void {
    this.timer = null;
    // Timers round to whole milliseconds and may fire a little early.
    if (performance.now() - this.lastSentAt < MIN_FRAME_GAP_MS) {
      this.schedule();
      return;
    }
    const frame = this.queue.shift();
    if (frame && this.ws.readyState === this.ws.OPEN) {
      if ('data' in frame || frame.type === 'result' || frame.type === 'error') frame.timestamp ??= new Date().toISOString();
      this.ws.send(JSON.stringify(frame));
      this.lastSentAt = performance.now();
    }
    if (this.queue.length > 0) this.schedule();
    else for (const r of this.idle.splice(0)) r();
  }
}
