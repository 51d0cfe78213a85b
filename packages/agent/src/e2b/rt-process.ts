import { access } from 'node:fs/promises';
import type { Route, RouteContext } from '../context.js';
import { ServiceError } from '../proto.js';
import type { EnvdDeps } from './deps.js';
import { frameQueue, jsonFrame, outputFrames, sendFrames } from './frames.js';
import type { ManagedProcess, ProcessEnd } from './processes.js';
import { keepaliveMs } from './stream-queue.js';
import { userPath, type SandboxUser } from './users.js';

const MAX_ARGS = 10_000;
const MAX_ENVS = 10_000;
const MAX_TAG_CHARS = 256;
/** setTimeout's longest delay; a longer timeout_ms is as good as none. */
const MAX_TIMEOUT_MS = 2_147_483_647;

type Body = Record<string, unknown>;

const invalid = (field: string, message: string) => new ServiceError('VALIDATION_ERROR', message, { field });

/** The process a call names: `pid` (a number) or `tag` (a string). */
export function selector(body: Body): { pid?: number; tag?: string } {
  const { pid, tag } = body;
  if (pid !== undefined && pid !== null) {
    if (typeof pid !== 'number' || !Number.isInteger(pid)) throw invalid('pid', 'pid must be an integer');
    return { pid };
  }
  if (tag !== undefined && tag !== null) {
    if (typeof tag !== 'string') throw invalid('tag', 'tag must be a string');
    return { tag };
  }
  throw invalid('process', 'select the process by pid or tag');
}

export function dimension(n: unknown, field: string, fallback: number): number {
  if (n === undefined || n === null || n === 0) return fallback;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 9999) throw invalid(field, `${field} must be between 1 and 9999`);
  return n;
}

function authorization(body: Body): string | null {
  const a = body.authorization;
  if (a === undefined || a === null) return null;
  if (typeof a !== 'string') throw invalid('authorization', 'authorization must be a string or null');
  return a;
}

function stringArray(v: unknown, field: string): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((a) => typeof a !== 'string')) throw invalid(field, `${field} must be an array of strings`);
  return v as string[];
}

function stringMap(v: unknown, field: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v) || Object.values(v).some((x) => typeof x !== 'string')) throw invalid(field, `${field} must be an object of strings`);
  return { ...(v as Record<string, string>) };
}

function optionalString(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw invalid(field, `${field} must be a string`);
  return v;
}

function timeoutMs(v: unknown): number {
  if (v === undefined || v === null) return 0;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw invalid('timeout_ms', 'timeout_ms must be a number of milliseconds, 0 or more');
  return Math.min(Math.round(v), MAX_TIMEOUT_MS);
}

const validName = (k: string) => k !== '' && !k.includes('=') && !k.includes('\0');

/** The home directory of `user` when it exists (E2B's default working directory), else /. */
async function homeOf(user: SandboxUser): Promise<string> {
  return access(user.home).then(
    () => user.home,
    () => '/',
  );
}

async function startProcess(d: EnvdDeps, body: Body): Promise<ManagedProcess> {
  const user = d.users.fromAuthorization(authorization(body));
  const cmd = optionalString(body.cmd, 'cmd');
  if (cmd === undefined || cmd === '') throw invalid('cmd', 'cmd is required');
  const args = stringArray(body.args, 'args');
  if (args.length > MAX_ARGS) throw invalid('args', `at most ${MAX_ARGS} arguments`);
  const envs = stringMap(body.envs, 'envs');
  const pairs = Object.entries(envs);
  if (pairs.length > MAX_ENVS) throw invalid('envs', `at most ${MAX_ENVS} environment variables`);
  for (const [k, v] of pairs) if (!validName(k) || v.includes('\0')) throw invalid('envs', `invalid environment variable ${JSON.stringify(k)}`);
  if ([cmd, ...args].some((a) => a.includes('\0'))) throw invalid('cmd', 'the command line contains a NUL byte');
  const givenCwd = optionalString(body.cwd, 'cwd');
  const cwd = givenCwd !== undefined && givenCwd !== '' ? userPath(givenCwd, user, 'cwd') : await homeOf(user);
  const tag = optionalString(body.tag, 'tag');
  if (tag !== undefined && tag.length > MAX_TAG_CHARS) throw invalid('tag', `tag is longer than ${MAX_TAG_CHARS} characters`);
  let pty: { cols: number; rows: number } | undefined;
  if (body.pty !== undefined && body.pty !== null) {
    if (typeof body.pty !== 'object' || Array.isArray(body.pty)) throw invalid('pty', 'pty must be {cols, rows} or null');
    const p = body.pty as Body;
    pty = { cols: dimension(p.cols, 'pty.cols', 80), rows: dimension(p.rows, 'pty.rows', 24) };
  }
  if (body.stdin !== undefined && body.stdin !== null && typeof body.stdin !== 'boolean') throw invalid('stdin', 'stdin must be a boolean');
  const { config, envStore } = d.agent;
  const env: Record<string, string> = { ...config.baseEnv, ...envStore.all(), HOME: user.home, USER: user.name, LOGNAME: user.name, ...envs };
  if (pty) env.TERM ??= 'xterm-256color';
  return d.processes.start({
    config: { cmd, args: [...args], envs, ...(givenCwd !== undefined ? { cwd: givenCwd } : {}) },
    cwd,
    env,
    user,
    ...(tag !== undefined ? { tag } : {}),
    ...(pty ? { pty } : {}),
    stdin: body.stdin === true,
  });
}

function endEvent(end: ProcessEnd): unknown {
  return { end: { exit_code: end.exitCode, exited: end.exited, status: end.status, ...(end.error !== undefined ? { error: end.error } : {}) } };
}

/**
 * Follows a process into a frame stream: its start, its kept then live output, its end. The client
 * going away unfollows; the process keeps running.
 */
async function follow(ctx: RouteContext, proc: ManagedProcess, keepalive: number): Promise<undefined> {
  const queue = frameQueue();
  queue.push(jsonFrame({ start: { pid: proc.pid } }));
  const unfollow = proc.follow(
    {
      data: (kind, data) => {
        for (const f of outputFrames(kind, data)) queue.push(f);
      },
      end: (end) => {
        queue.push(jsonFrame(endEvent(end)));
        queue.end();
      },
    },
    true,
  );
  try {
    await sendFrames(ctx.res, queue, keepalive);
  } finally {
    unfollow();
  }
  return undefined;
}

function base64(v: unknown): Buffer {
  if (typeof v !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(v)) throw invalid('data', 'data must be base64 text');
  return Buffer.from(v, 'base64');
}

/** The process routes below `prefix`: E2B's process.Process, spoken by the gateway. */
export function rtProcessRoutes(prefix: string, deps: () => EnvdDeps): Route[] {
  const route = (path: string, handler: (d: EnvdDeps, body: Body, ctx: RouteContext) => Promise<unknown> | unknown): Route => ({
    method: 'POST',
    path: `${prefix}/process/${path}`,
    handler: async (ctx) => handler(deps(), await ctx.body(), ctx),
  });
  return [
    route('start', async (d, body, ctx) => {
      const keepalive = keepaliveMs(body.keepalive_ms);
      const limit = timeoutMs(body.timeout_ms);
      const proc = await startProcess(d, body);
      if (limit > 0) {
        const deadline = setTimeout(() => proc.running && proc.signal('SIGKILL'), limit);
        deadline.unref();
        proc.onEnd(() => clearTimeout(deadline));
      }
      return follow(ctx, proc, keepalive);
    }),
    route('connect', (d, body, ctx) => {
      const keepalive = keepaliveMs(body.keepalive_ms);
      return follow(ctx, d.processes.find(selector(body), true), keepalive);
    }),
    route('input', (d, body) => {
      const sel = selector(body);
      if (body.kind !== 'stdin' && body.kind !== 'pty') throw invalid('kind', 'kind must be "stdin" or "pty"');
      const data = base64(body.data);
      d.processes.find(sel).input(body.kind, data);
      return {};
    }),
    route('signal', (d, body) => {
      const sel = selector(body);
      if (body.signal !== 'SIGTERM' && body.signal !== 'SIGKILL') throw invalid('signal', 'signal must be SIGTERM or SIGKILL');
      d.processes.find(sel).signal(body.signal);
      return {};
    }),
    // A running process by pid or tag (Update without a size, StreamInput's start).
    route('find', (d, body) => ({ pid: d.processes.find(selector(body)).pid })),
    route('close-stdin', (d, body) => {
      d.processes.find(selector(body)).closeStdin();
      return {};
    }),
    route('resize', (d, body) => {
      const sel = selector(body);
      const [cols, rows] = [dimension(body.cols, 'cols', 80), dimension(body.rows, 'rows', 24)];
      d.processes.find(sel).resize(cols, rows);
      return {};
    }),
    {
      method: 'GET',
      path: `${prefix}/process/list`,
      handler: () => ({
        processes: deps()
          .processes.running()
          .map((p) => {
            const c = p.spec.config;
            return { pid: p.pid, ...(p.tag !== undefined ? { tag: p.tag } : {}), cmd: c.cmd, args: c.args, envs: c.envs, cwd: p.spec.cwd };
          }),
      }),
    },
  ];
}
