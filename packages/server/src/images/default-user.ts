import { chmod, chown, copyFile, lstat, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The unprivileged user every built-in template has, as E2B's images do: code written for E2B runs
 * commands and writes files as `user` (home /home/user) unless it asks for root.
 */
export const DEFAULT_USER = { name: 'user', uid: 1000, gid: 1000, home: '/home/user', shell: '/bin/bash' } as const;

async function appendLine(file: string, name: string, line: string): Promise<void> {
  const text = await readFile(file, 'utf8').catch(() => null);
  if (text === null) return;
  if (text.split('\n').some((l) => l.startsWith(`${name}:`))) return;
  await writeFile(file, `${text}${text === '' || text.endsWith('\n') ? '' : '\n'}${line}\n`);
}

/**
 * Adds the default user to a freshly bootstrapped rootfs at `tree` (ids as inside the sandbox,
 * before the tree is shifted): its passwd, group and shadow entries, and its home from /etc/skel.
 * Written as useradd would, without running anything from the tree on the host.
 */
export async function addDefaultUser(tree: string): Promise<void> {
  const u = DEFAULT_USER;
  const etc = join(tree, 'etc');
  await appendLine(join(etc, 'group'), u.name, `${u.name}:x:${u.gid}:`);
  await appendLine(join(etc, 'gshadow'), u.name, `${u.name}:!::`);
  await appendLine(join(etc, 'passwd'), u.name, `${u.name}:x:${u.uid}:${u.gid}::${u.home}:${u.shell}`);
  // A locked password, no expiry: a user to run as, not to log in as.
  await appendLine(join(etc, 'shadow'), u.name, `${u.name}:!:${Math.floor(Date.UTC(2024, 0, 1) / 86_400_000)}:0:99999:7:::`);
  const home = join(tree, u.home);
  await mkdir(home, { recursive: true });
  await chmod(home, 0o750);
  await chown(home, u.uid, u.gid);
  const skel = join(etc, 'skel');
  for (const name of await readdir(skel).catch(() => [] as string[])) {
    const st = await lstat(join(skel, name));
    if (!st.isFile()) continue;
    await copyFile(join(skel, name), join(home, name));
    await chmod(join(home, name), st.mode & 0o777);
    await chown(join(home, name), u.uid, u.gid);
  }
}
