import WebSocket from 'ws';
import type { AgentClient } from './agent.js';
import { ConnectionError, errorFromResponse, SandboxdError } from './errors.js';
import { abortError, scope } from './signals.js';
import type { ExecutionResult } from './types.js';
import { stdinFields } from './wire.js';

/** Opens an agent WebSocket; an upgrade refused with 401 refreshes the token and tries once more. */
export async function openAgentSocket(agent: AgentClient, path: string, signal: AbortSignal): Promise<WebSocket> {
  await agent.prepare();
  for (let attempt = 0; ; attempt++) {
    try {
      return await connectOnce(agent.wsUrl(path), await agent.authHeaders(), signal);
    } catch (err) {
      if (attempt === 0 && err instanceof SandboxdError && err.status === 401) {
        agent.tokens.invalidate();
        continue;
      }
      throw err;
    }
  }
}

function connectOnce(url: string, headers: Record<string, string>, signal: AbortSignal): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(abortError(signal.reason, `connect ${new URL(url).pathname}`));
    const ws = new WebSocket(url, { headers, perMessageDeflate: false });
    const onAbort = (): void => {
      ws.terminate();
      reject(abortError(signal.reason, `connect ${new URL(url).pathname}`));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    const settle = (): void => {
      signal.removeEventListener('abort', onAbort);
      ws.removeAllListeners('open');
      ws.removeAllListeners('unexpected-response');
    };
    ws.once('open', () => {
      settle();
      ws.removeAllListeners('error');
      resolve(ws);
    });
    ws.once('unexpected-response', (_req, res) => {
      settle();
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          /* keep text */
        }
        const h = res.headers;
        reject(
          errorFromResponse({
            status: res.statusCode ?? 0,
            body,
            headers: { get: (n: string) => (Array.isArray(h[n]) ? (h[n] as string[])[0] : (h[n] as string | undefined)) ?? null },
          }),
        );
        ws.terminate();
      });
    });
    ws.once('error', (err) => {
      settle();
      reject(new ConnectionError(`cannot open ${new URL(url).pathname} on ${new URL(url).host} (${err.message})`, { code: 'CONNECTION_ERROR', cause: err }));
    });
  });
}

export interface StreamExecuteOptions {
  code: string;
  language: string;
  /** Seconds, the service-side limit. */
  timeout?: number;
  workingDir?: string;
  env?: Record<string, string>;
  stdin?: string | Uint8Array;
  contextId?: string;
  isolated?: boolean;
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  signal?: AbortSignal;
  /** Client-side deadline of the whole stream, ms. */
  timeoutMs: number;
}

/**
 * Runs code over `/execute/stream`, calling the callbacks as output arrives, and resolves with the
 * collected result. Aborting closes the socket.
 */
export async function streamExecute(agent: AgentClient, o: StreamExecuteOptions): Promise<ExecutionResult> {
  const s = scope(o.signal, o.timeoutMs);
  const what = 'execute stream';
  let ws: WebSocket | undefined;
  try {
    ws = await openAgentSocket(agent, '/execute/stream', s.signal);
    const socket = ws;
    return await new Promise<ExecutionResult>((resolve, reject) => {
      const stdout: string[] = [];
      const stderr: string[] = [];
      let result: Record<string, unknown> | undefined;
      let finished = false;
      const finish = (err?: unknown): void => {
        if (finished) return;
        finished = true;
        s.signal.removeEventListener('abort', onAbort);
        if (err) return reject(err);
        const exitCode = typeof result?.exit_code === 'number' ? result.exit_code : -1;
        const out: ExecutionResult = {
          success: typeof result?.success === 'boolean' ? result.success : exitCode === 0,
          stdout: stdout.join(''),
          stderr: stderr.join(''),
          exitCode,
          executionTime: typeof result?.execution_time === 'number' ? result.execution_time : 0,
          timedOut: result?.timed_out === true,
          language: o.language,
        };
        if (result?.truncated === true) out.truncated = true;
        if (typeof result?.result === 'string') out.result = result.result;
        if (typeof result?.context_id === 'string') out.contextId = result.context_id;
        if (result?.kernel_restarted === true) out.kernelRestarted = true;
        resolve(out);
      };
      const onAbort = (): void => {
        socket.terminate();
        finish(abortError(s.signal.reason, what));
      };
      s.signal.addEventListener('abort', onAbort, { once: true });

      socket.on('message', (raw) => {
        let frame: Record<string, unknown>;
        try {
          frame = JSON.parse(raw.toString()) as Record<string, unknown>;
        } catch {
          return;
        }
        try {
          handle(frame);
        } catch (err) {
          // A throwing callback ends the stream with its error instead of escaping as an uncaught exception.
          socket.terminate();
          finish(err);
        }
      });
      const handle = (frame: Record<string, unknown>): void => {
        switch (frame.type) {
          case 'stdout': {
            const d = String(frame.data ?? '');
            stdout.push(d);
            o.onStdout?.(d);
            break;
          }
          case 'stderr': {
            const d = String(frame.data ?? '');
            stderr.push(d);
            o.onStderr?.(d);
            break;
          }
          case 'result':
            result = frame;
            break;
          case 'error':
            socket.close();
            finish(errorFromResponse({ status: typeof frame.status === 'number' ? frame.status : 0, body: frame }));
            break;
          case 'complete':
            if (!result) result = { success: frame.success };
            else if (typeof frame.success === 'boolean' && result.success === undefined) result.success = frame.success;
            socket.close(1000);
            finish();
            break;
        }
      };
      socket.on('close', (code, reason) => {
        if (result) return finish();
        finish(new ConnectionError(`execute stream closed before the result (code ${code}${reason.length ? `: ${reason.toString()}` : ''})`, { code: 'CONNECTION_ERROR' }));
      });
      socket.on('error', (err) => finish(new ConnectionError(`execute stream failed: ${err.message}`, { code: 'CONNECTION_ERROR', cause: err })));

      const frame: Record<string, unknown> = { type: 'execute', code: o.code, language: o.language };
      if (o.timeout !== undefined) frame.timeout = o.timeout;
      if (o.workingDir !== undefined) frame.workdir = o.workingDir;
      if (o.env !== undefined) frame.env = o.env;
      if (o.contextId !== undefined) frame.context_id = o.contextId;
      if (o.isolated !== undefined) frame.isolated = o.isolated;
      Object.assign(frame, stdinFields(o.stdin));
      socket.send(JSON.stringify(frame));
    });
  } finally {
    s.dispose();
    if (ws && ws.readyState === WebSocket.OPEN) ws.close(1000);
  }
}
