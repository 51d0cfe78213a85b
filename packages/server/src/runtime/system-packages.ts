import { spawn } from 'node:child_process';
import { access, constants } from 'node:fs/promises';

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

function run(cmd: string, args: string[], log: (line: string) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    const relay = (buf: Buffer) => {
      for (const line of buf.toString('utf8').split('\n')) if (line.trim()) log(line.trimEnd());
    };
    child.stdout.on('data', relay);
    child.stderr.on('data', relay);
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}`))));
  });
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
  await run('apt-get', ['update', '-q'], log);
  await run('apt-get', ['install', '-y', '-q', '--no-install-recommends', ...pkgs], log);
}
