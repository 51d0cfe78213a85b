import type WebSocket from 'ws';
import type { AgentClient } from './agent.js';
import { ConnectionError } from './errors.js';
import { abortError, scope } from './signals.js';
import { openAgentSocket } from './ws.js';

export interface TerminalOptions {
  cols?: number;
  rows?: number;
  signal?: AbortSignal;
  /** Deadline for opening the connection, ms (default 30 000). */
  connectTimeoutMs?: number;
}

type OutputListener = (data: string) => void;
type ExitListener = (code: number | null) => void;

/**
 * An interactive shell in the sandbox over the agent's `/terminal` WebSocket (a PTY). Write input
 * with `write()`, read it with `onOutput()` or by iterating, resize with `resize()`. `exited`
 * resolves with the shell's exit code (null when the connection closed without one).
 */
export class Terminal implements AsyncIterable<string> {
  private readonly outputListeners = new Set<OutputListener>();
  private readonly exitListeners = new Set<ExitListener>();
  private readonly buffered: string[] = [];
  private waiter: (() => void) | undefined;
  private exitCode: number | null | undefined;
  private closing = false;
  private failure: unknown;
  readonly exited: Promise<number | null>;

  private constructor(private readonly ws: WebSocket, signal: AbortSignal | undefined) {
    let resolveExit!: (code: number | null) => void;
    this.exited = new Promise((r) => (resolveExit = r));
    const end = (code: number | null): void => {
      if (this.exitCode !== undefined) return;
      this.exitCode = code;
      for (const l of this.exitListeners) l(code);
      resolveExit(code);
      this.wake();
    };
    ws.on('message', (raw) => {
      let frame: { type?: unknown; data?: unknown; code?: unknown };
      try {
        frame = JSON.parse(raw.toString()) as typeof frame;
      } catch {
        return;
      }
      if (frame.type === 'output') {
        const d = String(frame.data ?? '');
        if (this.outputListeners.size) for (const l of this.outputListeners) l(d);
        else this.buffered.push(d);
        this.wake();
      } else if (frame.type === 'exit') {
        end(typeof frame.code === 'number' ? frame.code : null);
        ws.close(1000);
      }
    });
    ws.on('close', (code, reason) => {
      if (this.exitCode === undefined && !this.failure && !this.closing) {
        const why = reason.length ? `: ${reason.toString()}` : '';
        this.failure = new ConnectionError(`terminal connection closed before the shell exited (code ${code}${why})`, { code: 'CONNECTION_ERROR' });
      }
      end(null);
    });
    ws.on('error', (err) => {
      this.failure = new ConnectionError(`terminal connection failed: ${err.message}`, { code: 'CONNECTION_ERROR', cause: err });
      end(null);
    });
    if (signal) {
      const onAbort = (): void => {
        this.failure = abortError(signal.reason, 'terminal');
        ws.terminate();
      };
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
      void this.exited.then(() => signal.removeEventListener('abort', onAbort));
    }
  }

  static async open(agent: AgentClient, options: TerminalOptions = {}): Promise<Terminal> {
    const s = scope(options.signal, options.connectTimeoutMs ?? 30_000);
    let ws: WebSocket;
    try {
      const size = options.cols && options.rows ? `?cols=${Math.floor(options.cols)}&rows=${Math.floor(options.rows)}` : '';
      ws = await openAgentSocket(agent, `/terminal${size}`, s.signal);
    } finally {
      s.dispose();
    }
    return new Terminal(ws, options.signal);
  }

  /** Sends keystrokes / text (use `\r` for Enter, as a terminal does). */
  write(data: string): void {
    this.send({ type: 'input', data });
  }

  resize(cols: number, rows: number): void {
    this.send({ type: 'resize', cols: Math.max(1, Math.floor(cols)), rows: Math.max(1, Math.floor(rows)) });
  }

  /** Receives output; output that came before the first listener was buffered and is delivered now. */
  onOutput(listener: OutputListener): () => void {
    this.outputListeners.add(listener);
    for (const d of this.buffered.splice(0)) listener(d);
    return () => void this.outputListeners.delete(listener);
  }

  onExit(listener: ExitListener): () => void {
    if (this.exitCode !== undefined) listener(this.exitCode);
    else this.exitListeners.add(listener);
    return () => void this.exitListeners.delete(listener);
  }

  get closed(): boolean {
    return this.exitCode !== undefined;
  }

  /** The error that ended the session, if it did not end with the shell's exit. */
  get error(): unknown {
    return this.failure;
  }

  close(): void {
    this.closing = true;
    if (this.ws.readyState === this.ws.OPEN || this.ws.readyState === this.ws.CONNECTING) this.ws.close(1000);
  }

  /** Output chunks until the shell exits (only when no `onOutput` listener is attached). */
  async *[Symbol.asyncIterator](): AsyncGenerator<string, void, undefined> {
    for (;;) {
      while (this.buffered.length) yield this.buffered.shift()!;
      if (this.exitCode !== undefined) {
        if (this.failure) throw this.failure;
        return;
      }
      await new Promise<void>((r) => (this.waiter = r));
    }
  }

  /** Collects output until `predicate` matches the text so far; rejects after `timeoutMs` or when the shell exits first. */
  async waitFor(predicate: RegExp | string, timeoutMs = 10_000): Promise<string> {
    let text = '';
    const matches = (): boolean => (typeof predicate === 'string' ? text.includes(predicate) : predicate.test(text));
    return new Promise((resolve, reject) => {
      let settled = false;
      const cleanups: Array<() => void> = [];
      const settle = (err: unknown): void => {
        if (settled) return;
        settled = true;
        for (const c of cleanups) c();
        if (err) reject(err);
        else resolve(text);
      };
      const timer = setTimeout(() => {
        settle(abortError(new DOMException(`no match for ${String(predicate)} in ${timeoutMs} ms; got ${JSON.stringify(text.slice(-200))}`, 'TimeoutError'), 'terminal'));
      }, timeoutMs);
      cleanups.push(() => clearTimeout(timer));
      cleanups.push(
        this.onOutput((d) => {
          text += d;
          if (matches()) settle(undefined);
        }),
      );
      cleanups.push(
        this.onExit(() => {
          if (matches()) settle(undefined);
          else settle(new ConnectionError(`terminal exited before ${String(predicate)} appeared; got ${JSON.stringify(text.slice(-200))}`, { code: 'CONNECTION_ERROR' }));
        }),
      );
      // Listeners may have fired synchronously (buffered output, an earlier exit) before their cleanups were stored.
      if (settled) for (const c of cleanups) c();
    });
  }

  private send(frame: Record<string, unknown>): void {
    if (this.ws.readyState !== this.ws.OPEN) throw new ConnectionError('terminal is closed', { code: 'CONNECTION_ERROR' });
    this.ws.send(JSON.stringify(frame));
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }
}
