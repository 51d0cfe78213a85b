import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, readFile, readlink, rename, rm, stat, statfs } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { basename, isAbsolute, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { layerIdOffset, mountIdmappedOverlay, type IdmappedOverlay } from './idmap.js';
import { loopDevicesFor, mountsUnder } from './mounts.js';
import { proc, procOk } from './proc.js';

/** mount(2) takes at most one page of options; overlay's lowerdir list is the long part. */
const MAX_MOUNT_DATA = 4000;

/**
 * A sparse ext4 image per sandbox: this kernel has no project quotas, so a filesystem of its own
 * is what makes `diskGb` a hard limit. No journal (the data is disposable on a crash, and it saves
 * space and time), lazy inode tables, no discard pass, no blocks reserved for host root (root in
 * the sandbox is not host root and could not use them). The root directory is host root's: disks
 * are made before they are given to a sandbox (the pool), so prepareUpper sets the sandbox's ids.
 */
export async function createDiskImage(path: string, sizeBytes: number, tools?: DiskTools): Promise<void> {
  if (tools) {
    await procOk(tools.helper, ['sparse-copy', await formattedImage(tools.imagesDir, sizeBytes), path]);
    return;
  }
  await formatImage(path, sizeBytes);
}

const MKFS_ARGS = ['-q', '-F', '-m', '0', '-O', '^has_journal', '-E', 'lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0'];

async function formatImage(path: string, sizeBytes: number): Promise<void> {
  const fh = await open(path, 'wx', 0o600);
  try {
    await fh.truncate(sizeBytes);
  } finally {
    await fh.close();
  }
  await procOk('mkfs.ext4', [...MKFS_ARGS, path]);
}

/**
 * The runtime's own disk tools: the native helper (idmap-mount.c: `loop-mount`, `sparse-copy`) and
 * the directory of formatted empty images it copies. mount(8) and mkfs.ext4 read the whole mount
 * table on every call (and mount(8) looks at every loop device), which a thousand sandboxes make
 * thousands of lines long; the helper reads neither.
 */
export interface DiskTools {
  helper: string;
  imagesDir: string;
}

const formatting = new Map<string, Promise<string>>();

/** `imagesDir`/ext4-<bytes>-<options hash>.img: formatted once, then copied for every disk of that size. */
export async function formattedImage(imagesDir: string, sizeBytes: number): Promise<string> {
  const opts = createHash('sha256').update(MKFS_ARGS.join(' ')).digest('hex').slice(0, 12);
  const path = join(imagesDir, `ext4-${sizeBytes}-${opts}.img`);
  if (existsSync(path)) return path;
  let p = formatting.get(path);
  if (!p) {
    p = (async () => {
      await mkdir(imagesDir, { recursive: true, mode: 0o700 });
      const tmp = `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
      try {
        await formatImage(tmp, sizeBytes);
        await rename(tmp, path);
      } finally {
        await rm(tmp, { force: true });
      }
      return path;
    })().finally(() => formatting.delete(path));
    formatting.set(path, p);
  }
  return p;
}

/** A loop device with autoclear, so unmounting frees it (the helper's, or mount(8)'s). */
export async function mountDiskImage(image: string, mountPoint: string, tools?: DiskTools): Promise<void> {
  if (tools) await procOk(tools.helper, ['loop-mount', image, mountPoint]);
  else await procOk('mount', ['-o', 'loop,noatime', image, mountPoint]);
}

export function checkLowerDirs(lowerDirs: string[]): void {
  if (lowerDirs.length === 0) throw new Error('at least one lower layer is required');
  for (const d of lowerDirs) {
    if (!isAbsolute(d) || /[:,\n]/.test(d)) throw new Error(`lower layer path must be absolute without ':' or ',': ${d}`);
    if (!existsSync(d)) throw new Error(`lower layer does not exist: ${d}`);
  }
}

/**
 * Options fixed for every overlay we mount: uppers may later become lowers of other sandboxes (a
 * build step's upper becomes a layer), so nothing kernel-config dependent is written into them
 * (no redirect or metacopy xattrs, no index).
 */
const OVERLAY_FIXED = 'redirect_dir=off,metacopy=off,index=off';

/**
 * With `idmap`, the files of each lower appear owned by `idmap.base` + k instead of their on-disk
 * offset + k (idmapped mounts, through the helper); lowers already at `idmap.base` are used as
 * they are, and when all are, the overlay is mounted directly.
 */
export async function mountOverlay(lowerDirs: string[], upper: string, work: string, target: string, idmap?: IdmappedOverlay): Promise<void> {
  if (idmap) {
    const offsets = await Promise.all(lowerDirs.map((d) => layerIdOffset(d)));
    if (offsets.some((o) => o !== idmap.base)) {
      await mountIdmappedOverlay(lowerDirs, offsets, `upperdir=${upper},workdir=${work},${OVERLAY_FIXED}`, target, idmap);
      return;
    }
  }
  let lower = lowerDirs.join(':');
  let cwd: string | undefined;
  let opts = `lowerdir=${lower},upperdir=${upper},workdir=${work},${OVERLAY_FIXED}`;
  if (opts.length > MAX_MOUNT_DATA) {
    // Long stacks: relative lowerdirs from their common parent keep the options under one page.
    cwd = commonParent(lowerDirs);
    const prefixLen = cwd === '/' ? 1 : cwd.length + 1;
    lower = lowerDirs.map((d) => d.slice(prefixLen)).join(':');
    opts = `lowerdir=${lower},upperdir=${upper},workdir=${work},${OVERLAY_FIXED}`;
    if (opts.length > MAX_MOUNT_DATA) throw new Error(`too many layers (${lowerDirs.length}) for one overlay mount`);
  }
  await procOk('mount', ['-t', 'overlay', 'overlay', '-o', opts, target], { cwd });
}

function commonParent(paths: string[]): string {
  const split = paths.map((p) => p.split('/'));
  const out: string[] = [];
  for (let i = 0; ; i++) {
    const seg = split[0]![i];
    if (seg === undefined || split.some((s) => s[i] !== seg || i >= s.length - 1)) break;
    out.push(seg);
  }
  return out.join('/') || '/';
}

/**
 * Unmounts everything at or under `dir`, deepest first, in one umount(8) call. A mount that stays
 * busy is detached lazily; the caller still never deletes files through a mount (rm
 * --one-file-system), and detaches loop devices separately. The mount table is read once when
 * umount succeeds: with a thousand sandboxes it holds thousands of lines.
 */
export async function unmountAllUnder(dir: string): Promise<void> {
  let points = await mountsUnder(dir);
  if (points.length === 0) return;
  if ((await proc('umount', points)).code === 0) return;
  points = await mountsUnder(dir);
  if (points.length === 0) return;
  await proc('umount', ['-l', ...points]);
  points = await mountsUnder(dir);
  if (points.length > 0) throw new Error(`cannot unmount ${points.join(', ')}`);
}

export async function unmount(target: string): Promise<void> {
  const points = await mountsUnder(target);
  if (points.length > 0) await procOk('umount', points);
}

const LOOP_MAJOR = 7;

async function backingFile(dev: string): Promise<string | undefined> {
  try {
    return (await readFile(`/sys/block/${basename(dev)}/loop/backing_file`, 'utf8')).trim();
  } catch {
    return undefined;
  }
}

const backs = (backing: string | undefined, image: string) => backing === image || backing === `${image} (deleted)`;

/** The loop device of `image` mounted at `mountPoint`, from the mount's st_dev: no search. */
export async function loopDeviceAt(mountPoint: string, image: string): Promise<string | undefined> {
  let dev: bigint;
  try {
    dev = (await stat(mountPoint, { bigint: true })).dev;
  } catch {
    return undefined;
  }
  // glibc's major()/minor() of a dev_t.
  const major = Number(((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn));
  const minor = Number((dev & 0xffn) | ((dev >> 12n) & ~0xffn));
  if (major !== LOOP_MAJOR) return undefined;
  try {
    const name = basename(await readlink(`/sys/dev/block/${major}:${minor}`));
    return backs(await backingFile(name), image) ? `/dev/${name}` : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Frees the loop devices of `image`. With `known` (from loopDeviceAt before the unmount) only that
 * one is looked at: mount's autoclear usually freed it already. Without, every loop device of the
 * host is searched, one read each: only for disks found unmounted (a crash, a half-made disk).
 */
export async function detachLoops(image: string, known?: string): Promise<void> {
  if (known) {
    // The kernel clears an autoclear device after the unmount returns (a work item, later under
    // load): wait for it, so that a destroyed sandbox holds no device, and detach it if it stays.
    for (let i = 0; backs(await backingFile(known), image); i++) {
      if (i === 50) await proc('losetup', ['-d', known]);
      if (i === 250) return; // busy (a process still holds it): the kernel clears it once released
      await sleep(i < 20 ? 2 : 10);
    }
    return;
  }
  for (const dev of await loopDevicesFor(image)) await proc('losetup', ['-d', dev]);
}

/**
 * unmountAllUnder(`dir`) and detachLoops of the disk `image` mounted at `diskMount` below it.
 * `recorded` is the loop device the disk was last seen on (recordLoop), for a disk the host no
 * longer has mounted (detached while its container holds it): that device is waited for, and no
 * other is searched.
 */
export async function unmountDisk(dir: string, image: string, diskMount: string, recorded?: string): Promise<void> {
  const known = (await loopDeviceAt(diskMount, image)) ?? recorded;
  await unmountAllUnder(dir);
  await detachLoops(image, known);
}

/** Whether `dev` is (still) bound to `image`. */
export async function loopBacks(dev: string, image: string): Promise<boolean> {
  return backs(await backingFile(dev), image);
}

/**
 * Waits until the loop device `dev` no longer serves `image`: a container's mount namespace lets its
 * disk go when its last process has exited, and the kernel clears the device a moment later. False
 * if it still does after `timeoutMs`.
 */
export async function waitLoopReleased(dev: string, image: string, timeoutMs: number): Promise<boolean> {
  const end = performance.now() + timeoutMs;
  for (let i = 0; await loopBacks(dev, image); i++) {
    if (performance.now() >= end) return false;
    await sleep(i < 20 ? 2 : 20);
  }
  return true;
}

/**
 * Detaches the mounts at `points` from the host's mount namespace (the helper's `detach`); a
 * container that holds them keeps them until its last process exits.
 */
export async function detachMounts(helper: string, points: string[]): Promise<void> {
  if (points.length > 0) await procOk(helper, ['detach', ...points]);
}

export async function diskUsage(mountPoint: string): Promise<{ usedBytes: number; totalBytes: number }> {
  const s = await statfs(mountPoint);
  return { usedBytes: (s.blocks - s.bfree) * s.bsize, totalBytes: s.blocks * s.bsize };
}

/** Removes a directory tree without ever crossing into a mount that might still be there. */
export async function removeTree(dir: string): Promise<void> {
  if (!existsSync(dir)) return;
  await procOk('rm', ['-rf', '--one-file-system', dir]);
}
