import { randomBytes } from 'node:crypto';
import { constants, copyFile, link, lstat, mkdir, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * One download cache of Debian packages for every build of this data directory (the base rootfs,
 * the built-ins' layers, images bootstrapped from Debian): a flat directory of `.deb` files as apt
 * names them in /var/cache/apt/archives. Never part of a layer: builds are seeded from it and
 * leave what they downloaded in it, and the layer keeps none of it. apt checks every file's hash
 * against its index before it uses one, so a stale or foreign file costs a download, never an
 * image.
 */

type Log = (line: string) => void;

const DEB_NAME = /^[A-Za-z0-9][A-Za-z0-9+.~%_-]*\.deb$/;

/** A mmdebstrap setup hook (`sh -c SCRIPT exec ROOT`) that hard-links the cache into the tree's archives. */
export function seedArchivesScript(cacheDir: string): string {
  if (!/^\/[A-Za-z0-9/._+-]*$/.test(cacheDir)) throw new Error(`unusable apt cache directory: ${cacheDir}`);
  return [
    'a="$1/var/cache/apt/archives"',
    'mkdir -p "$a/partial"',
    `for f in ${cacheDir}/*.deb; do [ -f "$f" ] || continue; ln -f "$f" "$a/" 2>/dev/null || cp -f "$f" "$a/"; done`,
    'true',
  ].join('; ');
}

/**
 * The lines of a build step's script that copy from the cache (bind-mounted read-only at `mount`)
 * what `apt-get install` of the script's arguments will fetch: only those, so a big cache costs a
 * step nothing. Run after `apt-get update`.
 */
export function seedStepScript(mount: string): string {
  return [
    `apt-get -qq --print-uris --no-install-recommends install "$@" | while read -r uri file rest; do`,
    `  if [ -f "${mount}/$file" ]; then cp "${mount}/$file" /var/cache/apt/archives/; fi`,
    'done',
  ].join('\n');
}

/**
 * Moves into the cache the packages a build left in `archives` that the cache lacks (a hard link
 * where both are on one filesystem, else a copy), each placed under its final name in one rename so
 * that a concurrent build never sees half a file. The build removes its own copies afterwards.
 */
export async function harvestDebs(archives: string, cacheDir: string, log: Log): Promise<{ added: number; bytes: number }> {
  let added = 0;
  let bytes = 0;
  await mkdir(cacheDir, { recursive: true, mode: 0o755 });
  const have = new Set(await readdir(cacheDir).catch(() => [] as string[]));
  for (const name of await readdir(archives).catch(() => [] as string[])) {
    if (!DEB_NAME.test(name) || have.has(name)) continue;
    const src = join(archives, name);
    const st = await lstat(src).catch(() => undefined);
    if (!st?.isFile()) continue;
    const tmp = join(cacheDir, `.tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
    try {
      await link(src, tmp).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EXDEV' && err.code !== 'EPERM') throw err;
        return copyFile(src, tmp, constants.COPYFILE_FICLONE);
      });
      await rename(tmp, join(cacheDir, name));
      added++;
      bytes += st.size;
    } catch (err) {
      await rm(tmp, { force: true });
      log(`apt cache: cannot keep ${name}: ${String(err)}`);
    }
  }
  if (added > 0) log(`apt cache: kept ${added} downloaded package(s), ${(bytes / 1e6).toFixed(1)} MB`);
  return { added, bytes };
}
