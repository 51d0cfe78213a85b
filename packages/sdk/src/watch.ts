import type WebSocket from 'ws';
import type { AgentClient } from './agent.js';
import { ConnectionError, errorFromResponse } from './errors.js';
import { abortError, scope } from './signals.js';
import { openAgentSocket } from './ws.js';

export type FileChangeEvent = 'created' | 'modified' | 'deleted' | 'renamed';

export interface FileChange {
  event: FileChangeEvent;
  /** Absolute path inside the sandbox (the new path for `renamed`). */
  path: string;
  /** The path before the move, for `renamed`. */
  oldPath?: string;
  isDir: boolean;
  timestamp: string;
}

export interface WatchOptions {
  signal?: AbortSignal;
  /** Deadline for the watch to be in place, ms (default 30 000). */
  connectTimeoutMs?: number;
  /** Called when the agent could not report everything (events dropped, too many directories). */
  onWarning?: (warning: { code: string; message: string }) => void;
}

type Listener = (change: FileChange) => void;

/**
 * Changes below a directory of the sandbox, over the agent's `/files/watch` WebSocket (inotify,
 * recursive). Iterate it, or attach `onChange()`; `close()` (or the signal) ends it. A watch ends by
 * itself when the directory is removed: the last change is its `deleted`.
 */
export class FileWatcher implements AsyncIterable<FileChange> {
  private readonly listeners = new Set<Listener>();
  private readonly buffered: FileChange[] = [];
  private waiter: (() => void) | undefined;
  private ended = false;
  private failure: unknown;
  private closing = false;

  private readonly ready: Promise<void>;
  private path_ = '';

  private constructor(
    private readonly ws: WebSocket,
    requested: string,
    options: WatchOptions,
  ) {
    this.path_ = requested;
    let started = false;
    let settleReady!: (err?: unknown) => void;
    this.ready = new Promise<void>((resolve, reject) => (settleReady = (err) => (err ? reject(err) : resolve())));
    ws.on('message', (raw) => {
      const frame = parse(raw);
      if (frame?.type === 'watching') {
        started = true;
        if (typeof frame.path === 'string') this.path_ = frame.path;
        settleReady();
      } else if (frame?.type === 'change') {
        this.deliver(toChange(frame));
      } else if (frame?.type === 'warning') {
        options.onWarning?.({ code: String(frame.code ?? ''), message: String(frame.message ?? '') });
      } else if (frame?.type === 'error') {
        this.failure = errorFromResponse({ status: 0, body: frame });
        ws.close(1000);
      }
    });
    ws.on('close', () => {
      if (!started) settleReady(this.failure ?? new ConnectionError(`file watch of ${requested} closed before it started`, { code: 'CONNECTION_ERROR' }));
      this.end();
    });
    ws.on('error', (err) => {
      this.failure ??= new ConnectionError(`file watch connection failed: ${err.message}`, { code: 'CONNECTION_ERROR', cause: err });
      this.end();
    });
    const signal = options.signal;
    if (signal) {
      const onAbort = (): void => {
        this.closing = true;
        this.failure ??= abortError(signal.reason, `watch ${requested}`);
        ws.terminate();
      };
      signal.addEventListener('abort', onAbort, { once: true });
      ws.once('close', () => signal.removeEventListener('abort', onAbort));
    }
    ws.send(JSON.stringify({ action: 'watch', path: requested, ack: true }));
  }

  /** The watched directory, absolute. */
  get path(): string {
    return this.path_;
  }

  /** Opens the socket and resolves once the whole tree is watched: no later change is missed. */
  static async open(agent: AgentClient, path: string, options: WatchOptions = {}): Promise<FileWatcher> {
    const s = scope(options.signal, options.connectTimeoutMs ?? 30_000);
    let watcher: FileWatcher | undefined;
    const onAbort = (): void => watcher?.ws.terminate();
    s.signal.addEventListener('abort', onAbort, { once: true });
    try {
      watcher = new FileWatcher(await openAgentSocket(agent, '/files/watch', s.signal), path, options);
      await watcher.ready;
      return watcher;
    } catch (err) {
      throw s.signal.aborted ? abortError(s.signal.reason, `watch ${path}`) : err;
    } finally {
      s.signal.removeEventListener('abort', onAbort);
      s.dispose();
    }
  }

  /** Receives changes; changes that came before the first listener were buffered and are delivered now. */
  onChange(listener: Listener): () => void {
    this.listeners.add(listener);
    for (const c of this.buffered.splice(0)) listener(c);
    return () => void this.listeners.delete(listener);
  }

  get closed(): boolean {
    return this.ended;
  }

  close(): void {
    this.closing = true;
    if (this.ws.readyState === this.ws.OPEN || this.ws.readyState === this.ws.CONNECTING) this.ws.close(1000);
  }

  /** Changes until the watch ends; throws what ended it, if it was not `close()` or the directory's removal. */
  async *[Symbol.asyncIterator](): AsyncGenerator<FileChange, void, undefined> {
    try {
      for (;;) {
        while (this.buffered.length) yield this.buffered.shift()!;
        if (this.ended) {
          if (this.failure && !this.closing) throw this.failure;
          return;
        }
        await new Promise<void>((r) => (this.waiter = r));
      }
    } finally {
      // `break` out of a for-await ends the watch.
      this.close();
    }
  }

  private deliver(change: FileChange): void {
    if (this.listeners.size) for (const l of this.listeners) l(change);
    else this.buffered.push(change);
    this.wake();
  }

  private end(): void {
    this.ended = true;
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }
}

function parse(raw: WebSocket.RawData): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(raw.toString());
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

function toChange(f: Record<string, unknown>): FileChange {
  const c: FileChange = {
    event: String(f.event) as FileChangeEvent,
    path: String(f.path ?? ''),
    isDir: f.is_dir === true,
    timestamp: String(f.timestamp ?? ''),
  };
  if (typeof f.old_path === 'string') c.oldPath = f.old_path;
  return c;
}
