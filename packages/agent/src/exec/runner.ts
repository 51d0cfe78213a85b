import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';
import { CappedOutput } from './capture.js';

export interface RunSpec {
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  timeoutMs: number;
  capBytes: number;
  /** Written to stdin, which is then closed; without it stdin is /dev/null. */
  stdin?: Buffer;
  /** Socket of a warm Python that should run argv (sbx-helper zrun); needs the helper. */
  zygoteSocket?: string;
  /** Live output (streaming); called in order, before the bytes are counted against the cap. */
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
}

export type EndReason = 'exited' | 'timeout' | 'killed';

export interface RunOutcome {
  exitCode: number;
  reason: EndReason;
  stdout: CappedOutput;
  stderr: CappedOutput;
  durationMs: number;
  /** The process could not be started at all (e.g. the working directory is missing). */
  spawnError?: NodeJS.ErrnoException;
}

/** After the process exits, how long to keep reading output that a left-behind background job holds open. */
const DRAIN_AFTER_EXIT_MS = 100;
/** How long the helper gets to kill its tree before it is killed itself. */
const KILL_ESCALATION_MS = 2000;

/**
 * One process started for an execution or command. With the helper (the normal case) the process
 * runs below a child subreaper in its own session, so kill() ends everything it started; without it
 * (a bundle built where no C compiler was found) the process group is killed.
 */
export class RunningProcess {
  readonly done: Promise<RunOutcome>;
  readonly pid: number | null;
  private readonly child: ChildProcess;
  private readonly viaHelper: boolean;
  private endReason: EndReason = 'exited';
  private exited = false;

  constructor(spec: RunSpec, helperPath: string | null) {
    const started = performance.now();
    const stdout = new CappedOutput(spec.capBytes);
    const stderr = new CappedOutput(spec.capBytes);
    const mode = spec.zygoteSocket ? ['zrun', spec.zygoteSocket, '--'] : ['run', '--'];
    const [file, args] = helperPath ? [helperPath, [...mode, ...spec.argv]] : [spec.argv[0]!, spec.argv.slice(1)];
    this.child = spawn(file, args, {
      cwd: spec.cwd,
      env: spec.env,
      stdio: [spec.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      detached: helperPath === null,
    });
    if (spec.stdin && this.child.stdin) {
      // A program that exits without reading all of it makes the write fail (EPIPE): that is its choice.
      this.child.stdin.on('error', () => undefined);
      this.child.stdin.end(spec.stdin);
    }
    this.viaHelper = helperPath !== null;
    this.pid = this.child.pid ?? null;
    const child = this.child;

    this.done = new Promise((resolve) => {
      let open = 2;
      let exitCode = 0;
      let settled = false;
      let drainTimer: NodeJS.Timeout | undefined;
      const timer = setTimeout(() => this.kill('timeout'), spec.timeoutMs);
      const settle = (spawnError?: NodeJS.ErrnoException) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        clearTimeout(drainTimer);
        child.stdout?.destroy();
        child.stderr?.destroy();
        resolve({
          exitCode: spawnError ? (spawnError.code === 'ENOENT' ? 127 : 126) : exitCode,
          reason: this.endReason,
          stdout,
          stderr,
          durationMs: performance.now() - started,
          spawnError,
        });
      };
      const streamDone = () => {
        if (--open === 0 && this.exited) settle();
      };
      for (const [stream, out, listener] of [
        [child.stdout, stdout, spec.onStdout],
        [child.stderr, stderr, spec.onStderr],
      ] as const) {
        if (!stream) {
          open--;
          continue;
        }
        stream.on('data', (c: Buffer) => {
          listener?.(c);
          out.push(c);
        });
        stream.on('close', streamDone);
      }
      child.on('error', (err: NodeJS.ErrnoException) => {
        if (this.pid === null || !this.exited) {
          this.exited = true;
          settle(err);
        }
      });
      child.on('exit', (code, signal) => {
        this.exited = true;
        exitCode = code ?? 128 + signalNumber(signal);
        if (open === 0) settle();
        else drainTimer = setTimeout(() => settle(), DRAIN_AFTER_EXIT_MS);
      });
    });
  }

  get running(): boolean {
    return !this.exited;
  }

  /** Ends the process and everything it started; the outcome's reason says why. */
  kill(reason: Exclude<EndReason, 'exited'>): void {
    if (this.exited || this.pid === null) return;
    this.endReason = reason;
    const pid = this.pid;
    if (this.viaHelper) {
      signal(pid, 'SIGTERM');
      const t = setTimeout(() => {
        if (!this.exited) signal(pid, 'SIGKILL');
      }, KILL_ESCALATION_MS);
      t.unref();
    } else {
      signal(-pid, 'SIGKILL');
    }
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

function signalNumber(sig: NodeJS.Signals | null): number {
  return sig ? (constants.signals[sig] ?? 0) : 0;
}
