import { randomBytes } from 'node:crypto';
import { chmod, lchown, mkdir, readdir, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { createDiskImage, mountDiskImage, removeTree, unmountAllUnder, unmountDisk, type DiskTools } from './disk.js';
import { isMountPoint } from './mounts.js';

/** Directories every sandbox disk holds; `.sb/state` is the agent's (kept across stop/start). */
export const UPPER_DIRS = ['.sb', '.sb/state'];

/**
 * Makes `dir`/disk.img (sparse ext4 of `sizeBytes`), mounts it at `dir`/disk and creates upper/,
 * work/ and `dir`/rootfs/. Used for a sandbox directly and for the pool below; the sandbox's ids
 * are set later (prepareUpper), when the disk is given to one. The caller owns cleanup
 * (unmountAllUnder + detachLoops + removeTree of `dir`).
 */
export async function prepareDiskDir(dir: string, sizeBytes: number, tools?: DiskTools): Promise<void> {
  await createDiskImage(join(dir, 'disk.img'), sizeBytes, tools);
  await mkdir(join(dir, 'disk'));
  await mountDiskImage(join(dir, 'disk.img'), join(dir, 'disk'), tools);
  await makeUpperDirs(dir);
  await mkdir(join(dir, 'rootfs'), { recursive: true });
}

async function makeUpperDirs(dir: string): Promise<void> {
  const upper = join(dir, 'disk', 'upper');
  await mkdir(upper, { recursive: true });
  await mkdir(join(dir, 'disk', 'work'), { recursive: true });
  for (const d of UPPER_DIRS) await mkdir(join(upper, d), { recursive: true, mode: 0o755 });
}

/**
 * Gives a mounted disk to the sandbox whose root is host id `base`: upper/ and work/ become its
 * root's (crun, inside the user namespace, makes mount targets in the upper). The disk's root
 * directory stays host root's, closed to everyone else.
 *
 * Everything below upper/ belongs to the sandbox once it has run: a tenant can replace `.sb/state`
 * with a symlink to any host path, and host root must never follow it (a chown through it would
 * hand that host directory to the tenant). So only a `fresh` disk, which no sandbox has touched yet,
 * gets the agent's directories made and given here; on a start the agent, as root inside, makes
 * whatever is missing itself. upper/ and work/ are entries of the disk's root, which the sandbox
 * cannot reach (it sees the overlay, never the disk), and are changed without following links.
 */
export async function prepareUpper(dir: string, base: number, opts: { fresh: boolean }): Promise<void> {
  const disk = join(dir, 'disk');
  if (opts.fresh) await makeUpperDirs(dir);
  await lchown(disk, 0, 0);
  await chmod(disk, 0o700);
  const owned = ['upper', 'work', ...(opts.fresh ? UPPER_DIRS.map((u) => `upper/${u}`) : [])];
  for (const d of owned) await lchown(join(disk, d), base, base);
}

async function discard(dir: string): Promise<void> {
  await unmountDisk(dir, join(dir, 'disk.img'), join(dir, 'disk'));
  await removeTree(dir);
}

/**
 * Disks made ahead of time, mounted and ready: mkfs and the loop mount cost ~10–25 ms, more than
 * half of a create. A create renames a ready entry into place as its sandbox directory (mounts
 * follow a renamed parent directory), then the pool makes a replacement in the background. Only
 * sizes asked for since start are kept, `perSize` of each, for at most `maxSizes` sizes.
 *
 * Layout: `<root>/<bytes>/<rand>/` ready; `<root>/<bytes>/.tmp-<rand>/` being made (removed at load).
 */
export class DiskPool {
  private readonly ready = new Map<number, string[]>();
  private readonly wanted: number[] = [];
  private loaded?: Promise<void>;
  private filling?: Promise<void>;
  private timer?: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly root: string,
    private readonly perSize: number,
    private readonly log: (msg: string) => void,
    private readonly maxSizes = 4,
    private readonly refillDelayMs = 200,
    /** The runtime's own disk tools (see DiskTools); without them, mkfs.ext4 and mount(8). */
    private readonly tools?: () => Promise<DiskTools>,
  ) {}

  private load(): Promise<void> {
    this.loaded ??= (async () => {
      await mkdir(this.root, { recursive: true, mode: 0o711 });
      for (const sizeName of await readdir(this.root)) {
        const size = Number(sizeName);
        const sizeDir = join(this.root, sizeName);
        for (const e of await readdir(sizeDir).catch(() => [] as string[])) {
          const dir = join(sizeDir, e);
          if (Number.isSafeInteger(size) && !e.startsWith('.') && (await isMountPoint(join(dir, 'disk')))) {
            this.list(size).push(dir);
          } else {
            await discard(dir).catch((err: unknown) => this.log(`disk pool: cannot remove ${dir}: ${String(err)}`));
          }
        }
        if (!Number.isSafeInteger(size)) await removeTree(sizeDir);
      }
    })();
    return this.loaded;
  }

  private list(size: number): string[] {
    let l = this.ready.get(size);
    if (!l) this.ready.set(size, (l = []));
    return l;
  }

  /** Moves a ready disk directory to `dest` (which must not exist). False when none is ready. */
  async take(sizeBytes: number, dest: string): Promise<boolean> {
    if (this.perSize <= 0 || this.closed) return false;
    await this.load();
    this.want(sizeBytes);
    const dir = this.list(sizeBytes).shift();
    this.schedule();
    if (!dir) return false;
    try {
      await rename(dir, dest);
      return true;
    } catch (err) {
      this.log(`disk pool: cannot use ${dir}: ${String(err)}`);
      await discard(dir).catch(() => undefined);
      return false;
    }
  }

  private want(size: number): void {
    const i = this.wanted.indexOf(size);
    if (i >= 0) this.wanted.splice(i, 1);
    this.wanted.unshift(size);
    while (this.wanted.length > this.maxSizes) {
      const dropped = this.wanted.pop()!;
      for (const dir of this.ready.get(dropped) ?? []) void discard(dir).catch(() => undefined);
      this.ready.delete(dropped);
    }
  }

  /** Refills a moment after a disk was taken, so the work does not compete with that create. */
  private schedule(): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.filling) this.filling = this.fill().finally(() => (this.filling = undefined));
    }, this.refillDelayMs);
    this.timer.unref();
  }

  private async fill(): Promise<void> {
    for (const size of [...this.wanted]) {
      while (!this.closed && this.wanted.includes(size) && this.list(size).length < this.perSize) {
        const name = randomBytes(6).toString('hex');
        const tmp = join(this.root, String(size), `.tmp-${name}`);
        try {
          await mkdir(tmp, { recursive: true, mode: 0o711 });
          await prepareDiskDir(tmp, size, await this.tools?.());
          const dir = join(this.root, String(size), name);
          await rename(tmp, dir);
          if (this.closed) await discard(dir);
          else this.list(size).push(dir);
        } catch (err) {
          this.log(`disk pool: cannot prepare a disk: ${String(err)}`);
          await discard(tmp).catch(() => undefined);
          return;
        }
      }
    }
  }

  /** Stops refilling and removes every pooled disk. */
  async drain(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.filling;
    await this.load();
    for (const [, dirs] of this.ready) for (const dir of dirs.splice(0)) await discard(dir);
    await unmountAllUnder(this.root);
    await removeTree(this.root);
  }
}
