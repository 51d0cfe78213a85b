import { CappedOutput } from './capture.js';
import type { EndReason, RunOutcome } from './runner.js';

export interface CellSpec {
  code: string;
  /** Rich output of this cell (sbx_run's out dir). */
  outDir: string;
  /** The working directory asked for (the kernel changes to it only when it differs from the last one asked for). */
  cwd: string;
  /** The cell's env: the context's, with the request's own over it. */
  env: Record<string, string>;
  /** The env a kernel starts with when this cell starts one: the context's, without the request's. */
  startEnv: Record<string, string>;
  stdin?: Buffer;
  /** performance.now() by which the cell must have ended (queued time counts). */
  deadline: number;
  capBytes: number;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
}

export interface CellOutcome extends RunOutcome {
  /** The kernel died during or before this cell (or was restarted): earlier state is lost. */
  kernelRestarted: boolean;
  /** Why, in words, when kernelRestarted. */
  restartWhy?: string;
  /** The cell's value as text, when the kernel answers it itself (JavaScript; Python writes result.txt). */
  result?: string;
}

/** A running or queued cell: the registry's handle (pid, kill) and its outcome. */
export class RunningCell {
  readonly done: Promise<CellOutcome>;
  reason: Exclude<EndReason, 'exited'> | null = null;
  /** Written to its kernel (from then on a kill interrupts it; before, it ends at once). */
  started = false;
  ended = false;
  /** Set by the kernel while the cell runs. */
  interrupt: (() => void) | null = null;
  private resolveDone!: (o: CellOutcome) => void;

  constructor(
    private readonly pidOf: () => number | null,
    private readonly capBytes: number,
  ) {
    this.done = new Promise((r) => (this.resolveDone = r));
  }

  /** The kernel's process (null before it started). */
  get pid(): number | null {
    return this.pidOf();
  }

  get running(): boolean {
    return !this.ended;
  }

  /**
   * A running cell is interrupted (KeyboardInterrupt; its kernel is killed if that does not end
   * it); one still waiting for its turn (or for its kernel to start) ends at once, never run.
   */
  kill(reason: Exclude<EndReason, 'exited'>): void {
    if (this.ended) return;
    this.reason ??= reason;
    if (this.started) this.interrupt?.();
    else this.settle(failed(this.capBytes, '', reason === 'timeout' ? 124 : 137, reason));
  }

  settle(o: CellOutcome): void {
    if (this.ended) return;
    this.ended = true;
    this.resolveDone(o);
  }
}

/** The result of a cell that did not run (or whose kernel could not run it). */
export function failed(capBytes: number, stderrText: string, exitCode: number, reason: EndReason = 'exited'): CellOutcome {
  const stdout = new CappedOutput(capBytes);
  const stderr = new CappedOutput(capBytes);
  if (stderrText) stderr.push(Buffer.from(stderrText));
  return { exitCode, reason, stdout, stderr, durationMs: 0, kernelRestarted: false };
}
