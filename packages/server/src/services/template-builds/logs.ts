import type { BuildRow } from '../../store/types/index.js';
import type { BuildCore } from './core.js';

/** At most this much of a build's output is kept (its stored log, and lines waiting to be written). */
export const MAX_BUILD_LOG_BYTES = 16 * 1024 * 1024;
/** Lines waiting to be written are joined into one string per this many, so a line costs its bytes only. */
const LOG_LINES_PER_PIECE = 1024;

/**
 * Appends a build's log lines through `append` (build-logs.ts). A step can print millions of
 * one-character lines: each line must cost its bytes and nothing more (no promise, closure or write
 * per line, which took ~400 bytes of heap a line and let three builds of short lines take the
 * daemon past its heap limit). Lines wait in joined pieces; one write at a time, at most one per
 * `gatherMs`, takes all that waits (a million lines are a few dozen writes); `onData` runs after
 * each write.
 */
export class BuildLogWriter {
  private lines: string[] = [];
  private pieces: string[] = [];
  private running: Promise<void> | undefined;

  constructor(
    private readonly append: (text: string) => Promise<void>,
    private readonly onData: () => void,
    private readonly gatherMs = 0,
  ) {}

  write(line: string): void {
    this.lines.push(`${line.replace(/\r?\n$/, '')}\n`);
    if (this.lines.length >= LOG_LINES_PER_PIECE) this.pieces.push(this.lines.splice(0).join(''));
    this.running ??= this.drain();
  }

  /** Resolves once everything written so far is stored (or could not be). */
  async flushed(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    try {
      while (this.pieces.length > 0 || this.lines.length > 0) {
        // Let the lines of the next gatherMs join this write.
        await new Promise<void>((r) => (this.gatherMs > 0 ? setTimeout(r, this.gatherMs) : setImmediate(r)));
        const text = this.pieces.splice(0).join('') + this.lines.splice(0).join('');
        await this.append(text).catch(() => undefined);
        this.onData();
      }
    } finally {
      this.running = undefined;
    }
  }
}

/** The level a build log line is shown with (JSON polling clients and SSE alike). */
export function levelOf(line: string): 'ERROR' | 'WARN' | 'INFO' {
  if (/\b(error|failed|fatal)\b|exit status|exit code [1-9]/i.test(line)) return 'ERROR';
  if (/\bwarn(ing)?\b/i.test(line)) return 'WARN';
  return 'INFO';
}

/** A build's log where it is kept: stored as it is written, read from an offset, followed as it grows (on any replica). */
export class BuildLogs {
  constructor(private readonly c: BuildCore) {}

  /** A writer of the build's log: it stores its lines in batches, and tells the followers after each. */
  writer(buildId: string): BuildLogWriter {
    return new BuildLogWriter((text) => this.append(buildId, text), () => this.c.announce(buildId), this.c.d.logs.gatherMs);
  }

  /** Stores a batch of the build's log. */
  private async append(buildId: string, text: string): Promise<void> {
    try {
      await this.c.d.logs.append(buildId, text);
    } catch (err) {
      // The build goes on without these lines (a full disk, a store restart): a log is not worth a build.
      this.c.d.log('cannot store build log lines', { build: buildId, error: String(err) });
    }
  }

  /** Log text from byte `offset` on (none past the end), and the offset to ask for next. */
  async logsSince(b: BuildRow, offset: number, maxBytes = 4 * 1024 * 1024): Promise<{ logs: string; offset: number; atEnd: boolean }> {
    const { data, size } = await this.c.d.logs.read(b.id, offset, maxBytes);
    if (offset >= size) return { logs: '', offset: size, atEnd: true };
    // Never split a line (or a UTF-8 character): stop after the last newline.
    const end = data.lastIndexOf(0x0a);
    const used = end === -1 ? data.length : end + 1;
    return { logs: data.subarray(0, used).toString('utf8'), offset: offset + used, atEnd: offset + used >= size };
  }

  /** Calls `fn` whenever more of the build's log is stored, or the build ended, on any replica (read it with logsSince). */
  onData(buildId: string, fn: () => void): () => void {
    this.c.live.on(buildId, fn);
    return () => this.c.live.off(buildId, fn);
  }

  onDone(buildId: string, fn: (status: string) => void): () => void {
    this.c.live.on(`${buildId}:done`, fn);
    return () => this.c.live.off(`${buildId}:done`, fn);
  }
}
