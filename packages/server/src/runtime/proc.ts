import { basename } from 'node:path';
import { spawn, type StdioOptions } from 'node:child_process';
import { ServiceError } from '@sandboxd/protocol';
import { spawner } from './spawner.js';

export interface ProcResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface ProcOptions {
  input?: string;
  cwd?: string;
  /** Overrides the default ['pipe', 'pipe', 'pipe'] (e.g. to hand a listening socket to crun). */
  stdio?: StdioOptions;
}

/**
 * Runs a host tool to completion and collects its output; never rejects on a non-zero exit. With
 * the default stdio it runs from the spawner process (cheap forks, see spawner.ts).
 */
export function proc(cmd: string, args: string[], opts: ProcOptions = {}): Promise<ProcResult> {
  if (!opts.stdio) return spawner.run(cmd, args, { cwd: opts.cwd, input: opts.input });
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, stdio: opts.stdio ?? ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout?.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr?.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
    if (child.stdin) {
      child.stdin.on('error', () => undefined);
      child.stdin.end(opts.input ?? '');
    }
  });
}

/** Like proc() but a non-zero exit is a RUNTIME_ERROR (toolError). */
export async function procOk(cmd: string, args: string[], opts: ProcOptions = {}): Promise<string> {
  const r = await proc(cmd, args, opts);
  if (r.code !== 0) throw toolError(cmd, args, r);
  return r.stdout;
}

/**
 * A host tool that failed: an outage whose message names the tool only; its command line and output
 * (host paths, other sandboxes' names) are the operator's, in `detail` (renderError logs it).
 */
export function toolError(cmd: string, args: string[], r: ProcResult): ServiceError {
  const why = (r.stderr || r.stdout).trim().split('\n').slice(-6).join(' | ') || (r.signal ?? `exit ${r.code}`);
  return new ServiceError('RUNTIME_ERROR', `a host tool (${basename(cmd)}) failed; try again`).withDetail(`${cmd} ${args.slice(0, 6).join(' ')}: ${why}`);
}
