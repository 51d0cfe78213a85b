import { access, constants } from 'node:fs/promises';
import { runTool } from './proc.js';

/** Host tools the runtime and image builder need, and the Debian package providing each. */
export const REQUIRED_TOOLS: Array<{ bin: string; pkg: string }> = [
  { bin: 'crun', pkg: 'crun' },
  { bin: 'catatonit', pkg: 'catatonit' },
  { bin: 'mmdebstrap', pkg: 'mmdebstrap' },
  { bin: 'nft', pkg: 'nftables' },
  { bin: 'ip', pkg: 'iproute2' },
  { bin: 'mkfs.ext4', pkg: 'e2fsprogs' },
  { bin: 'losetup', pkg: 'mount' },
  { bin: 'tar', pkg: 'tar' },
  { bin: 'setfattr', pkg: 'attr' },
  { bin: 'zstd', pkg: 'zstd' },
  { bin: 'unshare', pkg: 'util-linux' },
  // The idmap helper (native/idmap-mount.c) is compiled at setup: gcc and the C library's headers.
  { bin: 'gcc', pkg: 'gcc' },
  { bin: 'gcc', pkg: 'libc6-dev' },
];

const APT_ENV = { DEBIAN_FRONTEND: 'noninteractive' };

const PATH_DIRS = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

async function onPath(bin: string): Promise<boolean> {
  for (const dir of PATH_DIRS) {
    try {
      await access(`${dir}/${bin}`, constants.X_OK);
      return true;
    } catch {
      /* next */
    }
  }
  return false;
}

/** Installs missing host tools with apt (as root), or explains what to install. */
export async function ensureSystemPackages(log: (line: string) => void, tools = REQUIRED_TOOLS): Promise<void> {
  const missing: string[] = [];
  for (const t of tools) if (!(await onPath(t.bin))) missing.push(t.pkg);
  if (missing.length === 0) return;
  const pkgs = [...new Set(missing)];
  if (process.getuid?.() !== 0) {
    throw new Error(`missing system packages: ${pkgs.join(' ')}. Run as root, or install them: apt-get install -y ${pkgs.join(' ')}`);
  }
  log(`installing system packages: ${pkgs.join(' ')}`);
  await runTool('apt-get', ['update', '-q'], { onLine: log, env: APT_ENV });
  await runTool('apt-get', ['install', '-y', '-q', '--no-install-recommends', ...pkgs], { onLine: log, env: APT_ENV });
}
