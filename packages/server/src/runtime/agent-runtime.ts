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
  return [`${NODE_MOUNT}/lib/${rt.loader}`, '--library-path', `${NODE_MOUNT}/lib`, `${NODE_MOUNT}/bin/node`, `--openssl-config=${OPENSSL_CONFIG}`, script];
}

/**
 * The agent's argv behind its first responder (sbx-first, shipped beside the bundle, see
 * packages/agent/native/sbx-first.c) when the bundle has one: it answers the daemon's boot probe
 * while Node starts and execs Node in its own process. Execute-only like the loader, and for the
 * same reason: it holds the agent's listening socket.
 */
export function agentArgv(node: string[], bundleDir: string): string[] {
  return existsSync(join(bundleDir, FIRST_RESPONDER)) ? [`/.sb/agent/${FIRST_RESPONDER}`, ...node] : node;
}
export const FIRST_RESPONDER = 'sbx-first';

/**
 * Node reads OpenSSL's configuration at start (section `nodejs_conf` of OPENSSLDIR/openssl.cnf,
 * /etc/ssl/openssl.cnf: the sandbox's own file), and a configuration can load provider and engine
 * modules, i.e. shared libraries by absolute path: root in a sandbox that wrote one had its code run
 * in the agent at the next start. The agent reads this empty file of the runtime directory instead.
 */
export const OPENSSL_CONFIG = `${NODE_MOUNT}/openssl.cnf`;
const OPENSSL_CONFIG_TEXT = '# sandboxd: the agent loads no OpenSSL configuration from the sandbox (see agent-runtime.ts)\n';

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

/**
 * Files and directories that glibc's dynamic loader reads by absolute path. Inside a sandbox they
 * are the sandbox's own, which root there writes: `/etc/ld.so.preload` names libraries to load into
 * every program, the agent included (its next start ran the tenant's code with the agent's socket
 * in hand), and when libc dlopens by name (NSS modules for a service named in the sandbox's
 * /etc/nsswitch.conf, looked up during a callback's name resolution) the loader searches
 * `/etc/ld.so.cache` and the system directories, both the sandbox's. Our copy of the loader gets
 * these strings replaced, at the same length, by paths that hold nothing and that no sandbox can
 * write: the agent loads only what is in /.sb/node/lib (read-only, from the host).
 */
const PRELOAD_FILE = '/etc/ld.so.preload';
const CACHE_FILE = '/etc/ld.so.cache';
/** NUL-separated runs of system library directories ("/lib/x86_64-linux-gnu/\0/usr/lib/\0..."). */
const SYSTEM_DIRS_RE = /(?:\/(?:usr\/)?lib(?:64|x?32)?\/(?:[a-z0-9_]+-linux-gnu[a-z0-9_]*\/)?\0){2,}/g;

/** A same-length path in the runtime's own read-only directory (or read-only /sys) that holds nothing. */
function emptyDir(length: number): string {
  const own = `${NODE_MOUNT}/lib/`;
  return length >= own.length ? own + '/'.repeat(length - own.length) : `/sys/${'/'.repeat(length - 5)}`;
}
function missingFile(length: number): string {
  return `${NODE_MOUNT}/${'-'.repeat(length - NODE_MOUNT.length - 1)}`;
}

/**
 * The loader image with every path a sandbox could write replaced (see PRELOAD_FILE); `changed` is
 * false when it was replaced before. Throws for a loader whose layout is not the one expected, so
 * the daemon never runs agents through a loader that still reads the sandbox's files.
 */
export function hardenLoader(image: Buffer): { image: Buffer; changed: boolean } {
  const text = image.toString('latin1');
  const preload = `${PRELOAD_FILE}\0`;
  if (!text.includes(preload)) {
    if (text.includes(`${missingFile(PRELOAD_FILE.length)}\0`)) return { image, changed: false };
    throw new Error(`the dynamic loader has no ${PRELOAD_FILE}: cannot make the agent ignore the sandbox's loader files (unsupported libc?)`);
  }
  let out = text.split(preload).join(`${missingFile(PRELOAD_FILE.length)}\0`);
  out = out.split(`${CACHE_FILE}\0`).join(`${missingFile(CACHE_FILE.length)}\0`);
  let blocks = 0;
  out = out.replace(SYSTEM_DIRS_RE, (block) => {
    blocks++;
    return block
      .split('\0')
      .map((dir) => (dir ? emptyDir(dir.length) : dir))
      .join('\0');
  });
  if (blocks === 0) throw new Error('the dynamic loader names no system library directories: cannot make the agent ignore the sandbox\'s libraries (unsupported libc?)');
  const result = Buffer.from(out, 'latin1');
  if (result.length !== image.length) throw new Error('hardening the dynamic loader changed its size');
  return { image: result, changed: true };
}

/** Writes the hardened loader over `path` (a new inode: running agents keep the one they mapped). */
async function hardenLoaderFile(path: string): Promise<void> {
  const { image, changed } = hardenLoader(await readFile(path));
  if (changed) {
    const tmp = `${path}.tmp-${process.pid}`;
    await writeFile(tmp, image, { mode: LOADER_MODE });
    await chmod(tmp, LOADER_MODE);
    await rename(tmp, path);
  }
  await chmod(path, LOADER_MODE);
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
    // Directories made before the loader became execute-only and ignored the sandbox's loader
    // files get both now, and the agent's own OpenSSL configuration.
    await hardenLoaderFile(join(dir, 'lib', loader));
    if (!existsSync(join(dir, 'openssl.cnf'))) await writeFile(join(dir, 'openssl.cnf'), OPENSSL_CONFIG_TEXT, { mode: 0o644 });
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
    await hardenLoaderFile(join(tmp, 'lib', loader));
    await writeFile(join(tmp, 'openssl.cnf'), OPENSSL_CONFIG_TEXT, { mode: 0o644 });
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
