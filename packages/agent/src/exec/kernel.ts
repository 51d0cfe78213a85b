import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { constants } from 'node:os';
import { CappedOutput } from './capture.js';
import { EndScanner } from './end-scanner.js';
import { failed, RunningCell, type CellOutcome, type CellSpec } from './kernel-cell.js';
import { cellLine, interruptLine, MAX_CONTROL_LINE, parseControlLine, type Answer } from './kernel-protocol.js';
import { groupMembersAfter, lastPid, signal } from './process-group.js';
import type { EndReason } from './runner.js';

/** After an interrupt (SIGINT), how long a cell gets to end before its kernel is killed and restarted. */
export const INTERRUPT_GRACE_MS = 2000;
/** How long a kernel may take to say it is ready. */
const START_TIMEOUT_MS = 30_000;
/** After the cell's answer, how long its last output may still be on its way (the end markers). */
const MARKER_WAIT_MS = 1000;

export type KernelState = 'starting' | 'idle' | 'busy' | 'dead';

interface Current {
  nonce: string;
  out: EndScanner;
  err: EndScanner;
  stdout: CappedOutput;
  stderr: CappedOutput;
  spec: CellSpec;
  cell: RunningCell;
  child: ChildProcess;
  answer?: Answer;
  markerTimer?: NodeJS.Timeout;
  onAnswer: (a: Answer) => void;
  finish: (o: Ended) => void;
}

interface Ended {
  exitCode: number;
  reason: EndReason;
  kernelRestarted: boolean;
  restartWhy?: string;
  result?: string;
}

/** How to start a kernel: its argv, or the name of the interpreter that is missing. */
export type KernelCommand = () => Promise<{ argv: string[] } | { missing: string }>;

/**
 * One persistent interpreter of a code context (sbx_kernel.py, sbx_kernel_js.cjs). Cells run one
 * at a time, in arrival order. The process starts on the first cell, and again on the next cell
 * after it died. Everything the kernel process says (its control socket, its output) is the
 * sandbox's code talking: bounded, checked, and never trusted to answer.
 */
export class Kernel {
  readonly id = `kernel_${randomBytes(8).toString('hex')}`;
  state: KernelState = 'dead';
  lastActivity = new Date();
  /** Cells that were waiting or running (for /jupyter/sessions' connections). */
  pending = 0;
  private child: ChildProcess | null = null;
  private ctl: Socket | null = null;
  private ready: Promise<void> | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private current: Current | null = null;
  /** Why the kernel died since the last cell ended (the next cell's result says its state was lost). */
  private lost: string | null = null;
  /** Set by a restart or a delete while a cell ran: its result says so instead of "it exited". */
  private requested: string | null = null;
  /** Deleted: no cell runs and no process starts any more. */
  private closed = false;

  constructor(private readonly command: KernelCommand) {}

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  run(spec: CellSpec): RunningCell {
    const cell = new RunningCell(() => this.pid, spec.capBytes);
    this.pending++;
    // The deadline counts from now: a cell waiting behind another one times out all the same.
    const timer = setTimeout(() => cell.kill('timeout'), Math.max(1, spec.deadline - performance.now()));
    void cell.done.finally(() => {
      clearTimeout(timer);
      this.pending--;
      this.lastActivity = new Date();
    });
    this.queue = this.queue.then(async () => {
      if (cell.ended) return;
      try {
        cell.settle(await this.runNow(cell, spec));
      } catch (err) {
        cell.settle(failed(spec.capBytes, `the kernel could not run the cell: ${err instanceof Error ? err.message : String(err)}\n`, 1));
      }
    });
    return cell;
  }

  /**
   * Kills the kernel and everything it started (a running cell ends with kernelRestarted); the
   * next cell gets a fresh one. Asked for, so the next cell's result does not call it lost.
   */
  restart(why = 'it was restarted on request'): void {
    if (this.current) this.requested = why;
    this.kill();
    this.lost = null;
  }

  /** The context is gone: its kernel is killed, and cells still waiting end without running. */
  close(): void {
    this.closed = true;
    this.restart('its context was deleted');
  }

  private kill(): void {
    const child = this.child;
    this.child = null;
    this.ctl = null;
    this.state = 'dead';
    if (!child?.pid) return;
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }

  private async runNow(cell: RunningCell, spec: CellSpec): Promise<CellOutcome> {
    if (this.closed) return failed(spec.capBytes, 'the context was deleted\n', 1);
    const start = await this.ensureStarted(spec);
    if (start) return start;
    // Killed, timed out or deleted while the kernel started: it never runs.
    if (cell.ended) return failed(spec.capBytes, '', 137, 'killed');
    if (this.closed) return failed(spec.capBytes, 'the context was deleted\n', 1);
    const child = this.child;
    const ctl = this.ctl;
    if (!child || !ctl) return failed(spec.capBytes, 'the kernel exited as it started\n', 1);
    const lostBefore = this.lost;
    this.lost = null;
    this.requested = null;
    cell.started = true;
    this.state = 'busy';
    this.lastActivity = new Date();
    const startedAt = performance.now();
    const nonce = randomBytes(12).toString('hex');
    return new Promise<CellOutcome>((resolve) => {
      let escalate: NodeJS.Timeout | undefined;
      const current: Current = {
        nonce,
        out: new EndScanner(Buffer.from(`\0sbx-end:${nonce}\0`)),
        err: new EndScanner(Buffer.from(`\0sbx-end:${nonce}\0`)),
        stdout: new CappedOutput(spec.capBytes),
        stderr: new CappedOutput(spec.capBytes),
        spec,
        cell,
        child,
        onAnswer: (a) => {
          current.answer = a;
          const endReason: EndReason = cell.reason && (a.interrupted || a.exit_code !== 0) ? cell.reason : 'exited';
          const done = () => current.finish({ exitCode: a.exit_code, reason: endReason, kernelRestarted: false, result: a.result });
          if (current.out.ended && current.err.ended) done();
          else current.markerTimer ??= setTimeout(done, MARKER_WAIT_MS);
        },
        finish: (o) => {
          if (this.current !== current) return;
          this.current = null;
          clearTimeout(escalate);
          clearTimeout(current.markerTimer);
          cell.interrupt = null;
          if (this.state === 'busy') this.state = 'idle';
          const restarted = o.kernelRestarted || lostBefore !== null;
          resolve({
            exitCode: o.exitCode,
            reason: o.reason,
            stdout: current.stdout,
            stderr: current.stderr,
            durationMs: performance.now() - startedAt,
            kernelRestarted: restarted,
            ...(restarted ? { restartWhy: o.kernelRestarted ? o.restartWhy : `it died before this execution (${lostBefore})` } : {}),
            ...(o.result !== undefined ? { result: o.result } : {}),
          });
        },
      };
      this.current = current;
      const pidsBefore = lastPid();
      cell.interrupt = () => {
        if (escalate || this.current !== current) return;
        signal(child.pid!, 'SIGINT');
        // Also said on the control socket: a kernel whose cell only waits (a JavaScript promise)
        // hears it there; a Python kernel reads it after the cell and ignores it.
        ctl.write(interruptLine(nonce));
        // What the cell started goes with it, as a fresh process's children do on a timeout or a
        // kill (those still in the kernel's process group; what earlier cells started stays).
        for (const pid of groupMembersAfter(child.pid!, pidsBefore)) if (pid !== child.pid) signal(pid, 'SIGKILL');
        escalate = setTimeout(() => {
          // The interrupt did not end it (code that catches KeyboardInterrupt, or blocks it).
          if (this.current === current && this.child === child) this.kill();
        }, INTERRUPT_GRACE_MS);
      };
      ctl.write(cellLine(nonce, spec));
    });
  }

  /** Starts the process when there is none; an outcome when that failed (the cell's result). */
  private async ensureStarted(spec: CellSpec): Promise<CellOutcome | null> {
    if (this.child && this.state !== 'dead') {
      try {
        await this.ready;
        return null;
      } catch (err) {
        return failed(spec.capBytes, `the kernel did not start: ${(err as Error).message}\n`, 1);
      }
    }
    const cmd = await this.command();
    if ('missing' in cmd) return failed(spec.capBytes, `${cmd.missing}: command not found\n`, 127);
    if (this.closed) return failed(spec.capBytes, 'the context was deleted\n', 1);
    const [program, ...args] = cmd.argv as [string, ...string[]];
    this.state = 'starting';
    let child: ChildProcess;
    try {
      child = spawn(program, args, { cwd: spec.cwd, env: spec.startEnv, stdio: ['ignore', 'pipe', 'pipe', 'pipe'], detached: true });
    } catch (err) {
      this.state = 'dead';
      return failed(spec.capBytes, `${program}: ${(err as Error).message}\n`, 126);
    }
    this.child = child;
    const ctl = child.stdio[3] as Socket;
    this.ctl = ctl;
    let startErr = '';
    let readyOnce = false;
    let markReady!: () => void;
    let failStart!: (e: Error) => void;
    this.ready = new Promise<void>((res, rej) => {
      markReady = res;
      failStart = rej;
    });
    this.ready.catch(() => undefined);
    const mine = () => this.child === child;
    const startTimer = setTimeout(() => {
      failStart(new Error(`it did not start within ${START_TIMEOUT_MS / 1000} s`));
      if (mine()) this.kill();
    }, START_TIMEOUT_MS);
    let line = '';
    ctl.setEncoding('utf8');
    ctl.on('data', (chunk: string) => {
      if (!mine()) return;
      let from = 0;
      for (let nl = chunk.indexOf('\n'); nl >= 0; nl = chunk.indexOf('\n', from)) {
        const text = line + chunk.slice(from, nl);
        line = '';
        from = nl + 1;
        this.onControl(child, text, () => {
          clearTimeout(startTimer);
          readyOnce = true;
          if (this.state === 'starting') this.state = 'idle';
          markReady();
        });
      }
      line += chunk.slice(from);
      if (line.length > MAX_CONTROL_LINE) {
        // Not our kernel talking any more (code in the cell writes to its socket): it cannot be
        // believed, so it goes, and the cell says so.
        line = '';
        failStart(new Error('it broke its protocol'));
        if (mine()) this.kill();
      }
    });
    ctl.on('error', () => undefined);
    const route = (which: 'out' | 'err') => (c: Buffer) => {
      const cur = this.current;
      if (!cur || cur.child !== child) {
        if (this.state === 'starting' && mine()) startErr = (startErr + c.toString()).slice(-4000);
        return; // output between cells, or of a kernel that was replaced, belongs to no cell
      }
      const scanner = which === 'out' ? cur.out : cur.err;
      const data = scanner.feed(c);
      if (data.length) {
        (which === 'out' ? cur.spec.onStdout : cur.spec.onStderr)?.(data);
        (which === 'out' ? cur.stdout : cur.stderr).push(data);
      }
      if (cur.answer && cur.out.ended && cur.err.ended) cur.onAnswer(cur.answer);
    };
    child.stdout!.on('data', route('out'));
    child.stderr!.on('data', route('err'));
    // A failed spawn (ENOENT, EACCES, EAGAIN at the pids limit) emits only this, no 'exit'.
    child.on('error', (err) => {
      clearTimeout(startTimer);
      startErr += `${program}: ${err.message}\n`;
      failStart(err);
      if (mine()) this.kill();
    });
    child.on('exit', (code, sig) => {
      clearTimeout(startTimer);
      // Still this kernel's process: it died on its own (a crash, os._exit, the OOM killer), not
      // by kill(), restart() or delete.
      const unexpected = mine();
      if (unexpected) {
        this.child = null;
        this.ctl = null;
        this.state = 'dead';
      }
      failStart(new Error(startErr.trim() || `it exited (${code ?? sig})`));
      const why = sig ? `it was killed (${sig})` : `it exited (code ${code})`;
      const cur = this.current;
      if (cur && cur.child === child) {
        const rest = [cur.out.flush(), cur.err.flush()];
        if (rest[0]!.length) cur.stdout.push(rest[0]!);
        if (rest[1]!.length) cur.stderr.push(rest[1]!);
        if (cur.answer) {
          // It answered, then died: the answer stands; the next cell learns that the state is gone.
          cur.finish({ exitCode: cur.answer.exit_code, reason: 'exited', kernelRestarted: false, result: cur.answer.result });
          this.lost = why;
          return;
        }
        const exitCode = sig ? 128 + (constants.signals[sig] ?? 0) : code || 1;
        const restartWhy =
          this.requested ?? (cur.cell.reason ? `it did not stop when interrupted, so it was killed` : why);
        cur.finish({ exitCode, reason: cur.cell.reason ?? 'exited', kernelRestarted: true, restartWhy });
      } else if (unexpected && readyOnce) {
        this.lost = why;
      }
    });
    try {
      await this.ready;
    } catch (err) {
      return failed(spec.capBytes, `${startErr || `the kernel did not start: ${(err as Error).message}`}\n`.replace(/\n+$/, '\n'), 1);
    }
    return null;
  }

  /** One line from a kernel's control socket: ready, or the current cell's answer; anything else is ignored. */
  private onControl(child: ChildProcess, text: string, ready: () => void): void {
    const msg = parseControlLine(text);
    if (!msg) return;
    if ('ready' in msg) {
      ready();
      return;
    }
    const cur = this.current;
    if (cur && cur.child === child && msg.cell === cur.nonce && !cur.answer) cur.onAnswer(msg.answer);
  }
}
