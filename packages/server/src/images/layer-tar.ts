import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import { runTool } from '../runtime/proc.js';
import { TarGuard, TarRefused } from './tar-guard.js';

/**
 * A layer as one byte stream, to move it between machines: a POSIX tar of its tree with entries in
 * name order, numeric owners, modes, mtimes and extended attributes as stored, and no access or
 * change times, so that one tree always gives the same bytes and the receiver recreates the exact
 * tree. Its sha256 is the layer's content digest. Bump the format when the arguments change.
 */
export const LAYER_TAR_FORMAT = 'layer-tar/2';

const PACK_ARGS = [
  '--sort=name',
  '--format=posix',
  '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
  '--numeric-owner',
  '--xattrs',
  '--xattrs-include=*',
  // Overlayfs' own bookkeeping on a build's upper directory (which filesystem it came from, copy-up
  // state): meaningless in another overlay, and refused by the receiver. Opaque directories stay.
  '--xattrs-exclude=trusted.overlay.uuid',
  '--xattrs-exclude=trusted.overlay.origin',
  '--xattrs-exclude=trusted.overlay.impure',
  '--xattrs-exclude=trusted.overlay.nlink',
  '--one-file-system',
];

const UNPACK_ARGS = ['--numeric-owner', '--same-owner', '--same-permissions', '--delay-directory-restore', '--xattrs', '--xattrs-include=*', '--no-wildcards'];

export interface LayerDigest {
  /** `sha256:<hex>` of the layer's tar. */
  digest: string;
  /** Its length in bytes. */
  bytes: number;
}

/** The layer tree `tree` as its tar stream; a failure of tar fails the stream, and destroying it stops tar. */
export function packLayer(tree: string): Readable {
  const out = new PassThrough({ highWaterMark: 1024 * 1024 });
  const child = spawn('tar', ['-c', '-f', '-', '-C', tree, ...PACK_ARGS, '.'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr = (stderr + c).slice(-2000)));
  child.stdout.pipe(out, { end: false });
  child.once('error', (err) => out.destroy(err));
  child.once('close', (code, signal) => {
    if (code === 0) out.end();
    else out.destroy(new Error(`tar of layer ${tree} failed (${signal ?? `exit ${code}`}): ${stderr.trim()}`));
  });
  out.once('close', () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return out;
}

/** The content digest of the layer tree `tree` (reads all of it: seconds per hundreds of MB); an abort stops tar. */
export async function digestLayerTree(tree: string, signal?: AbortSignal): Promise<LayerDigest> {
  signal?.throwIfAborted();
  const hash = createHash('sha256');
  let bytes = 0;
  const tar = packLayer(tree);
  const stop = () => tar.destroy(signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
  signal?.addEventListener('abort', stop, { once: true });
  try {
    for await (const chunk of tar as AsyncIterable<Buffer>) {
      hash.update(chunk);
      bytes += chunk.length;
    }
  } finally {
    signal?.removeEventListener('abort', stop);
  }
  return { digest: `sha256:${hash.digest('hex')}`, bytes };
}

export interface UnpackResult {
  entries: number;
  /** Bytes of regular files. */
  fileBytes: number;
}

/**
 * Unpacks a layer's tar from `source` (the network: hostile) into the empty directory `tree`. Every
 * header passes TarGuard before tar sees it; the stream must be exactly `expect.bytes` long with
 * sha256 `expect.digest`, else this rejects (TarRefused) and the caller removes `tree`.
 */
export async function unpackLayer(source: AsyncIterable<Uint8Array>, tree: string, expect: LayerDigest, opts: { signal?: AbortSignal; maxEntries?: number; maxFileBytes?: number; canonicalOnly?: boolean } = {}): Promise<UnpackResult> {
  const guard = new TarGuard({ maxBytes: expect.bytes, maxEntries: opts.maxEntries, maxFileBytes: opts.maxFileBytes, canonicalOnly: opts.canonicalOnly });
  const hash = createHash('sha256');
  const feed = async (stdin: Writable) => {
    let open = true;
    stdin.once('close', () => (open = false));
    stdin.once('error', () => (open = false));
    for await (const chunk of source) {
      const b = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      hash.update(b);
      for (const part of guard.push(b)) {
        if (!open) {
          if (guard.ended) break;
          throw new Error('tar stopped reading the layer before its end');
        }
        if (!stdin.write(part)) await drained(stdin);
      }
    }
    guard.finish();
    const digest = `sha256:${hash.digest('hex')}`;
    if (guard.bytes !== expect.bytes) throw new TarRefused(`the layer is ${guard.bytes} bytes, not ${expect.bytes}`);
    if (digest !== expect.digest) throw new TarRefused(`the layer's digest is ${digest}, not ${expect.digest}`);
    if (open) stdin.end();
  };
  await runTool('tar', ['-x', '-f', '-', '-C', tree, ...UNPACK_ARGS], { stdin: feed, signal: opts.signal });
  return { entries: guard.entries, fileBytes: guard.fileBytes };
}

function drained(stream: Writable): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.on('drain', done);
    stream.on('close', done);
  });
}
