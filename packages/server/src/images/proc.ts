import { spawn } from 'node:child_process';
import type { Writable } from 'node:stream';
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';

export interface RunOptions {
  /**
   * Text, or a feeder that writes the child's stdin and resolves when done (it must tolerate the
   * child closing stdin early). A feeder that throws kills the child and fails the run.
   */
  stdin?: string | ((stdin: Writable) => Promise<void>);
  /** Receives every non-empty output line (stdout and stderr), carriage-return progress split too. */
  onLine?: (line: string) => void;
  signal?: AbortSignal;
}

/**
 * Runs a host tool (mmdebstrap, tar, umount) to completion. The child gets its own process group
 * so an abort kills the whole tree (mmdebstrap forks apt and dpkg). Rejects on a non-zero exit,
 * with the last output lines in the message.
 */
export function runTool(cmd: string, args: string[], opts: RunOptions = {}): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    if (opts.signal?.aborted) return reject(abortError(opts.signal));
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
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
export async function removeTree(dir: string): Promise<void> {
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
