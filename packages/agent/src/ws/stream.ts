import { StringDecoder } from 'node:string_decoder';
import type { Agent, UpgradeRoute } from '../context.js';
import { DEFAULT_TIMEOUT_S, parseExecute } from '../routes/execute.js';
import { PacedSender } from './frames.js';
import { acceptWebSocket, parseFrame } from './upgrade.js';
import { errorFrame } from '../http/errors.js';

/** Keeps a socket that the client forgot to close from living forever. */
const IDLE_CLOSE_MS = 10 * 60 * 1000;
/** After a `complete`, while the client neither closes nor writes: repeat it after these delays. */
const COMPLETE_REPEATS_MS = [250, 1000, 4000];

/**
 * WebSocket /execute/stream: the client sends {type:"execute", code, language, timeout, workdir,
 * env}; the agent streams {type:"stdout"|"stderr", data}, then {type:"result", ...} and
 * {type:"complete", success}, and leaves the socket open for the client to close (real clients
 * hang if it closes first). Closing the socket kills a running execution.
 */
export function streamRoute(agent: Agent): UpgradeRoute {
  return {
    path: '/execute/stream',
    handler: (req, socket, head, requestId) => {
      void acceptWebSocket(req, socket, head, requestId).then((ws) => {
        const out = new PacedSender(ws);
        let busy = false;
        let closed = false;
        let current: AbortController | null = null;
        let idle = setTimeout(() => ws.close(1000, 'idle'), IDLE_CLOSE_MS);
        // A `complete` can still be lost when a busy proxy or client reads two frames at once (the
        // gap is no guarantee): the official client then waits forever. It closes the socket on
        // the `complete` it sees, so one repeated while the socket stays open and quiet reaches a
        // client that lost it, and no client that got it.
        let repeat: NodeJS.Timeout | undefined;
        const complete = (success: boolean, attempt = 0) => {
          out.send({ type: 'complete', success });
          if (attempt < COMPLETE_REPEATS_MS.length) repeat = setTimeout(() => complete(success, attempt + 1), COMPLETE_REPEATS_MS[attempt]);
        };
        ws.on('close', () => {
          closed = true;
          clearTimeout(idle);
          clearTimeout(repeat);
          out.stop();
          current?.abort();
        });
        ws.on('message', (data) => {
          clearTimeout(idle);
          clearTimeout(repeat);
          idle = setTimeout(() => ws.close(1000, 'idle'), IDLE_CLOSE_MS);
          const frame = parseFrame(data);
          if (!frame) return;
          if (frame.type === 'kill' || frame.type === 'cancel') {
            current?.abort();
            return;
          }
          if (frame.type !== 'execute') return;
          if (busy) {
            out.send({ type: 'error', error: 'an execution is already running on this socket', code: 'VALIDATION_ERROR' });
            return;
          }
          busy = true;
          current = new AbortController();
          void runOne(frame, current.signal).finally(() => {
            busy = false;
            current = null;
          });
        });

        async function runOne(frame: Record<string, unknown>, signal: AbortSignal): Promise<void> {
          try {
            const opts = parseExecute(agent, { ...frame, working_dir: frame.working_dir ?? frame.workdir }, { timeoutSec: DEFAULT_TIMEOUT_S, rich: false });
            const dec = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
            const capBytes = agent.config.outputCapBytes;
            const sent = { stdout: 0, stderr: 0 };
            const forward = (type: 'stdout' | 'stderr') => (chunk: Buffer) => {
              if (sent[type] >= capBytes) return;
              sent[type] += chunk.length;
              out.output(type, dec[type].write(chunk));
            };
            const stream = { onStdout: forward('stdout'), onStderr: forward('stderr') };
            const result = await agent.executor.execute({ ...opts, stream, signal });
            out.output('stdout', dec.stdout.end());
            out.output('stderr', dec.stderr.end());
            if (result.timed_out) out.output('stderr', `Execution timed out after ${opts.timeoutSec} seconds\n`);
            // Said after the cell, not by it: it reaches a stream only here.
            const restartNote = result.kernel_restarted ? /\[sandboxd\] the kernel was restarted[^\n]*\n$/.exec(result.stderr) : null;
            if (restartNote) out.output('stderr', restartNote[0]);
            out.send({
              type: 'result',
              exit_code: result.exit_code,
              execution_time: result.execution_time,
              success: result.success,
              timed_out: result.timed_out,
              execution_id: result.execution_id,
              ...(result.context_id ? { context_id: result.context_id } : {}),
              ...(result.kernel_restarted ? { kernel_restarted: true } : {}),
              ...(result.result !== undefined ? { result: result.result } : {}),
              ...(result.truncated ? { truncated: true } : {}),
              ...(result.png ? { png: result.png } : {}),
            });
            complete(result.success);
          } catch (err) {
            if (closed) return;
            out.send(errorFrame(err, requestId, 'WebSocket /execute/stream'));
            complete(false);
          }
        }
      });
    },
  };
}
