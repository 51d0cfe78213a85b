import { spawn } from 'node:child_process';
import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { lstat, open, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Duplex, type Readable, type Writable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { sha256Hex } from './layer-store.js';
import { runTool } from '../runtime/proc.js';
import { shiftOwnership } from '../runtime/shift.js';
import { CANONICAL_ID_OFFSET, ID_RANGE } from '../runtime/ids.js';

/** Bump when the conversion of OCI layers to overlay form changes (2: CANONICAL_ID_OFFSET 900000000). */
export const OCI_LAYER_VERSION = 'oci-layer/2';

/** Layer-store id of an OCI layer: derived from its diff id (digest of the uncompressed tar). */
export function ociLayerId(diffId: string): string {
  return sha256Hex(`${OCI_LAYER_VERSION}\n${diffId}`);
}

export interface AppliedLayer {
  /** `sha256:<hex>` of the uncompressed tar. */
  diffId: string;
  entries: number;
  bytes: number;
  whiteouts: number;
  opaqueDirs: number;
  /** Device nodes dropped (a layer must not carry host devices into a sandbox). */
  droppedDevices: number;
}

/**
 * Unpacks one OCI/Docker layer blob (tar, gzip or zstd) into the empty directory `tree` and converts
 * it to overlayfs form: `.wh.NAME` → a 0/0 character device NAME, `.wh..wh..opq` → the
 * `trusted.overlay.opaque=y` xattr on its directory. Ownership is shifted to canonical (+CANONICAL_ID_OFFSET).
 * GNU tar does the unpacking (it refuses `..` members and defers symlinks that could escape).
 */
export async function applyOciLayer(blobPath: string, tree: string, opts: { signal?: AbortSignal } = {}): Promise<AppliedLayer> {
  const hash = createHash('sha256');
  const source = decompressed(createReadStream(blobPath), await sniff(blobPath));
  await runTool(
    'tar',
    [
      '-x',
      '-f',
      '-',
      '-C',
      tree,
      '--numeric-owner',
      '--same-owner',
      '--same-permissions',
      '--delay-directory-restore',
      '--xattrs',
      '--xattrs-include=user.*',
      '--no-wildcards',
    ],
    { stdin: (stdin) => feed(source, hash, stdin), signal: opts.signal },
  );
  const diffId = `sha256:${hash.digest('hex')}`;
  const conv = await toOverlayForm(tree);
  const shifted = shiftOwnership(tree, CANONICAL_ID_OFFSET, { idLimit: ID_RANGE });
  return { diffId, entries: shifted.entries, bytes: shifted.bytes, ...conv };
}

type Compression = 'none' | 'gzip' | 'zstd';

async function sniff(path: string): Promise<Compression> {
  const fh = await open(path, 'r');
  try {
    const { buffer, bytesRead } = await fh.read(Buffer.alloc(4), 0, 4, 0);
    const b = buffer.subarray(0, bytesRead);
    if (b[0] === 0x1f && b[1] === 0x8b) return 'gzip';
    if (b.equals(Buffer.from([0x28, 0xb5, 0x2f, 0xfd]))) return 'zstd';
    return 'none';
  } finally {
    await fh.close();
  }
}

function decompressed(input: Readable, kind: Compression): Readable {
  if (kind === 'none') return input;
  if (kind === 'gzip') return input.pipe(createGunzip());
  // Node 20 has no zstd; the zstd tool is a Debian package that most hosts have.
  const child = spawn('zstd', ['-d', '-c', '-q'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const duplex = Duplex.from({ writable: child.stdin, readable: child.stdout });
  child.on('error', (err) => duplex.destroy(new Error(`zstd-compressed layer needs the zstd tool: ${err.message}`)));
  child.on('close', (code) => {
    if (code !== 0) duplex.destroy(new Error(`zstd exited with ${code}`));
  });
  return input.pipe(duplex);
}

/** Hashes every byte (tar may stop reading at its end-of-archive marker) while feeding tar. */
async function feed(source: Readable, hash: Hash, stdin: Writable): Promise<void> {
  let open = true;
  stdin.once('close', () => (open = false));
  stdin.once('error', () => (open = false));
  for await (const chunk of source as AsyncIterable<Buffer>) {
    hash.update(chunk);
    if (open && !stdin.write(chunk)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          stdin.off('drain', done);
          stdin.off('close', done);
          resolve();
        };
        stdin.on('drain', done);
        stdin.on('close', done);
      });
    }
  }
  if (open) stdin.end();
}

async function toOverlayForm(tree: string): Promise<Omit<AppliedLayer, 'diffId' | 'entries' | 'bytes'>> {
  const whiteouts: string[] = [];
  const opaque: string[] = [];
  let droppedDevices = 0;
  const stack = [tree];
  while (stack.length > 0) {
    const dir = stack.pop()!;
    const entries = await readdir(dir, { withFileTypes: true });
    const names = new Set(entries.map((e) => e.name));
    for (const e of entries) {
      const p = join(dir, e.name);
      if (e.name.startsWith('.wh.')) {
        await unlink(p);
        if (e.name === '.wh..wh..opq') opaque.push(dir);
        // Other `.wh..wh.*` names are aufs bookkeeping with no meaning for overlayfs.
        else if (!e.name.startsWith('.wh..wh.')) {
          const target = e.name.slice(4);
          // Re-created in this same layer: the new entry already hides the lower one.
          if (!names.has(target)) whiteouts.push(join(dir, target));
        }
      } else if (e.isBlockDevice() || e.isCharacterDevice()) {
        await unlink(p);
        droppedDevices++;
      } else if (e.isDirectory()) {
        stack.push(p);
      }
    }
  }
  for (const w of whiteouts) await runTool('mknod', ['-m', '000', w, 'c', '0', '0']);
  for (const d of opaque) await runTool('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', d]);
  return { whiteouts: whiteouts.length, opaqueDirs: opaque.length, droppedDevices };
}

/** Whether `path` in a layer tree is an overlay whiteout (for tests and diagnostics). */
export async function isWhiteout(path: string): Promise<boolean> {
  const st = await lstat(path).catch(() => undefined);
  return !!st && st.isCharacterDevice() && st.rdev === 0;
}
