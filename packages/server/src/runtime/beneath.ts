import type { Stats } from 'node:fs';
import { lstat, rmdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Host-side file operations inside a tree a sandbox or build step wrote (an upper directory). Any
 * name in such a tree may be a symlink the tenant made pointing at a host path, and host root must
 * never follow one: these helpers lstat every component below `root` and refuse a path that
 * passes through a symlink (or anything but a directory).
 *
 * They are safe only while nothing in the tree can change: use them after the container that
 * wrote it is gone (nothing else writes an upper), never on a running sandbox's disk.
 */
export async function lstatBeneath(root: string, rel: string): Promise<Stats | undefined> {
  const parts = rel.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.some((p) => p === '..')) return undefined;
  let path = root;
  for (let i = 0; i < parts.length; i++) {
    path = join(path, parts[i]!);
    const st = await lstat(path).catch(() => undefined);
    if (!st) return undefined;
    if (i < parts.length - 1 && !st.isDirectory()) return undefined;
    if (i === parts.length - 1) return st;
  }
  return lstat(root).catch(() => undefined);
}

/** Removes root/rel if it is an empty directory reached without symlinks; false otherwise. */
export async function rmdirBeneath(root: string, rel: string): Promise<boolean> {
  const st = await lstatBeneath(root, rel);
  if (!st?.isDirectory()) return false;
  return rmdir(join(root, rel)).then(
    () => true,
    () => false,
  );
}

/** Removes root/rel if it is an empty regular file reached without symlinks; false otherwise. */
export async function unlinkEmptyFileBeneath(root: string, rel: string): Promise<boolean> {
  const st = await lstatBeneath(root, rel);
  if (!st?.isFile() || st.size !== 0) return false;
  return unlink(join(root, rel)).then(
    () => true,
    () => false,
  );
}
