import type { CallbackState } from './callback.js';
import { randomBytes } from 'node:crypto';
import type { ProcessInfo, ProcessStatus } from '../proto.js';
import type { OutputLog } from './output-log.js';
import type { EndReason } from './runner.js';

export interface ProcessEntry {
  id: string;
  name: string;
  kind: 'execute' | 'command';
  background: boolean;
  language: string;
  startedAt: Date;
  endedAt: Date | null;
  status: ProcessStatus;
  exitCode: number | null;
  pid: number | null;
  /** Set while the process (or the kernel cell) runs. */
  proc: { readonly pid: number | null; kill(reason: Exclude<EndReason, 'exited'>): void } | null;
  /** Background processes: their output with offsets, as it comes (GET /processes/{id}/output, attach). */
  output?: OutputLog;
  /** Per-stream capture of the final result (default: the config's); what nobody reads is not held. */
  captureBytes?: number;
  /** Kept for finished background processes only. */
  stdout?: string;
  stderr?: string;
  truncated?: boolean;
  /** Delivery of the result to a callback URL (/execute/async). */
  callback?: CallbackState;
}

const KEEP_FINISHED = 100;
/** Output kept of finished background processes without an output log, per stream and in total (oldest dropped first). */
export const KEEP_OUTPUT_BYTES = 1024 * 1024;
const KEEP_OUTPUT_TOTAL_BYTES = 8 * 1024 * 1024;

export function newProcessId(): string {
  return `proc_${randomBytes(8).toString('hex')}`;
}

/** Every execution and command of this sandbox: the running ones and the last 100 finished. */
export class ProcessRegistry {
  private running = new Map<string, ProcessEntry>();
  private finished: ProcessEntry[] = [];
  private keptBytes = 0;
  /** Bytes the output logs of finished processes hold; past `finishedOutputBytes` the oldest are released. */
  private keptLogBytes = 0;
  totalStarted = 0;

  constructor(private readonly finishedOutputBytes = 8 * 1024 * 1024) {}

  add(entry: ProcessEntry): void {
    this.running.set(entry.id, entry);
    this.totalStarted++;
  }

  get activeCount(): number {
    return this.running.size;
  }

  get(id: string): ProcessEntry | undefined {
    return this.running.get(id) ?? this.finished.find((e) => e.id === id);
  }

  finish(entry: ProcessEntry, status: ProcessStatus, exitCode: number, output?: { stdout: string; stderr: string; truncated: boolean }): void {
    entry.status = status;
    entry.exitCode = exitCode;
    entry.endedAt = new Date();
    entry.proc = null;
    this.running.delete(entry.id);
    if (entry.output) {
      entry.output.close();
      this.keptLogBytes += entry.output.keptBytes;
    }
    // A background process's record reads its output log: nothing is held twice.
    if (output && entry.background && !entry.output) {
      entry.stdout = clip(output.stdout);
      entry.stderr = clip(output.stderr);
      entry.truncated = output.truncated || entry.stdout.length < output.stdout.length || entry.stderr.length < output.stderr.length;
      this.keptBytes += entry.stdout.length + entry.stderr.length;
    }
    this.finished.push(entry);
    while (this.finished.length > KEEP_FINISHED) {
      const gone = this.finished.shift()!;
      this.drop(gone);
      this.releaseLog(gone);
    }
    for (const old of this.finished) {
      if (this.keptBytes <= KEEP_OUTPUT_TOTAL_BYTES) break;
      if (old.stdout !== undefined) {
        this.drop(old);
        old.stdout = old.stderr = '';
        old.truncated = true;
      }
    }
    for (const old of this.finished) {
      if (this.keptLogBytes <= this.finishedOutputBytes) break;
      this.releaseLog(old);
    }
  }

  list(): ProcessInfo[] {
    return [...this.running.values(), ...this.finished.slice().reverse()].map(toInfo);
  }

  private drop(e: ProcessEntry): void {
    this.keptBytes -= (e.stdout?.length ?? 0) + (e.stderr?.length ?? 0);
  }

  /** The log's offsets stay (a reader learns what it lost); its bytes go. */
  private releaseLog(e: ProcessEntry): void {
    if (!e.output || e.output.keptBytes === 0) return;
    this.keptLogBytes -= e.output.keptBytes;
    e.output.release();
  }
}

function clip(s: string): string {
  return s.length > KEEP_OUTPUT_BYTES ? s.slice(0, KEEP_OUTPUT_BYTES) : s;
}

export function toInfo(e: ProcessEntry): ProcessInfo {
  const started = e.startedAt.toISOString();
  const info: ProcessInfo = {
    process_id: e.id,
    execution_id: e.id,
    name: e.name,
    kind: e.kind,
    background: e.background,
    status: e.status,
    language: e.language,
    started_at: started,
    start_time: started,
    end_time: e.endedAt ? e.endedAt.toISOString() : null,
    exit_code: e.exitCode,
    duration: e.endedAt ? (e.endedAt.getTime() - e.startedAt.getTime()) / 1000 : null,
    pid: e.pid,
  };
  if (e.output && e.endedAt) {
    const out = e.output.tail('stdout', KEEP_OUTPUT_BYTES);
    const err = e.output.tail('stderr', KEEP_OUTPUT_BYTES);
    info.stdout = out.text;
    info.stderr = err.text;
    info.truncated = out.truncated || err.truncated;
  } else if (e.stdout !== undefined) {
    info.stdout = e.stdout;
    info.stderr = e.stderr ?? '';
    info.truncated = e.truncated ?? false;
  }
  if (e.callback) info.callback = { ...e.callback };
  return info;
}
