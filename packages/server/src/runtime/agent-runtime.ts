import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, readFile, realpath, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { procOk } from './proc.js';

/** Where the agent runtime appears inside every sandbox. */
export const NODE_MOUNT = '/.sb/node';

export interface AgentRuntime {
  /** Host directory holding bin/node and lib/ (node's shared libraries and the dynamic loader). */
  dir: string;
  /** File name of the dynamic loader in lib/, e.g. ld-linux-x86-64.so.2. */
  loader: string;
}

/**
 * argv that starts node from the runtime directory inside a sandbox: through our own copy of the
 * dynamic loader and libraries, so it runs on any glibc-based (or libc-less) image.
 *
 * The loader is execute-only (LOADER_MODE) and owned by host root, whom the sandbox's user
 * namespace does not map: root inside cannot read it, so the kernel makes a process that execs it
 * non-dumpable (fs.suid_dumpable 0 or 2) and ties its memory to the host's user namespace. User code,
 * root in the same namespace, then gets EPERM from every ptrace-mode access to the agent (ptrace,
 * pidfd_getfd, process_vm_readv, /proc/<agent>/fd, mem, environ): it cannot take the agent's
 * listening socket, read its memory or speak as it.
 */
export function nodeArgv(rt: AgentRuntime, script: string): string[] {
  return [`${NODE_MOUNT}/lib/${rt.loader}`, '--library-path', `${NODE_MOUNT}/lib`, `${NODE_MOUNT}/bin/node`, script];
}

/** rwx--x--x: runnable by anyone, readable by host root only (see nodeArgv). */
export const LOADER_MODE = 0o711;

/**
 * Processes that exec an unreadable file stay dumpable when fs.suid_dumpable is 1 ("debug"); then
 * code in a sandbox could ptrace its agent. 0 (the default) and 2 keep the agent out of reach.
 */
export async function checkSuidDumpable(read: () => Promise<string> = () => readFile('/proc/sys/fs/suid_dumpable', 'utf8')): Promise<void> {
  const v = (await read()).trim();
  if (v === '1') {
    throw new Error(
      'fs.suid_dumpable is 1 (debug): code in a sandbox could then ptrace its agent and take its socket; set it to 0 (sysctl -w fs.suid_dumpable=0) and start again',
    );
  }
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** `ldd` output → (name inside lib/, host file) pairs, plus the loader's name. */
export function parseLdd(text: string): { libs: Array<{ name: string; path: string }>; loader: string } {
  const libs: Array<{ name: string; path: string }> = [];
  let loader = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    let m = /^(\S+) => (\/\S+) \(0x[0-9a-f]+\)$/.exec(line);
    if (m) {
      libs.push({ name: m[1]!, path: m[2]! });
      continue;
    }
    m = /^(\/\S+) \(0x[0-9a-f]+\)$/.exec(line);
    if (m) {
      loader = basename(m[1]!);
      libs.push({ name: loader, path: m[1]! });
    }
  }
  if (!loader) throw new Error('ldd did not name a dynamic loader (is node statically linked?)');
  return { libs, loader };
}

/**
 * Prepares `${dataDir}/agent-runtime/<sha256 of node>/` once: a copy of the host's node and of the
 * libraries ldd lists. Every sandbox binds the same files, so the page cache shares node's text
 * between them. Keyed by content so a node upgrade on the host gets a new directory while running
 * sandboxes keep theirs. A stat-keyed index avoids hashing ~100 MB on every daemon start.
 */
export async function ensureAgentRuntime(dataDir: string, nodePath = '/usr/bin/node'): Promise<AgentRuntime> {
  const base = join(dataDir, 'agent-runtime');
  await mkdir(join(base, 'index'), { recursive: true });
  const real = await realpath(nodePath);
  const st = await stat(real);
  const indexFile = join(base, 'index', `${st.dev}-${st.ino}-${st.size}-${Math.floor(st.mtimeMs)}`);
  let hash = existsSync(indexFile) ? (await readFile(indexFile, 'utf8')).trim() : '';
  if (!/^[0-9a-f]{64}$/.test(hash)) {
    hash = await sha256File(real);
    await writeFile(indexFile, hash);
  }
  const dir = join(base, hash);
  const readyFile = join(dir, 'ready.json');
  if (existsSync(readyFile)) {
    const { loader } = JSON.parse(await readFile(readyFile, 'utf8')) as { loader: string };
    // Directories made before the loader became execute-only get the mode now.
    await chmod(join(dir, 'lib', loader), LOADER_MODE);
    return { dir, loader };
  }

  const tmp = `${dir}.tmp-${process.pid}-${Date.now()}`;
  try {
    await mkdir(join(tmp, 'bin'), { recursive: true });
    await mkdir(join(tmp, 'lib'));
    await copyFile(real, join(tmp, 'bin', 'node'));
    await chmod(join(tmp, 'bin', 'node'), 0o755);
    const { libs, loader } = parseLdd(await procOk('ldd', [real]));
    for (const lib of libs) {
      const dst = join(tmp, 'lib', lib.name);
      await copyFile(await realpath(lib.path), dst);
      await chmod(dst, lib.name === loader ? LOADER_MODE : 0o755);
    }
    await chmod(tmp, 0o755);
    await writeFile(join(tmp, 'ready.json'), JSON.stringify({ loader, node: real, sha256: hash }));
    try {
      await rename(tmp, dir);
    } catch (err) {
      // Another process finished first; theirs is identical.
      if (!existsSync(readyFile)) throw err;
    }
    return { dir, loader };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}
