import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { ServiceError } from '@sandboxd/protocol';
import { agentFrames, AgentShape, callAgent, FRAME, jsonFrame, type EnvdCall, type Frame } from './agent-call.js';
import { guarded, keepaliveHeader, toConnectError, type OnEnvdFault } from './errors.js';
import { Process, Signal, type ProcessEventSchema, type ProcessInfoSchema, type ProcessSelector } from './gen/process/process_pb.js';

type EventInit = MessageInitShape<typeof ProcessEventSchema>;

/** Largest output chunk one event carries. */
const MAX_EVENT_BYTES = 64 * 1024;
/** Input sent to the agent in one call (its JSON bodies hold 10 MiB, base64 takes a third more). */
const MAX_INPUT_PIECE = 4 * 1024 * 1024;

/** A process as the agent names it: by pid or by tag. */
type Selection = { pid: number } | { tag: string };

function selection(sel: ProcessSelector | undefined): Selection {
  const s = sel?.selector;
  if (s?.case === 'pid') return { pid: s.value };
  if (s?.case === 'tag') return { tag: s.value };
  throw new ServiceError('VALIDATION_ERROR', 'select the process by pid or tag', { field: 'process' });
}

const OUTPUT_CASE = { [FRAME.stdout]: 'stdout', [FRAME.stderr]: 'stderr', [FRAME.pty]: 'pty' } as const;

const INT32 = [-(2 ** 31), 2 ** 31 - 1] as const;

/** The agent's frames of a followed process as E2B's process events. */
function* eventsOf(f: Frame, shape: AgentShape): Generator<EventInit> {
  if (f.kind === FRAME.keepalive) {
    yield { event: { case: 'keepalive', value: {} } };
  } else if (f.kind === FRAME.json) {
    const e = jsonFrame(f, shape);
    if (e.start !== undefined) yield { event: { case: 'start', value: { pid: shape.int(shape.obj(e.start, 'a start event').pid, 'a pid') } } };
    else if (e.end !== undefined) {
      const end = shape.obj(e.end, 'an end event');
      const error = shape.optStr(end.error, 'an end event');
      yield {
        event: {
          case: 'end',
          value: {
            exitCode: shape.int(end.exit_code, 'an exit code', ...INT32),
            exited: shape.bool(end.exited, 'an end event'),
            status: shape.str(end.status, 'an end event'),
            ...(error !== undefined ? { error } : {}),
          },
        },
      };
    }
  } else if (f.kind === FRAME.stdout || f.kind === FRAME.stderr || f.kind === FRAME.pty) {
    const kind = OUTPUT_CASE[f.kind];
    for (let off = 0; off < f.payload.length; off += MAX_EVENT_BYTES) {
      yield { event: { case: 'data', value: { output: { case: kind, value: f.payload.subarray(off, off + MAX_EVENT_BYTES) } } } };
    }
  }
}

/**
 * E2B's process.Process, served in the daemon: each call is one call to the sandbox's agent,
 * which runs the processes and keeps their output (they outlive the streams that follow them).
 */
export function processService(callOf: (ctx: HandlerContext) => EnvdCall, onFault: OnEnvdFault): ServiceImpl<typeof Process> {
  const guard = guarded(onFault);

  async function* follow(what: string, path: string, body: Record<string, unknown>, ctx: HandlerContext): AsyncGenerator<{ event: EventInit }> {
    const keepalive = keepaliveHeader(ctx.requestHeader.get('keepalive-ping-interval'));
    const call = callOf(ctx);
    const shape = new AgentShape(call.sandboxId);
    try {
      for await (const f of agentFrames(call, path, { ...body, ...(keepalive ? { keepalive_ms: keepalive } : {}) }, ctx.signal)) {
        for (const event of eventsOf(f, shape)) yield { event };
      }
    } catch (err) {
      throw toConnectError(err, what, onFault);
    }
  }

  const post = <T = unknown>(ctx: HandlerContext, path: string, body: unknown) => callAgent<T>(callOf(ctx), 'POST', path, body, ctx.signal);

  /** Input to a process, in pieces the agent's JSON bodies hold (a Connect message may carry 16 MiB). */
  const send = async (ctx: HandlerContext, sel: Selection, kind: 'stdin' | 'pty', data: Uint8Array) => {
    for (let off = 0; off === 0 || off < data.length; off += MAX_INPUT_PIECE) {
      await post(ctx, '/e2b/rt/process/input', { ...sel, kind, data: Buffer.from(data.buffer, data.byteOffset + off, Math.min(MAX_INPUT_PIECE, data.length - off)).toString('base64') });
    }
  };

  return {
    list: guard('List', async (_req, ctx) => {
      const call = callOf(ctx);
      const shape = new AgentShape(call.sandboxId);
      const answer = shape.obj(await callAgent<unknown>(call, 'GET', '/e2b/rt/process/list', undefined, ctx.signal), 'a list of processes');
      return {
        processes: shape.arr(answer.processes, 'a list of processes').map((v): MessageInitShape<typeof ProcessInfoSchema> => {
          const p = shape.obj(v, 'a process');
          const cwd = shape.optStr(p.cwd, 'a process');
          const tag = shape.optStr(p.tag, 'a process');
          return {
            pid: shape.int(p.pid, 'a pid'),
            config: { cmd: shape.str(p.cmd, 'a process'), args: shape.arr(p.args, 'a process').map((a) => shape.str(a, 'a process')), envs: shape.strings(p.envs, 'a process'), ...(cwd !== undefined ? { cwd } : {}) },
            ...(tag !== undefined ? { tag } : {}),
          };
        }),
      };
    }),

    start(req, ctx) {
      const cfg = req.process;
      // The deadline of the starting request is the process's (E2B's `timeoutMs` of a command); a
      // client that merely goes away leaves it running, to be found again with Connect.
      const remaining = ctx.timeoutMs();
      return follow(
        'Start',
        '/e2b/rt/process/start',
        {
          authorization: callOf(ctx).authorization,
          cmd: cfg?.cmd ?? '',
          args: cfg?.args ?? [],
          envs: cfg?.envs ?? {},
          ...(cfg?.cwd !== undefined ? { cwd: cfg.cwd } : {}),
          ...(req.tag !== undefined ? { tag: req.tag } : {}),
          pty: req.pty ? { cols: req.pty.size?.cols ?? 0, rows: req.pty.size?.rows ?? 0 } : null,
          stdin: req.stdin ?? false,
          ...(remaining !== undefined && remaining > 0 ? { timeout_ms: remaining } : {}),
        },
        ctx,
      );
    },

    async *connect(req, ctx) {
      let sel: Selection;
      try {
        sel = selection(req.process);
      } catch (err) {
        throw toConnectError(err, 'Connect', onFault);
      }
      yield* follow('Connect', '/e2b/rt/process/connect', sel, ctx);
    },

    sendInput: guard('SendInput', async (req, ctx) => {
      const sel = selection(req.process);
      const input = req.input?.input;
      if (input?.case !== 'stdin' && input?.case !== 'pty') throw new ServiceError('VALIDATION_ERROR', 'input.stdin or input.pty is required', { field: 'input' });
      await send(ctx, sel, input.case, input.value);
      return {};
    }),

    streamInput: guard('StreamInput', async (reqs, ctx) => {
      let sel: Selection | null = null;
      for await (const r of reqs) {
        const ev = r.event;
        if (ev.case === 'start') {
          sel = selection(ev.value.process);
          // As a process that is not there is found at the start.
          await post(ctx, '/e2b/rt/process/find', sel);
        } else if (ev.case === 'data') {
          if (!sel) throw new ServiceError('VALIDATION_ERROR', 'the first message of StreamInput must select the process (start)');
          const input = ev.value.input?.input;
          if (input?.case === 'stdin' || input?.case === 'pty') await send(ctx, sel, input.case, input.value);
        }
      }
      return {};
    }),

    sendSignal: guard('SendSignal', async (req, ctx) => {
      const sel = selection(req.process);
      const signal = req.signal === Signal.SIGTERM ? 'SIGTERM' : req.signal === Signal.SIGKILL ? 'SIGKILL' : null;
      if (!signal) throw new ServiceError('VALIDATION_ERROR', 'signal must be SIGTERM or SIGKILL', { field: 'signal' });
      await post(ctx, '/e2b/rt/process/signal', { ...sel, signal });
      return {};
    }),

    closeStdin: guard('CloseStdin', async (req, ctx) => {
      await post(ctx, '/e2b/rt/process/close-stdin', selection(req.process));
      return {};
    }),

    update: guard('Update', async (req, ctx) => {
      const sel = selection(req.process);
      const size = req.pty?.size;
      // Without a size there is nothing to change; the process must still be there.
      await (size ? post(ctx, '/e2b/rt/process/resize', { ...sel, cols: size.cols, rows: size.rows }) : post(ctx, '/e2b/rt/process/find', sel));
      return {};
    }),
  };
}
