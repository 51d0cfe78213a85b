import { chmod, chown, lstat, mkdir } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join, posix } from 'node:path';
import { createDiskImage, detachLoops, diskUsage, loopDeviceAt, mountDiskImage, removeTree, unmountAllUnder, type DiskTools } from './disk.js';
import { ensureIdmapHelper } from './idmap.js';
import { hasOwnFilesystem } from './mounts.js';
import { CANONICAL_ID_OFFSET, ID_RANGE } from './ids.js';
import type { OciMount } from './oci.js';
import type { VolumeMountSpec } from './types.js';

export type { VolumeMountSpec } from './types.js';

/**
 * Volumes (issue 32): a sparse ext4 image per volume, made like a sandbox's disk (so its size is a
 * hard limit), loop-mounted once on the host at `<dataDir>/volumes/<id>/mnt` and bind-mounted into
 * every sandbox that names it. Its files are stored in canonical ownership (CANONICAL_ID_OFFSET + k
 * for id k inside, as layers are), and each sandbox's bind mount is idmapped from there to that
 * sandbox's own range: root in every sandbox sees them as its own, whatever its range, and on the
 * host they belong to ids no host user can hold.
 */
export interface VolumePaths {
  dir: string;
  image: string;
  mnt: string;
}

const VOLUME_ID_RE = /^vol-[a-z0-9]{8,40}$/;

export function volumePaths(dataDir: string, id: string): VolumePaths {
  if (!VOLUME_ID_RE.test(id)) throw new TypeError(`bad volume id ${JSON.stringify(id)}`);
  const dir = join(dataDir, 'volumes', id);
  return { dir, image: join(dir, 'disk.img'), mnt: join(dir, 'mnt') };
}


/** Paths a volume may not be mounted at or under: the kernel's, the runtime's, and the root. */
const FORBIDDEN_UNDER = ['/proc', '/sys', '/dev', '/.sb'];

/**
 * Why `path` cannot be a volume's mount point inside a sandbox (undefined: it can): absolute,
 * normalized (no '.', '..', '//' or trailing '/'), printable, not '/' and not at or under /proc,
 * /sys, /dev or /.sb (the agent's own mounts).
 */
export function volumePathProblem(path: string): string | undefined {
  if (typeof path !== 'string' || path.length === 0) return 'is empty';
  if (path.length > 1024) return 'is longer than 1024 characters';
  if (!path.startsWith('/')) return 'is not absolute';
  if (path === '/') return "is '/'";
  if ([...path].some((c) => c.charCodeAt(0) < 0x20 || c === '\u007f' || c === ',' || c === ':')) return "holds a control character, ',' or ':'";
  if (posix.normalize(path) !== path || path.endsWith('/') || path.split('/').some((s) => s === '.' || s === '..')) return 'is not normalized';
  for (const f of FORBIDDEN_UNDER) if (path === f || path.startsWith(`${f}/`)) return `is under ${f}`;
  return undefined;
}

/**
 * The OCI mount of a volume for a sandbox whose root is host id `idBase`: a bind of the host
 * mount, idmapped by crun from the canonical offset to that range (a mount of its own in the
 * container's namespace: the host's is not changed), nosuid and nodev.
 */
export function volumeOciMount(dataDir: string, v: VolumeMountSpec, idBase: number): OciMount {
  const map = `${CANONICAL_ID_OFFSET}-${idBase}-${ID_RANGE}`;
  return {
    destination: v.path,
    type: 'bind',
    source: volumePaths(dataDir, v.id).mnt,
    options: ['bind', v.readOnly ? 'ro' : 'rw', 'nosuid', 'nodev', `idmap=uids=${map};gids=${map}`],
  };
}

/**
 * The volume's image mounted at its host mount point (after a reboot, or a first use); a no-op when
 * it is. Mounted as a sandbox's disk is (the runtime's helper, `tools`: a loop device with
 * autoclear, noatime), so both perform alike; without `tools`, mount(8).
 */
export async function ensureVolumeMounted(dataDir: string, id: string, tools?: DiskTools): Promise<void> {
  const p = volumePaths(dataDir, id);
  if (await hasOwnFilesystem(p.mnt)) return;
  if (!existsSync(p.image)) throw new Error(`volume ${id} has no image on this machine`);
  // The directories are the daemon's own (0700, root): nothing a sandbox writes is on the way.
  const st = await lstat(p.dir);
  if (!st.isDirectory() || st.uid !== 0) throw new Error(`volume ${id}: ${p.dir} is not root's directory`);
  await mkdir(p.mnt, { recursive: true, mode: 0o700 });
  await mountDiskImage(p.image, p.mnt, tools);
}

/**
 * The machine's side of volumes: make one (its image formatted and mounted, its root owned by
 * root inside), say what it holds, remove it (unmounted, its loop device freed, its files gone).
 */
export interface VolumeHost {
  create(id: string, sizeBytes: number): Promise<void>;
  usage(id: string): Promise<{ usedBytes: number; totalBytes: number }>;
  destroy(id: string): Promise<void>;
  /** Whether anything of the volume is left on the machine (a directory, a mount, a loop device). */
  leftovers(id: string): Promise<string[]>;
}

export class HostVolumes implements VolumeHost {
  private tools?: Promise<DiskTools>;

  constructor(private readonly dataDir: string) {}

  /** The runtime's helper (compiled once per data directory), for mounting like sandbox disks. */
  private diskTools(): Promise<DiskTools> {
    this.tools ??= ensureIdmapHelper(this.dataDir).then((helper) => ({ helper, imagesDir: join(this.dataDir, 'volumes') }));
    return this.tools;
  }

  async create(id: string, sizeBytes: number): Promise<void> {
    const p = volumePaths(this.dataDir, id);
    await mkdir(join(this.dataDir, 'volumes'), { recursive: true, mode: 0o700 });
    await mkdir(p.dir, { mode: 0o700 });
    try {
      await createDiskImage(p.image, sizeBytes);
      await ensureVolumeMounted(this.dataDir, id, await this.diskTools());
      // Root inside every sandbox (through its idmapped bind) owns the volume's root.
      await chown(p.mnt, CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET);
      await chmod(p.mnt, 0o755);
    } catch (err) {
      await this.destroy(id).catch(() => undefined);
      throw err;
    }
  }

  async usage(id: string): Promise<{ usedBytes: number; totalBytes: number }> {
    await ensureVolumeMounted(this.dataDir, id, await this.diskTools());
    return diskUsage(volumePaths(this.dataDir, id).mnt);
  }

  async destroy(id: string): Promise<void> {
    const p = volumePaths(this.dataDir, id);
    if (!existsSync(p.dir)) return;
    const known = await loopDeviceAt(p.mnt, p.image);
    // Sandboxes that mounted it may still be letting go (a forced delete ends them just before):
    // what a container held a moment ago is tried again, a few times, before the delete fails.
    for (let attempt = 1; ; attempt++) {
      try {
        await unmountAllUnder(p.dir);
        await detachLoops(p.image, known);
        // A loop device the kernel has not cleared yet (a container letting go) is searched for too.
        await detachLoops(p.image);
        await removeTree(p.dir);
        return;
      } catch (err) {
        if (attempt >= 5) throw err;
        await new Promise((r) => setTimeout(r, 200 * attempt));
      }
    }
  }

  async leftovers(id: string): Promise<string[]> {
    const p = volumePaths(this.dataDir, id);
    const out: string[] = [];
    if (existsSync(p.dir)) out.push(p.dir);
    if (await hasOwnFilesystem(p.mnt)) out.push(`mount ${p.mnt}`);
    return out;
  }
}
