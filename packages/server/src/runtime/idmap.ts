import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { lstat, mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ServiceError } from '@sandboxd/protocol';
import { CANONICAL_ID_OFFSET, ID_RANGE, LEGACY_ID_OFFSET } from './ids.js';
import { proc, procOk } from './proc.js';

/** The C source of the helper that mounts overlays on idmapped layers (see the file's comment). */
export const IDMAP_HELPER_SOURCE = fileURLToPath(new URL('../../native/idmap-mount.c', import.meta.url));

/**
 * Compiles the helper once per source version into `${dataDir}/bin/idmap-mount-<hash>` and returns
 * its path. Neither util-linux 2.38 (no X-mount.idmap) nor crun (idmaps bind mounts only, not the
 * rootfs) can make idmapped overlay layers, and Node cannot call open_tree/mount_setattr.
 */
export async function ensureIdmapHelper(dataDir: string): Promise<string> {
  const source = await readFile(IDMAP_HELPER_SOURCE);
  const hash = createHash('sha256').update(source).digest('hex').slice(0, 16);
  const dir = join(dataDir, 'bin');
  const bin = join(dir, `idmap-mount-${hash}`);
  if (existsSync(bin)) return bin;
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = `${bin}.tmp-${process.pid}`;
  try {
    const r = await proc('gcc', ['-O2', '-Wall', '-o', tmp, IDMAP_HELPER_SOURCE]).catch((err: Error) => ({ code: -1, stderr: err.message }));
    if (r.code !== 0) {
      throw new ServiceError('RUNTIME_ERROR', 'the host cannot compile the helper that sandboxes need; the operator must install gcc and libc6-dev').withDetail(
        `cannot compile ${IDMAP_HELPER_SOURCE}: ${r.stderr.trim().split('\n').slice(-4).join(' | ')}`,
      );
    }
    await rename(tmp, bin);
  } finally {
    await rm(tmp, { force: true });
  }
  // Builds of older sources: nothing uses them once this one exists.
  for (const n of await readdir(dir)) {
    if (/^idmap-mount-[0-9a-f]{16}$/.test(n) && n !== basename(bin)) await rm(join(dir, n), { force: true });
  }
  return bin;
}

/**
 * The id offset a layer is stored with, read from the owner of its root directory (root inside, or
 * close to it). Layers made before CANONICAL_ID_OFFSET moved are still at LEGACY_ID_OFFSET.
 */
export async function layerIdOffset(layerDir: string): Promise<number> {
  const st = await lstat(layerDir);
  for (const offset of [CANONICAL_ID_OFFSET, LEGACY_ID_OFFSET]) {
    if (st.uid >= offset && st.uid < offset + ID_RANGE && st.gid >= offset && st.gid < offset + ID_RANGE) return offset;
  }
  throw new ServiceError('RUNTIME_ERROR', "a layer of this sandbox's template is not in canonical ownership; the operator must rebuild or re-import it").withDetail(
    `layer ${layerDir}: its root is owned by ${st.uid}:${st.gid}`,
  );
}

export interface IdmappedOverlay {
  helper: string;
  /** Host id that root inside gets (the layers' offset maps to it). */
  base: number;
  /** An empty directory for the helper's transient layer mounts. */
  scratch: string;
}

/**
 * Mounts overlay(lowerDirs, upper, work) at `target`, each lower read-only and, when its offset
 * (`offsets[i]`) is not `base`, idmapped from that offset to `base`. `options` excludes lowerdir.
 */
export async function mountIdmappedOverlay(lowerDirs: string[], offsets: number[], options: string, target: string, m: IdmappedOverlay): Promise<void> {
  const layers = lowerDirs.map((d, i) => `${offsets[i] === m.base ? '-' : offsets[i]}:${d}`);
  await mkdir(m.scratch, { recursive: true, mode: 0o700 });
  await procOk(m.helper, [String(m.base), String(ID_RANGE), m.scratch, target, options, ...layers]);
}
