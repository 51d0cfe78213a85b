import { spawn, type ChildProcess } from 'node:child_process';
import { stat } from 'node:fs/promises';
import type { Writable } from 'node:stream';
import { ServiceError } from '../proto.js';
import { OutputRing, type OutputKind } from './output-ring.js';
import type { SandboxUser } from './users.js';

/** Processes started through E2B's API running at once. */
export const MAX_PROCESSES = 256;
/** Clients following one process at once (Start plus Connects). */
export const MAX_FOLLOWERS = 32;
/** Output kept per stream of a process for clients that connect later. */
export const OUTPUT_KEEP_BYTES = 1024 * 1024;
/** Output kept for all processes together: the largest rings give way beyond it. */
export const OUTPUT_KEEP_TOTAL_BYTES = 32 * 1024 * 1024;
/** How long an ended process can still be connected to (its kept output, then its end). */
const ENDED_KEEP_MS = 30_000;
/** After the process exits, how long to read output a left-behind background job holds open. */
const DRAIN_AFTER_EXIT_MS = 100;
/** How long the helper gets to kill its tree before it is killed itself. */
const KILL_ESCALATION_MS = 2000;

export interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

export interface StartSpec {
  config: ProcessConfig;
  /** Absolute working directory. */
  cwd: string;
  /** The full environment of the process. */
  env: Record<string, string>;
  user: SandboxUser;
  tag?: string;
  pty?: { cols: number; rows: number };
  /** Keep stdin open for SendInput (false: the process reads EOF at once). */
  stdin: boolean;
}

export interface ProcessEnd {
  exitCode: number;
  exited: boolean;
  status: string;
  error?: string;
}

export interface ProcessFollower {
  data(kind: OutputKind, data: Buffer): void;
  end(end: ProcessEnd): void;
}

/** One process started through E2B's API: it outlives the request that started it. */
export class ManagedProcess {
  readonly ring: OutputRing;
  readonly followers = new Set<ProcessFollower>();
  ended: ProcessEnd | null = null;
  endedAt = 0;
  private killedWith: NodeJS.Signals | null = null;
  private readonly endHooks: Array<() => void> = [];
  private readonly control: Writable | null;

  constructor(
    readonly pid: number,
    readonly spec: StartSpec,
    private readonly child: ChildProcess,
    private readonly viaHelper: boolean,
    onKeptBytes: (delta: number) => void = () => undefined,
  ) {
    this.ring = new OutputRing(OUTPUT_KEEP_BYTES, onKeptBytes);
    this.control = spec.pty ? ((child.stdio[3] as Writable | undefined) ?? null) : null;
    this.control?.on('error', () => undefined);
    child.stdin?.on('error', () => undefined);
  }

  get tag(): string | undefined {
    return this.spec.tag;
  }

  get running(): boolean {
    return this.ended === null;
  }

  /** Follows the process: what is kept first (replay), then live output and the end. */
  follow(f: ProcessFollower, replay: boolean): () => void {
    if (this.followers.size >= MAX_FOLLOWERS) {
      throw new ServiceError('QUOTA_EXCEEDED', `at most ${MAX_FOLLOWERS} clients may follow one process`);
    }
    if (replay) for (const c of this.ring.snapshot()) f.data(c.kind, c.data);
    if (this.ended) {
      f.end(this.ended);
      return () => undefined;
    }
    this.followers.add(f);
    return () => this.followers.delete(f);
  }

  /** Runs `hook` once the process has ended (at once if it has). */
  onEnd(hook: () => void): void {
    if (this.ended) hook();
    else this.endHooks.push(hook);
  }

  input(kind: 'stdin' | 'pty', data: Buffer): void {
    this.mustRun();
    const stdin = this.child.stdin;
    if (kind === 'pty' && !this.spec.pty) throw new ServiceError('VALIDATION_ERROR', `process ${this.pid} has no terminal; send stdin`);
    if (kind === 'stdin' && this.spec.pty) throw new ServiceError('VALIDATION_ERROR', `process ${this.pid} runs on a terminal; send pty input`);
    if (!stdin || stdin.destroyed || stdin.writableEnded) {
      throw new ServiceError('VALIDATION_ERROR', `stdin of process ${this.pid} is closed (start it with stdin: true)`);
    }
    stdin.write(data);
  }

  closeStdin(): void {
    this.mustRun();
    if (this.spec.pty) throw new ServiceError('VALIDATION_ERROR', `process ${this.pid} runs on a terminal; send an end-of-file (Ctrl-D) as input instead`);
    this.child.stdin?.end();
  }

  resize(cols: number, rows: number): void {
    this.mustRun();
    if (!this.control) throw new ServiceError('VALIDATION_ERROR', `process ${this.pid} has no terminal to resize`);
    this.control.write(`${cols} ${rows}\n`);
  }

  signal(sig: 'SIGTERM' | 'SIGKILL'): void {
    this.mustRun();
    this.killedWith ??= sig;
    const pid = this.pid;
    if (!this.viaHelper) {
      sendSignal(-pid, sig);
      return;
    }
    // The helper ends the whole tree on SIGTERM; SIGKILL makes sure it goes even if it hangs.
    sendSignal(pid, 'SIGTERM');
    if (sig === 'SIGKILL') {
      setTimeout(() => {
        if (this.running) sendSignal(pid, 'SIGKILL');
      }, KILL_ESCALATION_MS).unref();
    }
  }

  /** Called once the process and its output are done. */
  finish(code: number | null, sig: NodeJS.Signals | null): void {
    if (this.ended) return;
    let end: ProcessEnd;
    if (this.killedWith || sig) {
      const s = this.killedWith ?? sig!;
      const status = `signal: ${s === 'SIGKILL' ? 'killed' : s === 'SIGTERM' ? 'terminated' : s}`;
      end = { exitCode: -1, exited: false, status, error: status };
    } else {
      const exitCode = code ?? -1;
      const status = `exit status ${exitCode}`;
      end = { exitCode, exited: true, status, ...(exitCode !== 0 ? { error: status } : {}) };
    }
    this.ended = end;
    this.endedAt = Date.now();
    for (const f of [...this.followers]) f.end(end);
    this.followers.clear();
    for (const hook of this.endHooks.splice(0)) hook();
  }

  output(kind: OutputKind, data: Buffer): void {
    this.ring.push(kind, data);
    for (const f of this.followers) f.data(kind, data);
  }

  private mustRun(): void {
    if (this.ended) throw new ServiceError('PROCESS_NOT_FOUND', `process ${this.pid} has ended`);
  }
}

/** The processes started through E2B's API, by pid; ended ones stay a little for late Connects. */
export class ProcessTable {
  private readonly byPid = new Map<number, ManagedProcess>();
  /** Output bytes kept by all processes' rings. */
  private kept = 0;

  constructor(
    private readonly helperPath: string | null,
    private readonly keepTotalBytes = OUTPUT_KEEP_TOTAL_BYTES,
  ) {}

  get keptBytes(): number {
    return this.kept;
  }

  private keep(delta: number): void {
    this.kept += delta;
    if (this.kept <= this.keepTotalBytes || delta <= 0) return;
    // Over budget: the process keeping the most gives up its oldest output.
    let largest: ManagedProcess | undefined;
    for (const p of this.byPid.values()) if (!largest || p.ring.total > largest.ring.total) largest = p;
    largest?.ring.trimTo(Math.max(0, largest.ring.total - (this.kept - this.keepTotalBytes)));
  }

  running(): ManagedProcess[] {
    this.sweep();
    return [...this.byPid.values()].filter((p) => p.running);
  }

  /** A process by pid or tag; ended ones only when `ended` is true (Connect replays them). */
  find(sel: { pid?: number; tag?: string }, ended = false): ManagedProcess {
    this.sweep();
    let p: ManagedProcess | undefined;
    if (sel.pid !== undefined) p = this.byPid.get(sel.pid);
    else if (sel.tag !== undefined) {
      const all = [...this.byPid.values()].filter((x) => x.tag === sel.tag);
      p = all.find((x) => x.running) ?? all.at(-1);
    } else throw new ServiceError('VALIDATION_ERROR', 'select the process by pid or tag', { field: 'process' });
    const what = sel.pid !== undefined ? `pid ${sel.pid}` : `tag ${JSON.stringify(sel.tag)}`;
    if (!p || (!p.running && !ended)) throw new ServiceError('PROCESS_NOT_FOUND', `process with ${what} not found`);
    return p;
  }

  async start(spec: StartSpec): Promise<ManagedProcess> {
    if (this.running().length >= MAX_PROCESSES) {
      throw new ServiceError('QUOTA_EXCEEDED', `at most ${MAX_PROCESSES} processes may run at once through this API; wait for some to end or kill them`);
    }
    if (spec.tag !== undefined && this.running().some((p) => p.tag === spec.tag)) {
      throw new ServiceError('ALREADY_EXISTS', `a running process already has tag ${JSON.stringify(spec.tag)}`);
    }
    const st = await stat(spec.cwd).catch(() => null);
    if (!st) throw new ServiceError('INVALID_PATH', `working directory does not exist: ${spec.cwd}`, { path: spec.cwd });
    if (!st.isDirectory()) throw new ServiceError('NOT_A_DIRECTORY', `working directory is not a directory: ${spec.cwd}`, { path: spec.cwd });
    if (spec.pty && !this.helperPath) throw new ServiceError('INVALID_STATE', 'this sandbox has no terminal support (sbx-helper is missing)');

    const argv = [spec.config.cmd, ...spec.config.args];
    const helper = this.helperPath;
    const [file, args] = helper
      ? [helper, spec.pty ? ['pty', String(spec.pty.cols), String(spec.pty.rows), '--', ...argv] : ['run', '--', ...argv]]
      : [argv[0]!, argv.slice(1)];
    const ids = spec.user.uid === 0 ? {} : { uid: spec.user.uid, gid: spec.user.gid };
    let child: ChildProcess;
    try {
      child = spawn(file, args, {
        cwd: spec.cwd,
        env: spec.env,
        stdio: spec.pty ? ['pipe', 'pipe', 'pipe', 'pipe'] : [spec.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
        detached: helper === null,
        ...ids,
      });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'E2BIG') {
        throw new ServiceError('VALIDATION_ERROR', 'the command line and environment are too long for the kernel (E2BIG)');
      }
      throw err;
    }
    const pid = child.pid;
    if (pid === undefined) {
      // The spawn failed (a program not found without the helper): say why, as a shell would.
      const err = await new Promise<Error>((resolve) => child.once('error', resolve));
      throw new ServiceError('VALIDATION_ERROR', `cannot start ${spec.config.cmd}: ${err.message}`);
    }
    const proc = new ManagedProcess(pid, spec, child, helper !== null, (delta) => this.keep(delta));
    this.forget(this.byPid.get(pid));
    this.byPid.set(pid, proc);
    // An ended process's output goes once nobody can connect to it any more.
    proc.onEnd(() => setTimeout(() => this.sweep(), ENDED_KEEP_MS + 100).unref());
    wire(proc, child, spec.pty ? 'pty' : 'stdout', spec.pty ? 'pty' : 'stderr');
    return proc;
  }

  private sweep(): void {
    const now = Date.now();
    for (const p of this.byPid.values()) if (p.ended && now - p.endedAt > ENDED_KEEP_MS) this.forget(p);
  }

  private forget(p: ManagedProcess | undefined): void {
    if (!p || this.byPid.get(p.pid) !== p) return;
    this.byPid.delete(p.pid);
    p.ring.trimTo(0);
  }
}

function wire(proc: ManagedProcess, child: ChildProcess, outKind: OutputKind, errKind: OutputKind): void {
  let open = 0;
  let exit: { code: number | null; sig: NodeJS.Signals | null } | null = null;
  let drain: NodeJS.Timeout | undefined;
  const done = () => {
    if (!exit) return;
    clearTimeout(drain);
    child.stdout?.destroy();
    child.stderr?.destroy();
    proc.finish(exit.code, exit.sig);
  };
  for (const [stream, kind] of [
    [child.stdout, outKind],
    [child.stderr, errKind],
  ] as const) {
    if (!stream) continue;
    open++;
    stream.on('data', (c: Buffer) => proc.output(kind, c));
    stream.on('close', () => {
      if (--open === 0) done();
    });
  }
  child.on('error', () => {
    exit ??= { code: 127, sig: null };
    done();
  });
  child.on('exit', (code, sig) => {
    exit = { code, sig };
    if (open === 0) done();
    else drain = setTimeout(done, DRAIN_AFTER_EXIT_MS);
  });
}

function sendSignal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}
