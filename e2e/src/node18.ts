import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { TEST_DATA_DIR } from './harness.js';

const run = promisify(execFile);

/**
 * Debian 12's own Node 18 (the SDK's oldest supported Node), unpacked from its packages with
 * `apt-get download` + `dpkg -x` into the test data dir, keyed by version: nothing is installed
 * and the host's Node is not touched. That build loads some of its built-in modules from
 * /usr/share/nodejs, so `node18Command` runs it in a private mount namespace where a read-only
 * overlay adds the unpacked /usr/share to the host's.
 */
export async function ensureNode18(): Promise<{ root: string; version: string }> {
  const { stdout } = await run('apt-cache', ['madison', 'nodejs']);
  const version = stdout
    .split('\n')
    .map((l) => l.split('|')[1]?.trim())
    .find((v) => v?.startsWith('18.'));
  if (!version) throw new Error(`Debian's package lists offer no nodejs 18 (apt-cache madison nodejs: ${stdout.trim() || 'nothing'})`);
  const root = join(TEST_DATA_DIR, 'node18', version.replace(/[^0-9A-Za-z.+~-]/g, '_'));
  if (existsSync(join(root, 'usr/bin/node'))) return { root, version };

  await mkdir(join(TEST_DATA_DIR, 'node18'), { recursive: true });
  const work = await mkdtemp(join(TEST_DATA_DIR, 'node18', '.fetch-'));
  try {
    // libnode108's dependencies that a host with another Node may lack, and the modules Debian's
    // Node takes from /usr/share/nodejs instead of carrying them.
    const pkgs = [`nodejs=${version}`, `libnode108=${version}`, 'libc-ares2', 'node-undici', 'node-acorn', 'node-cjs-module-lexer'];
    await run('apt-get', ['download', ...pkgs], { cwd: work });
    const unpacked = join(work, 'root');
    for (const deb of (await readdir(work)).filter((f) => f.endsWith('.deb'))) await run('dpkg', ['-x', join(work, deb), unpacked]);
    await writeFile(join(unpacked, 'VERSION'), `${version}\n`);
    await rename(unpacked, root);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return { root, version };
}

/** argv that runs `script` with the unpacked Node 18 (see ensureNode18). */
export function node18Command(root: string, script: string): string[] {
  const libs = join(root, 'usr/lib/x86_64-linux-gnu');
  const inner = [
    `mount -t overlay sbx-node18 -o ro,lowerdir=${join(root, 'usr/share')}:/usr/share /usr/share`,
    `exec env LD_LIBRARY_PATH=${libs} ${join(root, 'usr/bin/node')} ${script}`,
  ].join(' && ');
  return ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', inner];
}
