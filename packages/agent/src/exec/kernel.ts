import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { CappedOutput } from './capture.js';
import type { EndReason, RunOutcome } from './runner.js';

/** After an interrupt (SIGINT), how long a cell gets to end before its kernel is killed and restarted. */
export const INTERRUPT_GRACE_MS = 2000;
/** How long a kernel may take to say it is ready. */
const START_TIMEOUT_MS = 30_000;
/** After the cell's answer, how long its last output may still be on its way (the end markers). */
const MARKER_WAIT_MS = 1000;

export type KernelState = 'starting' | 'idle' | 'busy' | 'dead';

export interface CellSpec {
  code: string;
  /** Rich output of this cell (sbx_run's out dir). */
  outDir: string;
  /** The working directory asked for (the kernel changes to it only when it differs from the last one asked for). */
  cwd: string;
  env: Record<string, string>;
  stdin?: Buffer;
  /** performance.now() by which the cell must have ended (queued time counts). */
  deadline: number;
  capBytes: number;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
}

export interface CellOutcome extends RunOutcome {
  /** The kernel died (crash, kill after an interrupt that did not work, OOM): its state is lost. */
  kernelRestarted: boolean;
  /** The cell's value as text, when the kernel answers it itself (JavaScript; Python writes result.txt). */
  result?: string;
}

/**
 * Finds where one cell's output ends on a stream: the kernel writes `\0sbx-end:NONCE\0` after it.
 * Bytes that may be the start of the marker are held back until the next chunk tells.
 */
export class EndScanner {
  private held = Buffer.alloc(0);
  ended = false;
  constructor(private readonly marker: Buffer) {}

  /** The bytes of `chunk` that are the cell's output (nothing once the marker was seen). */
  feed(chunk: Buffer): Buffer {
    if (this.ended) return Buffer.alloc(0);
    const buf = this.held.length ? Buffer.concat([this.held, chunk]) : chunk;
    const at = buf.indexOf(this.marker);
    if (at >= 0) {
      this.ended = true;
      this.held = Buffer.alloc(0);
      return buf.subarray(0, at);
    }
    let keep = Math.min(this.marker.length - 1, buf.length);
    while (keep > 0 && !buf.subarray(buf.length - keep).equals(this.marker.subarray(0, keep))) keep--;
    this.held = Buffer.from(buf.subarray(buf.length - keep));
    return buf.subarray(0, buf.length - keep);
  }

  /** What is held back, when the stream ended without the marker. */
  flush(): Buffer {
    const rest = this.held;
    this.held = Buffer.alloc(0);
    return rest;
  }
}

interface Answer {
  exit_code: number;
  interrupted: boolean;
  result?: string;
}

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
  onAnswer: (a: Answer) => void;
  markerTimer?: NodeJS.Timeout;
  finish: (o: { exitCode: number; reason: EndReason; kernelRestarted: boolean; result?: string }) => void;
}

/** A running or queued cell: the registry's handle (pid, kill) and its outcome. */
export class RunningCell {
  readonly done: Promise<CellOutcome>;
  reason: Exclude<EndReason, 'exited'> | null = null;
  started = false;
  ended = false;
  /** Set by the kernel while the cell runs. */
  interrupt: (() => void) | null = null;
  private resolveDone!: (o: CellOutcome) => void;

  constructor(private readonly pidOf: () => number | null) {
    this.done = new Promise((r) => (this.resolveDone = r));
  }

  /** The kernel's process (null before it started). */
  get pid(): number | null {
    return this.pidOf();
  }

  get running(): boolean {
    return !this.ended;
  }

  /** Interrupts the cell (KeyboardInterrupt); its kernel is killed if that does not end it. */
  kill(reason: Exclude<EndReason, 'exited'>): void {
    if (this.ended) return;
    this.reason ??= reason;
    this.interrupt?.();
  }

  settle(o: CellOutcome): void {
    if (this.ended) return;
    this.ended = true;
    this.resolveDone(o);
  }
}

/** How to start a kernel: its argv, or null with the message of a missing interpreter. */
export type KernelCommand = () => Promise<{ argv: string[] } | { missing: string }>;

/**
 * One persistent interpreter of a code context (sbx_kernel.py, sbx_kernel_js.cjs). Cells run one
 * at a time, in arrival order. The process starts on the first cell, and again on the next cell
 * after it died.
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
  /** The kernel died since the last cell ended: the next cell's result says its state was lost. */
  private lostState = false;
  private ctlBuf = '';
  /** The current process said it was ready (a death before that is a failed start, not lost state). */
  private startedOnce = false;

  constructor(
    private readonly command: KernelCommand,
    private readonly startCwd: string,
  ) {}

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  run(spec: CellSpec): RunningCell {
    const cell = new RunningCell(() => this.pid);
    this.pending++;
    const mine = this.queue.then(() => this.runNow(cell, spec));
    this.queue = mine.catch(() => undefined);
    void mine.then(
      (o) => cell.settle(o),
      (err: unknown) => cell.settle(failed(spec, `the kernel could not run the cell: ${err instanceof Error ? err.message : String(err)}\n`, 1)),
    );
    void cell.done.finally(() => {
      this.pending--;
      this.lastActivity = new Date();
    });
    return cell;
  }

  /**
   * Kills the kernel and everything it started (a running cell ends with kernelRestarted); the
   * next cell gets a fresh one. Asked for, so the next cell's result does not call it lost.
   */
  restart(): void {
    this.kill();
    this.lostState = false;
  }

  kill(): void {
    const child = this.child;
    if (!child?.pid) return;
    this.child = null;
    this.ctl = null;
    this.state = 'dead';
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }

  private async runNow(cell: RunningCell, spec: CellSpec): Promise<CellOutcome> {
    if (cell.reason) return failed(spec, '', cell.reason === 'timeout' ? 124 : 137, cell.reason);
    if (performance.now() >= spec.deadline) return failed(spec, '', 124, 'timeout');
    const restarted = this.lostState;
    this.lostState = false;
    const start = await this.ensureStarted(spec);
    if (start) return start;
    const child = this.child!;
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
        finish: (o: { exitCode: number; reason: EndReason; kernelRestarted: boolean; result?: string }) => {
          if (this.current !== current) return;
          this.current = null;
          clearTimeout(timer);
          clearTimeout(escalate);
          clearTimeout(current.markerTimer);
          cell.interrupt = null;
          if (this.state === 'busy') this.state = 'idle';
          resolve({
            exitCode: o.exitCode,
            reason: o.reason,
            stdout: current.stdout,
            stderr: current.stderr,
            durationMs: performance.now() - startedAt,
            kernelRestarted: o.kernelRestarted || restarted,
            ...(o.result !== undefined ? { result: o.result } : {}),
          });
        },
      };
      this.current = current;
      const cellStart = uptimeTicks();
      const interrupt = () => {
        if (escalate || this.current !== current) return;
        signal(child.pid!, 'SIGINT');
        // Also said on the control socket: a kernel whose cell only waits (a JavaScript promise)
        // hears it there; a Python kernel reads it after the cell and ignores it.
        this.ctl?.write(`${JSON.stringify({ interrupt: nonce })}\n`);
        // What the cell started goes with it, as a fresh process's children do on a timeout or a
        // kill (those still in the kernel's process group; what earlier cells started stays).
        for (const pid of groupMembersSince(child.pid!, cellStart)) if (pid !== child.pid) signal(pid, 'SIGKILL');
        escalate = setTimeout(() => {
          // The interrupt did not end it (code that catches KeyboardInterrupt, or blocks it).
          if (this.current === current && this.child === child) this.kill();
        }, INTERRUPT_GRACE_MS);
      };
      cell.interrupt = interrupt;
      const timer = setTimeout(() => cell.kill('timeout'), Math.max(1, spec.deadline - performance.now()));
      if (cell.reason) interrupt();
      const msg = {
        cell: nonce,
        code: spec.code,
        out_dir: spec.outDir,
        cwd: spec.cwd,
        env: spec.env,
        stdin: spec.stdin ? spec.stdin.toString('base64') : null,
      };
      this.ctl!.write(`${JSON.stringify(msg)}\n`);
    });
  }

  /** Starts the process when there is none; an outcome when that failed (the cell's result). */
  private async ensureStarted(spec: CellSpec): Promise<CellOutcome | null> {
    if (this.child && this.state !== 'dead') {
      await this.ready;
      return null;
    }
    const cmd = await this.command();
    if ('missing' in cmd) return failed(spec, `${cmd.missing}: command not found\n`, 127);
    const [program, ...args] = cmd.argv as [string, ...string[]];
    this.state = 'starting';
    let child: ChildProcess;
    try {
      child = spawn(program, args, {
        cwd: this.startCwd,
        env: spec.env,
        stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
        detached: true,
      });
    } catch (err) {
      this.state = 'dead';
      return failed(spec, `${program}: ${(err as Error).message}\n`, 126);
    }
    this.child = child;
    this.startedOnce = false;
    const ctl = child.stdio[3] as Socket;
    this.ctl = ctl;
    this.ctlBuf = '';
    let startErr = '';
    let markReady!: () => void;
    let failStart!: (e: Error) => void;
    this.ready = new Promise<void>((res, rej) => {
      markReady = res;
      failStart = rej;
    });
    this.ready.catch(() => undefined);
    const startTimer = setTimeout(() => {
      failStart(new Error(`it did not start within ${START_TIMEOUT_MS / 1000} s`));
      this.kill();
    }, START_TIMEOUT_MS);
    ctl.on('data', (c: Buffer) => {
      if (this.child !== child) return;
      this.ctlBuf += c.toString();
      for (let nl = this.ctlBuf.indexOf('\n'); nl >= 0; nl = this.ctlBuf.indexOf('\n')) {
        const line = this.ctlBuf.slice(0, nl);
        this.ctlBuf = this.ctlBuf.slice(nl + 1);
        let m: { ready?: boolean; cell?: string; exit_code?: number; interrupted?: boolean; result?: unknown };
        try {
          m = JSON.parse(line);
        } catch {
          continue;
        }
        if (m.ready) {
          clearTimeout(startTimer);
          this.startedOnce = true;
          if (this.state === 'starting') this.state = 'idle';
          markReady();
        } else if (m.cell && this.current?.nonce === m.cell) {
          this.current.onAnswer({
            exit_code: Number(m.exit_code) || 0,
            interrupted: m.interrupted === true,
            ...(typeof m.result === 'string' ? { result: m.result.slice(0, 1024 * 1024) } : {}),
          });
        }
      }
    });
    ctl.on('error', () => undefined);
    const route = (which: 'out' | 'err') => (c: Buffer) => {
      const cur = this.current;
      if (!cur) {
        if (this.state === 'starting') startErr = (startErr + c.toString()).slice(-4000);
        return; // output between cells (a thread or a child left running) belongs to no cell
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
    child.on('error', (err) => {
      startErr += `${program}: ${err.message}\n`;
      failStart(err);
    });
    child.on('exit', (code, sig) => {
      clearTimeout(startTimer);
      // Still this kernel's process: it died on its own (a crash, os._exit, the OOM killer), not
      // by kill() or restart(). If no cell was running, the next one says its state was lost.
      const unexpected = this.child === child;
      if (unexpected) {
        this.child = null;
        this.ctl = null;
        this.state = 'dead';
      }
      failStart(new Error(startErr.trim() || `it exited (${code ?? sig})`));
      const cur = this.current;
      if (cur && cur.child === child) {
        const rest = [cur.out.flush(), cur.err.flush()];
        if (rest[0]!.length) cur.stdout.push(rest[0]!);
        if (rest[1]!.length) cur.stderr.push(rest[1]!);
        const exitCode = code ?? 128 + signalNumber(sig);
        cur.finish({ exitCode, reason: cur.cell.reason ?? 'exited', kernelRestarted: true });
      } else if (unexpected && this.startedOnce) {
        this.lostState = true;
      }
    });
    try {
      await this.ready;
    } catch (err) {
      return failed(spec, `${startErr || `the kernel did not start: ${(err as Error).message}`}\n`.replace(/\n+$/, '\n'), 1);
    }
    return null;
  }
}

function failed(spec: CellSpec, stderrText: string, exitCode: number, reason: EndReason = 'exited'): CellOutcome {
  const stdout = new CappedOutput(spec.capBytes);
  const stderr = new CappedOutput(spec.capBytes);
  if (stderrText) stderr.push(Buffer.from(stderrText));
  return { exitCode, reason, stdout, stderr, durationMs: 0, kernelRestarted: false };
}

/** Clock ticks since boot (the unit of /proc/<pid>/stat's start time); 0 if unreadable. */
function uptimeTicks(): number {
  try {
    return Math.floor(parseFloat(readFileSync('/proc/uptime', 'utf8')) * 100);
  } catch {
    return 0;
  }
}

/** Processes in process group `pgid` started at or after `sinceTicks`. */
export function groupMembersSince(pgid: number, sinceTicks: number): number[] {
  const out: number[] = [];
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // Fields after the command (which may hold spaces and parentheses): state ppid pgrp ...
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[2]) === pgid && Number(f[19]) >= sinceTicks) out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

function signalNumber(sig: NodeJS.Signals | null): number {
  const n: Record<string, number> = { SIGKILL: 9, SIGSEGV: 11, SIGABRT: 6, SIGTERM: 15, SIGINT: 2, SIGBUS: 7 };
  return sig ? (n[sig] ?? 0) : 0;
}
