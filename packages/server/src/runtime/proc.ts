import { basename, resolve } from 'node:path';
import { readFile } from 'node:fs/promises';
import type { Writable } from 'node:stream';
import { spawn, type StdioOptions } from 'node:child_process';
import { ServiceError } from '@sandboxd/protocol';
import { spawner, type ProcResult } from './spawner.js';

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

export interface RunOptions {
  /**
   * Text, or a feeder that writes the child's stdin and resolves when done (it must tolerate the
   * child closing stdin early). A feeder that throws kills the child and fails the run.
   */
  stdin?: string | ((stdin: Writable) => Promise<void>);
  /** Receives every non-empty output line (stdout and stderr), carriage-return progress split too. */
  onLine?: (line: string) => void;
  signal?: AbortSignal;
  /** Added to the daemon's environment (e.g. DEBIAN_FRONTEND for apt). */
  env?: Record<string, string>;
}

/**
 * Runs a host tool (mmdebstrap, tar, umount) to completion. The child gets its own process group
 * so an abort kills the whole tree (mmdebstrap forks apt and dpkg). Rejects on a non-zero exit,
 * with the last output lines in the message.
 */
export function runTool(cmd: string, args: string[], opts: RunOptions = {}): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    if (opts.signal?.aborted) return reject(abortError(opts.signal));
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], detached: true, env: opts.env ? { ...process.env, ...opts.env } : process.env });
    const tail: string[] = [];
    let buf = '';
    const onData = (chunk: Buffer | null) => {
      buf += chunk === null ? '\n' : chunk.toString('utf8');
      const parts = buf.split(/\r\n|\r|\n/);
      buf = parts.pop() ?? '';
      for (const p of parts) {
        const line = p.trimEnd();
        if (!line) continue;
        tail.push(line);
        if (tail.length > 20) tail.shift();
        opts.onLine?.(line);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    const kill = () => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* already gone */
      }
    };
    opts.signal?.addEventListener('abort', kill, { once: true });
    child.stdin.on('error', () => {
      /* the tool may exit before reading all of stdin */
    });
    let feedError: Error | undefined;
    let feeding: Promise<void> = Promise.resolve();
    if (typeof opts.stdin === 'function') {
      feeding = opts.stdin(child.stdin).catch((err: unknown) => {
        feedError = err instanceof Error ? err : new Error(String(err));
        kill();
      });
    } else {
      child.stdin.end(opts.stdin ?? '');
    }
    child.on('error', (err) => {
      opts.signal?.removeEventListener('abort', kill);
      reject(err);
    });
    child.on('close', (code, sig) => {
      opts.signal?.removeEventListener('abort', kill);
      onData(null);
      void feeding.then(() => {
        if (opts.signal?.aborted) return reject(abortError(opts.signal));
        if (feedError) return reject(feedError);
        if (code === 0) return resolvePromise();
        reject(new Error(`${cmd} failed (${sig ?? `exit ${code}`}): ${tail.slice(-8).join(' | ')}`));
      });
    });
  });
}

function abortError(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error('aborted');
}

/**
 * Removes a directory tree that a crashed build may have left with mounts inside (mmdebstrap
 * mounts /proc, /sys and /dev into its chroot): unmount everything under it first, deepest first,
 * then delete without crossing filesystems, so a leftover bind of /dev can never cost host files.
 */
export async function removeTreeWithMounts(dir: string): Promise<void> {
  const abs = resolve(dir);
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const mounts = mountinfo
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => !!p)
    .map((p) => p.replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((p) => p === abs || p.startsWith(abs + '/'))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) await runTool('umount', ['-l', m]).catch(() => undefined);
  await runTool('rm', ['-rf', '--one-file-system', abs]);
}
