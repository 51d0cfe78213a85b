import { readFile, readdir } from 'node:fs/promises';
import { resolve } from 'node:path';

export interface MountEntry {
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
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const [pre, post] = line.split(' - ');
    const fields = pre!.split(' ');
    const postFields = (post ?? '').split(' ');
    out.push({
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
