import { access } from 'node:fs/promises';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { ServiceError } from '../proto.js';
import type { EnvdDeps } from './deps.js';
import { toConnectError } from './errors.js';
import {
  Process,
  Signal,
  type ProcessSelector,
  type ProcessEventSchema,
  type StartRequest,
  type ProcessInfoSchema,
} from './gen/process/process_pb.js';
import type { ManagedProcess, ProcessEnd } from './processes.js';
import { keepaliveMs, StreamQueue } from './stream-queue.js';
import { userPath, type SandboxUser } from './users.js';
import type { OutputKind } from './output-ring.js';

type EventInit = MessageInitShape<typeof ProcessEventSchema>;

/** Largest output chunk one event carries. */
const MAX_EVENT_BYTES = 64 * 1024;
const MAX_ARGS = 10_000;
const MAX_ENVS = 10_000;

function selector(sel: ProcessSelector | undefined): { pid?: number; tag?: string } {
  const s = sel?.selector;
  if (s?.case === 'pid') return { pid: s.value };
  if (s?.case === 'tag') return { tag: s.value };
  throw new ServiceError('VALIDATION_ERROR', 'select the process by pid or tag', { field: 'process' });
}

function dimension(n: number | undefined, field: string, fallback: number): number {
  if (n === undefined || n === 0) return fallback;
  if (!Number.isInteger(n) || n < 1 || n > 9999) throw new ServiceError('VALIDATION_ERROR', `${field} must be between 1 and 9999`, { field });
  return n;
}

function validName(k: string): boolean {
  return k !== '' && !k.includes('=') && !k.includes('\0');
}

/** The home directory of `user` when it exists (E2B's default working directory), else /. */
async function homeOf(user: SandboxUser): Promise<string> {
  return access(user.home).then(
    () => user.home,
    () => '/',
  );
}

function dataEvent(kind: OutputKind, data: Buffer): EventInit[] {
  const out: EventInit[] = [];
  for (let off = 0; off < data.length; off += MAX_EVENT_BYTES) {
    out.push({ event: { case: 'data', value: { output: { case: kind, value: data.subarray(off, off + MAX_EVENT_BYTES) } } } });
  }
  return out;
}

function endEvent(end: ProcessEnd): EventInit {
  return { event: { case: 'end', value: { exitCode: end.exitCode, exited: end.exited, status: end.status, ...(end.error !== undefined ? { error: end.error } : {}) } } };
}

/**
 * Follows a process into a server stream: its start, its (kept, then live) output, its end, and
 * keepalives at the interval the client asks for. Ends when the process ends or the client goes.
 */
async function* follow(proc: ManagedProcess, ctx: HandlerContext, replay: boolean): AsyncGenerator<{ event: EventInit }> {
  const queue = new StreamQueue<EventInit>((e) => (e.event?.case === 'data' ? (e.event.value.output?.value?.length ?? 0) : 64));
  const unfollow = proc.follow(
    {
      data: (kind, data) => {
        for (const e of dataEvent(kind, data)) queue.push(e);
      },
      end: (end) => {
        queue.push(endEvent(end));
        queue.end();
      },
    },
    replay,
  );
  const keepalive = setInterval(() => queue.push({ event: { case: 'keepalive', value: {} } }), keepaliveMs(ctx.requestHeader.get('keepalive-ping-interval')));
  const gone = () => queue.end();
  ctx.signal.addEventListener('abort', gone, { once: true });
  try {
    yield { event: { event: { case: 'start', value: { pid: proc.pid } } } };
    for await (const event of queue) yield { event };
  } finally {
    unfollow();
    clearInterval(keepalive);
    ctx.signal.removeEventListener('abort', gone);
  }
}

function info(p: ManagedProcess): MessageInitShape<typeof ProcessInfoSchema> {
  return { pid: p.pid, config: { cmd: p.spec.config.cmd, args: p.spec.config.args, envs: p.spec.config.envs, cwd: p.spec.cwd }, ...(p.tag !== undefined ? { tag: p.tag } : {}) };
}

export function processService(d: EnvdDeps): ServiceImpl<typeof Process> {
  const guard = <A extends unknown[], R>(what: string, fn: (...a: A) => Promise<R> | R) => async (...a: A): Promise<R> => {
    try {
      return await fn(...a);
    } catch (err) {
      throw toConnectError(err, what);
    }
  };

  const startProcess = async (req: StartRequest, ctx: HandlerContext): Promise<ManagedProcess> => {
    const user = d.users.fromAuthorization(ctx.requestHeader.get('authorization'));
    const cfg = req.process;
    if (!cfg || cfg.cmd === '') throw new ServiceError('VALIDATION_ERROR', 'process.cmd is required', { field: 'process.cmd' });
    if (cfg.args.length > MAX_ARGS) throw new ServiceError('VALIDATION_ERROR', `at most ${MAX_ARGS} arguments`, { field: 'process.args' });
    const envs = Object.entries(cfg.envs);
    if (envs.length > MAX_ENVS) throw new ServiceError('VALIDATION_ERROR', `at most ${MAX_ENVS} environment variables`, { field: 'process.envs' });
    for (const [k, v] of envs) {
      if (!validName(k) || v.includes('\0')) throw new ServiceError('VALIDATION_ERROR', `invalid environment variable ${JSON.stringify(k)}`, { field: 'process.envs' });
    }
    if ([cfg.cmd, ...cfg.args].some((a) => a.includes('\0'))) throw new ServiceError('VALIDATION_ERROR', 'the command line contains a NUL byte', { field: 'process' });
    const cwd = cfg.cwd !== undefined && cfg.cwd !== '' ? userPath(cfg.cwd, user, 'cwd') : await homeOf(user);
    const { config, envStore } = d.agent;
    const env: Record<string, string> = { ...config.baseEnv, ...envStore.all(), HOME: user.home, USER: user.name, LOGNAME: user.name, ...cfg.envs };
    const pty = req.pty ? { cols: dimension(req.pty.size?.cols, 'pty.size.cols', 80), rows: dimension(req.pty.size?.rows, 'pty.size.rows', 24) } : undefined;
    if (pty) env.TERM ??= 'xterm-256color';
    if (req.tag !== undefined && req.tag.length > 256) throw new ServiceError('VALIDATION_ERROR', 'tag is longer than 256 characters', { field: 'tag' });
    return d.processes.start({
      config: { cmd: cfg.cmd, args: [...cfg.args], envs: { ...cfg.envs }, ...(cfg.cwd !== undefined ? { cwd: cfg.cwd } : {}) },
      cwd,
      env,
      user,
      ...(req.tag !== undefined ? { tag: req.tag } : {}),
      ...(pty ? { pty } : {}),
      stdin: req.stdin ?? false,
    });
  };

  return {
    list: guard('List', () => ({ processes: d.processes.running().map(info) })),

    async *start(req, ctx) {
      let proc: ManagedProcess;
      try {
        proc = await startProcess(req, ctx);
      } catch (err) {
        throw toConnectError(err, 'Start');
      }
      // The deadline of the starting request is the process's (E2B's `timeoutMs` of a command); a
      // client that merely goes away leaves it running, to be found again with Connect.
      const remaining = ctx.timeoutMs();
      const deadline = remaining !== undefined && remaining > 0 ? setTimeout(() => proc.running && proc.signal('SIGKILL'), remaining) : undefined;
      deadline?.unref();
      if (deadline) proc.onEnd(() => clearTimeout(deadline));
      yield* follow(proc, ctx, true);
    },

    async *connect(req, ctx) {
      let proc: ManagedProcess;
      try {
        proc = d.processes.find(selector(req.process), true);
      } catch (err) {
        throw toConnectError(err, 'Connect');
      }
      yield* follow(proc, ctx, true);
    },

    sendInput: guard('SendInput', (req) => {
      const proc = d.processes.find(selector(req.process));
      const input = req.input?.input;
      if (input?.case !== 'stdin' && input?.case !== 'pty') throw new ServiceError('VALIDATION_ERROR', 'input.stdin or input.pty is required', { field: 'input' });
      proc.input(input.case, Buffer.from(input.value));
      return {};
    }),

    streamInput: guard('StreamInput', async (reqs) => {
      let proc: ManagedProcess | null = null;
      for await (const r of reqs) {
        const ev = r.event;
        if (ev.case === 'start') proc = d.processes.find(selector(ev.value.process));
        else if (ev.case === 'data') {
          if (!proc) throw new ServiceError('VALIDATION_ERROR', 'the first message of StreamInput must select the process (start)');
          const input = ev.value.input?.input;
          if (input?.case === 'stdin' || input?.case === 'pty') proc.input(input.case, Buffer.from(input.value));
        }
      }
      return {};
    }),

    sendSignal: guard('SendSignal', (req) => {
      const proc = d.processes.find(selector(req.process));
      if (req.signal === Signal.SIGTERM) proc.signal('SIGTERM');
      else if (req.signal === Signal.SIGKILL) proc.signal('SIGKILL');
      else throw new ServiceError('VALIDATION_ERROR', 'signal must be SIGTERM or SIGKILL', { field: 'signal' });
      return {};
    }),

    closeStdin: guard('CloseStdin', (req) => {
      d.processes.find(selector(req.process)).closeStdin();
      return {};
    }),

    update: guard('Update', (req) => {
      const proc = d.processes.find(selector(req.process));
      if (req.pty?.size) proc.resize(dimension(req.pty.size.cols, 'pty.size.cols', 80), dimension(req.pty.size.rows, 'pty.size.rows', 24));
      return {};
    }),
  };
}
