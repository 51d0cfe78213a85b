import { stat, statfs } from 'node:fs/promises';
import { sandboxPaths } from './sandbox-paths.js';

/** What the data directory's filesystem holds and what its sparse disks may still take. */
export interface DiskSpace {
  totalBytes: number;
  /** Free for an unprivileged writer (f_bavail): what the daemon's files can still grow into. */
  availBytes: number;
  /**
   * What the given sandboxes' sparse disk images may still grow by: their size less the blocks
   * they have. Free space that is promised to them.
   */
  promisedBytes: number;
  /** Blocks allocated to those images: what the sandboxes' disks hold now. */
  heldBytes: number;
  disks: number;
}

/** One image's size and allocated blocks (a directory without one: nothing). */
export async function imageUse(path: string): Promise<{ sizeBytes: number; heldBytes: number } | undefined> {
  try {
    const s = await stat(path);
    if (!s.isFile()) return undefined;
    return { sizeBytes: s.size, heldBytes: s.blocks * 512 };
  } catch {
    return undefined;
  }
}

/**
 * Reads the filesystem of `dataDir` (statfs) and the disk images of `sandboxIds` (the sandboxes
 * that own a disk: a warm pool's, not yet handed to anyone, cannot grow, and are not counted). One
 * stat per disk: a thousand sandboxes cost a few milliseconds, read at most once a second
 * (services/disk-room.ts keeps a reading).
 */
export async function readDiskSpace(dataDir: string, sandboxIds: string[] = [], overcommit = 1, otherImages: string[] = []): Promise<DiskSpace> {
  // otherImages: sparse images beside the sandboxes' that may grow too (volumes: runtime/volumes.ts).
  const paths = [...sandboxIds.map((id) => sandboxPaths(dataDir, id).image), ...otherImages];
  const [fs, uses] = await Promise.all([statfs(dataDir), Promise.all(paths.map((p) => imageUse(p)))]);
  let promisedBytes = 0;
  let heldBytes = 0;
  let disks = 0;
  for (const u of uses) {
    if (!u) continue;
    disks++;
    heldBytes += u.heldBytes;
    // Thin provisioning (overcommit > 1): a disk is promised its share of its size, less what it holds.
    promisedBytes += Math.max(0, u.sizeBytes / overcommit - u.heldBytes);
  }
  return { totalBytes: fs.blocks * fs.bsize, availBytes: fs.bavail * fs.bsize, promisedBytes, heldBytes, disks };
}
