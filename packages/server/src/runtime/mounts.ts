import { readFile, readdir, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';

export interface MountEntry {
  /** major:minor of the filesystem. */
  device: string;
  /** The directory of that filesystem at the mount's root (not `/` for a bind mount of a subtree). */
  root: string;
  mountPoint: string;
  fsType: string;
  source: string;
  superOptions: string;
}

function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Our mount namespace's mounts, from /proc/self/mountinfo (the authoritative, unescaped view). */
export async function readMounts(): Promise<MountEntry[]> {
  return parseMountInfo(await readFile('/proc/self/mountinfo', 'utf8'));
}

/** The text of a /proc/<pid>/mountinfo, as entries. */
export function parseMountInfo(text: string): MountEntry[] {
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const [pre, post] = line.split(' - ');
    const fields = pre!.split(' ');
    const postFields = (post ?? '').split(' ');
    out.push({
      device: fields[2] ?? '',
      root: unescape(fields[3] ?? ''),
      mountPoint: unescape(fields[4] ?? ''),
      fsType: postFields[0] ?? '',
      source: unescape(postFields[1] ?? ''),
      superOptions: postFields[2] ?? '',
    });
  }
  return out;
}

/** Mount points at or under `dir`, deepest first (the order to unmount them in). */
export async function mountsUnder(dir: string): Promise<string[]> {
  const abs = resolve(dir);
  const points = (await readMounts())
    .map((m) => m.mountPoint)
    .filter((p) => p === abs || p.startsWith(abs + '/'));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

export async function isMountPoint(path: string): Promise<boolean> {
  const abs = resolve(path);
  return (await readMounts()).some((m) => m.mountPoint === abs);
}

/**
 * Whether `path` is the root of a filesystem other than its parent directory's (a disk image or an
 * overlay mounted there), from two stat calls: the mount table grows with every sandbox, so
 * reading it per sandbox makes a per-sandbox query O(n). Blind to a bind mount within one
 * filesystem, which is not what it is asked about.
 */
export async function hasOwnFilesystem(path: string): Promise<boolean> {
  const abs = resolve(path);
  try {
    const [self, parent] = await Promise.all([stat(abs), stat(dirname(abs))]);
    return self.dev !== parent.dev;
  } catch {
    return false;
  }
}

/** Loop devices (e.g. /dev/loop3) whose backing file is `file` (the kernel appends " (deleted)" once unlinked). */
export async function loopDevicesFor(file: string): Promise<string[]> {
  const abs = resolve(file);
  let names: string[];
  try {
    names = await readdir('/sys/block');
  } catch {
    return [];
  }
  const out: string[] = [];
  await Promise.all(
    names
      .filter((n) => n.startsWith('loop'))
      .map(async (n) => {
        try {
          const backing = (await readFile(`/sys/block/${n}/loop/backing_file`, 'utf8')).trim();
          if (backing === abs || backing === `${abs} (deleted)`) out.push(`/dev/${n}`);
        } catch {
          /* not bound */
        }
      }),
  );
  return out.sort();
}
