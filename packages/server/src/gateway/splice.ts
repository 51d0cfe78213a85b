import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { basename, join } from 'node:path';
import { TLSSocket } from 'node:tls';
import { fileURLToPath } from 'node:url';

/** The C source of the in-kernel relay (see the file's comment). */
export const SPLICE_HELPER_SOURCE = fileURLToPath(new URL('../../native/sbx-splice.c', import.meta.url));

/** The helper's exit statuses (sbx-splice.c). */
const EXIT_NO_START = 3;
const EXIT_IDLE = 4;

/**
 * Compiles the helper once per source version into `${dir}/sbx-splice-<hash>` and returns its path
 * (gcc and the C library's headers are installed with the other system packages).
 */
export async function ensureSpliceHelper(dir: string): Promise<string> {
  const source = await readFile(SPLICE_HELPER_SOURCE);
  const hash = createHash('sha256').update(source).digest('hex').slice(0, 16);
  const bin = join(dir, `sbx-splice-${hash}`);
  if (existsSync(bin)) return bin;
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = `${bin}.tmp-${process.pid}`;
  try {
    await new Promise<void>((resolve, reject) =>
      execFile('gcc', ['-O2', '-Wall', '-o', tmp, SPLICE_HELPER_SOURCE], (err, _out, stderr) =>
        err ? reject(new Error(`cannot compile ${SPLICE_HELPER_SOURCE}: ${(stderr || err.message).trim().split('\n').slice(-4).join(' | ')}`)) : resolve(),
      ),
    );
    await rename(tmp, bin);
  } finally {
    await rm(tmp, { force: true });
  }
  for (const n of await readdir(dir)) {
    if (/^sbx-splice-[0-9a-f]{16}$/.test(n) && n !== basename(bin)) await rm(join(dir, n), { force: true });
  }
  return bin;
}

/** The kernel descriptor behind a socket the helper can splice (TCP or a unix socket; not TLS). */
export function spliceableFd(sock: Socket | null | undefined): number | undefined {
  if (!sock || sock.destroyed || sock instanceof TLSSocket) return undefined;
  const fd = (sock as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && fd > 2 ? fd : undefined;
}

type ReadableHandle = { readStop(): number; readStart: () => number; reading?: boolean };

/**
 * Stops Node reading from a socket while the helper reads it, and keeps it stopped whatever asks
 * to resume it (an HTTP parser, a stream wanting more) until the returned release. Node's view of
 * the bytes the helper took is gone, so a connection held this way is closed afterwards, unless only
 * a complete body was taken.
 */
export function holdReads(sock: Socket): (resume?: boolean) => void {
  const h = (sock as unknown as { _handle?: ReadableHandle })._handle;
  if (!h) return () => undefined;
  h.readStop();
  h.reading = false;
  h.readStart = () => 0;
  let held = true;
  /** `resume`: nothing was taken, so Node reads on where it stopped. */
  return (resume = false) => {
    if (!held) return;
    held = false;
    delete (h as Partial<ReadableHandle>).readStart;
    h.reading = false;
    if (resume && !sock.destroyed) {
      h.reading = true;
      h.readStart();
    }
  };
}

/** Resolves once everything Node was given for the socket is in the kernel's hands. */
export function flushed(sock: Socket): Promise<void> {
  if (sock.writableLength === 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    // An empty write completes after those before it.
    sock.write(Buffer.alloc(0), (err) => (err ? reject(err) : resolve()));
  });
}

/** How a copy ended: all bytes moved; nothing moved and the caller relays in JavaScript; cut. */
export type CopyOutcome = 'done' | 'fallback' | 'idle' | 'failed';

const live = new Set<ChildProcess>();
let started = 0;

/** Helpers started so far (tests: the in-kernel path was taken). */
export function startedSpliceHelpers(): number {
  return started;
}

/** Helpers running now (tests: a finished relay leaves none). */
export function liveSpliceHelpers(): number {
  return live.size;
}

/**
 * Relays large bodies and upgraded connections in the kernel. Until the helper is compiled (or when
 * it cannot be), `available` is false and callers relay in JavaScript as before.
 */
export class SpliceRelay {
  private bin: string | undefined;

  /** `minBytes`: bodies smaller than this stay in JavaScript (a helper's start costs ~1–2 ms). */
  constructor(
    readonly minBytes: number,
    bin?: string,
  ) {
    this.bin = bin;
  }

  /** Compiles the helper into `dir` in the background; a failure is logged and leaves the JS relay. */
  prepare(dir: string, log: (msg: string, extra?: Record<string, unknown>) => void): void {
    ensureSpliceHelper(dir).then(
      (bin) => (this.bin = bin),
      (err: Error) => log('gateway: the in-kernel relay is not available; bodies are relayed in JavaScript', { detail: err.message }),
    );
  }

  get available(): boolean {
    return this.bin !== undefined;
  }

  /** Whether a body of `bytes` is worth the helper between these sockets. */
  worth(bytes: number, a: Socket | null | undefined, b: Socket | null | undefined): boolean {
    return bytes >= this.minBytes && this.canRelay(a, b);
  }

  /** Whether the helper can relay between these sockets (an upgraded connection: all of its rest). */
  canRelay(a: Socket | null | undefined, b: Socket | null | undefined): boolean {
    return this.bin !== undefined && spliceableFd(a) !== undefined && spliceableFd(b) !== undefined;
  }

  /**
   * Moves exactly `bytes` from `src` to `dst`. The caller holds `src`'s reads (holdReads) and has
   * flushed what Node wrote to `dst`. Destroying either socket meanwhile ends the helper.
   */
  copy(src: Socket, dst: Socket, bytes: number, idleMs: number): Promise<CopyOutcome> {
    return this.run(['copy', String(bytes), String(idleMs)], src, dst).then((code) => outcome(code));
  }

  /**
   * Moves bytes both ways between two sockets until both directions ended (a half-close is passed
   * on), then resolves; neither is read by Node meanwhile. 'fallback': the helper did not start.
   */
  relay(a: Socket, b: Socket, idleMs: number): Promise<CopyOutcome> {
    return this.run(['relay', String(idleMs)], a, b).then((code) => outcome(code));
  }

  private run(args: string[], a: Socket, b: Socket): Promise<number> {
    const fa = spliceableFd(a);
    const fb = spliceableFd(b);
    if (!this.bin || fa === undefined || fb === undefined) return Promise.resolve(EXIT_NO_START);
    return new Promise((resolve) => {
      let child: ChildProcess;
      try {
        // Plain descriptor numbers: the child gets its own copies, and Node's sockets stay as they are.
        child = spawn(this.bin!, args, { stdio: ['ignore', 'ignore', 'ignore', fa, fb] });
      } catch {
        resolve(EXIT_NO_START);
        return;
      }
      live.add(child);
      if (child.pid !== undefined) started++;
      // The helper holds the connections open through its copies: a socket Node closes (a client
      // gone, an interrupt, a timeout) must end it, or the connection would outlive its close.
      const stop = () => child.kill('SIGKILL');
      a.once('close', stop);
      b.once('close', stop);
      let settled = false;
      const done = (code: number) => {
        if (settled) return;
        settled = true;
        live.delete(child);
        a.off('close', stop);
        b.off('close', stop);
        resolve(code);
      };
      child.once('error', () => done(EXIT_NO_START));
      child.once('exit', (code) => done(code ?? -1));
    });
  }
}

function outcome(code: number): CopyOutcome {
  if (code === 0) return 'done';
  if (code === EXIT_NO_START) return 'fallback';
  if (code === EXIT_IDLE) return 'idle';
  return 'failed';
}
