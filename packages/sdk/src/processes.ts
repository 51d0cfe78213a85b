import type { AgentClient } from './agent.js';
import { chunksOf } from './body.js';
import { enc, type CallOptions } from './client.js';
import { ConnectionError, NotFoundError, SandboxdError } from './errors.js';
import { bodyError } from './http.js';
import { scope, sleep } from './signals.js';
import { parseSse } from './sse.js';
import type { ProcessInfo, ProcessStatus } from './types.js';
import { toProcessInfo } from './wire.js';

export interface WaitOptions extends CallOptions {
  /** Poll interval, ms (default 250). */
  intervalMs?: number;
}

export type OutputStream = 'stdout' | 'stderr';

/** A piece of a background process's output; `offset` counts the bytes of both streams before it. */
export interface OutputChunk {
  stream: OutputStream;
  offset: number;
  data: string;
}

/** What `processes.output()` returns: the output kept from `since`, and where to read on. */
export interface ProcessOutput {
  processId: string;
  status: ProcessStatus;
  exitCode: number | null;
  since: number;
  /** Pass as `since` to read what follows. */
  nextOffset: number;
  /** The oldest byte the agent still keeps. */
  startOffset: number;
  /** Every byte written so far. */
  endOffset: number;
  /** Bytes between `since` and `nextOffset` the agent no longer keeps. */
  lostBytes: number;
  /** The process ended and this read reached the end of its output. */
  complete: boolean;
  chunks: OutputChunk[];
  /** The chunks' text, both streams in the order written. */
  text: string;
}

export interface OutputOptions extends CallOptions {
  /** Offset to read from: `nextOffset` of the last read (default 0: everything kept). */
  since?: number;
  /** Most bytes of output to return (default 4 MiB). */
  maxBytes?: number;
}

/** Something an attach reports, in order: output, or bytes the agent dropped before this client read them. */
export type AttachEvent = ({ type: OutputStream } & Omit<OutputChunk, 'stream'>) | { type: 'lost'; offset: number; bytes: number };

/** How a process ended, as an attach last sees it. */
export interface ProcessExit {
  status: ProcessStatus;
  exitCode: number | null;
  /** The end of its output: an attach or read from here returns nothing more. */
  nextOffset: number;
}

export interface AttachOptions {
  /** Offset to replay from (default 0: everything kept). */
  since?: number;
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  /** Output the agent dropped (its log per stream is bounded) before this client read it. */
  onLost?: (bytes: number) => void;
  signal?: AbortSignal;
  /**
   * How long to keep re-attaching from the last offset when the connection breaks (the daemon
   * restarted, the network blinked), ms (default 60 000; 0: never).
   */
  reconnectForMs?: number;
}

/** Events kept for an iterator that has not started yet (the last ones). */
const PENDING_EVENTS = 10_000;

/**
 * One client attached to a background process: its output from an offset, live, until it exits.
 * Iterate it for the events (the last 10 000 are kept until an iterator starts), or give
 * callbacks; `await` it (or `wait()`) for the exit. If the
 * connection breaks it attaches again from `offset`, so nothing is read twice or missed.
 */
export class ProcessAttachment implements AsyncIterable<AttachEvent>, PromiseLike<ProcessExit> {
  /** The offset after the last event received: where a later attach or read goes on. */
  offset: number;
  private readonly done: Promise<ProcessExit>;
  private readonly buffered: AttachEvent[] = [];
  private waiter: (() => void) | undefined;
  private finished = false;
  private iterating = false;
  private readonly controller = new AbortController();

  constructor(
    private readonly agent: AgentClient,
    readonly processId: string,
    private readonly options: AttachOptions = {},
  ) {
    this.offset = options.since ?? 0;
    if (options.signal) {
      const signal = options.signal;
      if (signal.aborted) this.controller.abort(signal.reason);
      else signal.addEventListener('abort', () => this.controller.abort(signal.reason), { once: true });
    }
    this.done = this.run().finally(() => {
      this.finished = true;
      this.waiter?.();
    });
    // Whoever neither awaits nor iterates must not see an unhandled rejection.
    this.done.catch(() => undefined);
  }

  /** Resolves with the exit; rejects with what ended the attach otherwise (a 404, an abort). */
  wait(): Promise<ProcessExit> {
    return this.done;
  }

  then<A = ProcessExit, B = never>(onFulfilled?: ((v: ProcessExit) => A | PromiseLike<A>) | null, onRejected?: ((e: unknown) => B | PromiseLike<B>) | null): Promise<A | B> {
    return this.done.then(onFulfilled, onRejected);
  }

  /** Stops following; `wait()` rejects with an abort error. */
  close(): void {
    this.controller.abort(new Error('attach closed'));
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<AttachEvent, void, undefined> {
    this.iterating = true;
    for (;;) {
      while (this.buffered.length) yield this.buffered.shift()!;
      if (this.finished) {
        await this.done;
        return;
      }
      await new Promise<void>((r) => (this.waiter = r));
      this.waiter = undefined;
    }
  }

  private emit(e: AttachEvent): void {
    if (e.type === 'stdout') this.options.onStdout?.(e.data);
    else if (e.type === 'stderr') this.options.onStderr?.(e.data);
    else if (e.type === 'lost') this.options.onLost?.(e.bytes);
    this.buffered.push(e);
    // Until an iterator starts, only the last events are kept: callbacks alone never grow memory.
    if (!this.iterating && this.buffered.length > PENDING_EVENTS) this.buffered.shift();
    this.waiter?.();
  }

  private async run(): Promise<ProcessExit> {
    const signal = this.controller.signal;
    const budgetMs = this.options.reconnectForMs ?? 60_000;
    let brokeAt: number | undefined;
    for (let attempt = 0; ; attempt++) {
      const from = this.offset;
      let failure: unknown;
      try {
        const exit = await this.follow(signal);
        if (exit) return exit;
        // The stream ended without an exit: attach again from where it stopped.
      } catch (err) {
        if (signal.aborted) throw err;
        // A refusal (404, 400) is final; a broken connection or an unavailable gateway is not.
        if (err instanceof SandboxdError && err.status !== undefined && err.status < 500 && err.status !== 429) throw err;
        failure = err;
      }
      if (this.offset > from) {
        // It got somewhere: the budget counts from this break.
        brokeAt = undefined;
        attempt = 0;
      }
      brokeAt ??= Date.now();
      if (Date.now() - brokeAt >= budgetMs) {
        throw failure ?? new ConnectionError(`attach to process ${this.processId}: the stream kept ending before the process did`, { code: 'CONNECTION_ERROR' });
      }
      await sleep(Math.min(2000, 100 * 2 ** Math.min(attempt, 5)), signal);
    }
  }

  /** One connection: events until the exit (returned) or until the stream ends (undefined). */
  private async follow(signal: AbortSignal): Promise<ProcessExit | undefined> {
    const sent = await this.agent.http.send(
      {
        method: 'GET',
        path: `/processes/${enc(this.processId)}/attach`,
        query: { since: this.offset },
        accept: 'text/event-stream',
        signal,
        what: `attach to process ${this.processId}`,
      },
      'stream',
    );
    try {
      if (!sent.res.body) return undefined;
      for await (const ev of parseSse(chunksOf(sent.res.body as ReadableStream<Uint8Array>))) {
        const data = JSON.parse(ev.data) as Record<string, unknown>;
        if (ev.event === 'output') {
          const text = String(data.data ?? '');
          const offset = Number(data.offset);
          this.offset = ev.id !== undefined ? Number(ev.id) : offset + new TextEncoder().encode(text).length;
          this.emit({ type: data.stream === 'stderr' ? 'stderr' : 'stdout', offset, data: text });
        } else if (ev.event === 'lost') {
          const bytes = Number(data.bytes);
          this.offset = Number(data.offset) + bytes;
          this.emit({ type: 'lost', offset: Number(data.offset), bytes });
        } else if (ev.event === 'exit') {
          this.offset = Number(data.next_offset ?? this.offset);
          return { status: data.status as ProcessStatus, exitCode: (data.exit_code as number | null) ?? null, nextOffset: this.offset };
        }
      }
      return undefined;
    } catch (err) {
      throw bodyError(err, sent);
    } finally {
      sent.done();
    }
  }
}

/** Background executions and commands of the sandbox (running and recently finished). */
export class Processes {
  constructor(private readonly agent: AgentClient) {}

  async list(options: CallOptions = {}): Promise<ProcessInfo[]> {
    const body = await this.agent.http.json<{ processes?: unknown[] }>({
      method: 'GET',
      path: '/execute/processes',
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: 'list processes',
    });
    return (body.processes ?? []).map(toProcessInfo);
  }

  /** One process by id; NotFoundError when the agent no longer knows it. */
  async get(processId: string, options: CallOptions = {}): Promise<ProcessInfo> {
    const found = (await this.list(options)).find((p) => p.processId === processId || p.executionId === processId);
    if (!found) throw new NotFoundError(`process ${processId} not found`, { code: 'PROCESS_NOT_FOUND' });
    return found;
  }

  /**
   * A background process's output from an offset, while it runs and after. Read on with
   * `since: out.nextOffset` until `complete`; `lostBytes` says what the agent no longer kept.
   */
  async output(processId: string, options: OutputOptions = {}): Promise<ProcessOutput> {
    const query: Record<string, number> = { since: options.since ?? 0 };
    if (options.maxBytes !== undefined) query.max_bytes = options.maxBytes;
    const b = await this.agent.http.json<Record<string, unknown>>({
      method: 'GET',
      path: `/processes/${enc(processId)}/output`,
      query,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `output of process ${processId}`,
    });
    const chunks = ((b.chunks as OutputChunk[] | undefined) ?? []).map((c) => ({ stream: c.stream, offset: c.offset, data: c.data }));
    return {
      processId: String(b.process_id ?? processId),
      status: b.status as ProcessStatus,
      exitCode: (b.exit_code as number | null | undefined) ?? null,
      since: Number(b.since ?? 0),
      nextOffset: Number(b.next_offset ?? 0),
      startOffset: Number(b.start_offset ?? 0),
      endOffset: Number(b.end_offset ?? 0),
      lostBytes: Number(b.lost_bytes ?? 0),
      complete: b.complete === true,
      chunks,
      text: chunks.map((c) => c.data).join(''),
    };
  }

  /**
   * Attaches to a background process: its output from `since`, then live until it exits. Several
   * clients may attach at once; a slow one never slows the process (it is told what it lost).
   * `await` the attachment for the exit, or iterate it for the output.
   */
  attach(processId: string, options: AttachOptions = {}): ProcessAttachment {
    return new ProcessAttachment(this.agent, processId, options);
  }

  /** Kills a process and its whole process group. */
  async kill(processId: string, options: CallOptions = {}): Promise<void> {
    await this.agent.http.json({
      method: 'POST',
      path: `/execute/kill/${enc(processId)}`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `kill process ${processId}`,
    });
  }

  /** Polls until the process is no longer `running`; resolves with its final state. */
  async wait(processId: string, options: WaitOptions = {}): Promise<ProcessInfo> {
    const s = scope(options.signal, options.requestTimeoutMs);
    try {
      for (;;) {
        const p = await this.get(processId, { signal: s.signal });
        if (p.status !== 'running') return p;
        await sleep(options.intervalMs ?? 250, s.signal);
      }
    } finally {
      s.dispose();
    }
  }
}
