import { chmod, lstat } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * What in the data directory carries secrets or tenant data (env_vars, key hashes, signing keys,
 * build logs, uploaded files, image content), and so must be root's alone. Each owner creates its
 * files with these modes; `secureDataDir` fixes installations made before, at every start.
 */
export const PRIVATE_FILES = ['sandboxd.db', 'sandboxd.db-wal', 'sandboxd.db-shm', 'sandboxd.db-journal', 'api-key'];
/** Directories closed to everyone but root (0700): nothing below them is reachable by others. */
export const PRIVATE_DIRS = ['keys', 'build-logs', 'blobs', 'build-cache', 'build-inputs', 'images', 'tmp', 'bin'];

export interface ModeFix {
  path: string;
  from: number;
  to: number;
}

/**
 * Takes group and other permissions off the private files and directories of `dataDir` and off
 * the layer store's root (template layers are tenants' images). The data directory itself keeps
 * o+x and loses only read and write for group and others: crun, in a sandbox's user namespace,
 * walks through it to the sandbox's own directory (see CrunRuntime's ensureTraversable), and a
 * sandbox's own directory keeps every other host user out. Returns what it changed.
 */
export async function secureDataDir(dataDir: string, layersDir: string): Promise<ModeFix[]> {
  const fixes: ModeFix[] = [];
  const restrict = async (path: string, keep: number) => {
    const st = await lstat(path).catch(() => undefined);
    // A symlink is never followed: a mode is fixed only on what the name itself is.
    if (!st || st.isSymbolicLink()) return;
    const from = st.mode & 0o7777;
    const to = from & keep;
    if (to === from) return;
    await chmod(path, to);
    fixes.push({ path, from, to });
  };
  await restrict(dataDir, ~0o066);
  for (const f of PRIVATE_FILES) await restrict(join(dataDir, f), 0o700);
  for (const d of PRIVATE_DIRS) await restrict(join(dataDir, d), 0o700);
  await restrict(layersDir, 0o700);
  return fixes;
}
