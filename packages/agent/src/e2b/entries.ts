import type { Stats } from 'node:fs';
import { lstat, readdir, readlink, realpath } from 'node:fs/promises';
import { basename } from 'node:path';
import { fsError } from '../files/errors.js';
import { permissionString } from '../files/ops.js';
import { ServiceError } from '../proto.js';
import type { SandboxUsers } from './users.js';
import type { EnvdEntry } from '../proto.js';

/** A file's entry as the /e2b/rt/fs routes answer it (the gateway makes E2B's EntryInfo of it). */
export type Entry = EnvdEntry;

/** Entries one ListDir answers at most (a deep listing of / is refused, not built in memory). */
export const MAX_LIST_ENTRIES = 100_000;

function typeOf(st: Stats): Entry['type'] {
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isDirectory()) return 'dir';
  return 'file';
}

/** The entry of `path` (not following a last symlink: it is reported with its target). */
export async function entryInfo(path: string, users: SandboxUsers, st?: Stats): Promise<Entry> {
  let s = st;
  if (!s) {
    try {
      s = await lstat(path);
    } catch (err) {
      throw fsError(err, path);
    }
  }
  let symlinkTarget: string | undefined;
  if (s.isSymbolicLink()) symlinkTarget = await realpath(path).catch(() => readlink(path).catch(() => ''));
  return {
    name: path === '/' ? '/' : basename(path),
    type: typeOf(s),
    path,
    size: s.isDirectory() ? 0 : s.size,
    mode: s.mode & 0o7777,
    permissions: permissionString(s),
    owner: users.userName(s.uid),
    group: users.groupName(s.gid),
    mtime_ms: Math.floor(s.mtimeMs),
    ...(symlinkTarget !== undefined ? { symlink_target: symlinkTarget } : {}),
  };
}

/** The entries below `dir` down to `depth` levels (1: its children), directories not followed through symlinks. */
export async function listEntries(dir: string, depth: number, users: SandboxUsers): Promise<Entry[]> {
  const out: Entry[] = [];
  const walk = async (d: string, level: number): Promise<void> => {
    let names: string[];
    try {
      names = await readdir(d);
    } catch (err) {
      if (level === 1) throw fsError(err, d);
      return; // a subdirectory we may not read, or one removed meanwhile
    }
    names.sort();
    for (const name of names) {
      const full = d === '/' ? `/${name}` : `${d}/${name}`;
      const st = await lstat(full).catch(() => null);
      if (!st) continue;
      if (out.length >= MAX_LIST_ENTRIES) {
        throw new ServiceError('LIMIT_EXCEEDED', `more than ${MAX_LIST_ENTRIES} entries below ${dir}; list with a smaller depth`, { path: dir });
      }
      out.push(await entryInfo(full, users, st));
      if (st.isDirectory() && level < depth) await walk(full, level + 1);
    }
  };
  await walk(dir, 1);
  return out;
}
