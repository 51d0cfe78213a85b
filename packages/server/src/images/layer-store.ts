import { createHash, randomBytes } from 'node:crypto';
import { chmod, mkdir, open, readFile, readdir, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { readHostAptConfig, sourcesForSuite } from './apt-sources.js';
import { removeTreeWithMounts, runTool } from '../runtime/proc.js';
import { addDefaultUser } from './default-user.js';
import { lightenLoginShell } from './login-shell.js';
import { NEUTRAL_HOSTNAME, neutralizeHostFiles } from './host-identity.js';
import { shiftOwnership } from '../runtime/shift.js';
import { type DebianRootfsRecipe, type LayerInfo, type LayerStore } from './types.js';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import { harvestDebs, seedArchivesScript } from './apt-cache.js';

/**
 * Bump when the way a rootfs is made changes (post-processing, shifting): old layers stop matching.
 * 2: ids shifted by the new CANONICAL_ID_OFFSET (900000000) instead of 100000.
 * 3: no host identity (hostname, resolv.conf, hosts, mailname) in the image; see host-identity.ts.
 * 4: E2B's unprivileged `user` (uid 1000, /home/user); see default-user.ts.
 * 5: a login shell without needless processes (`id -u`, `mesg n`); see login-shell.ts.
 */
export const ROOTFS_BUILDER_VERSION = 'debian-rootfs/5';

export type Log = (line: string) => void;

/** Written last into a layer directory; its presence (after the atomic rename) marks a finished layer. */
export interface LayerMeta {
  id: string;
  /** What made it: 'debian-rootfs', 'oci-layer', 'step', ... */
  kind: string;
  createdAt: string;
  buildMs: number;
  /** Regular-file bytes in the tree (a lower bound of disk use). */
  sizeBytes: number;
  entries: number;
  [extra: string]: unknown;
}

/** Result of a layer builder: what it wants recorded in meta.json. */
export interface BuiltLayer {
  kind: string;
  sizeBytes: number;
  entries: number;
  extra?: Record<string, unknown>;
}

const ID_RE = /^[0-9a-f]{64}$/;
const TMP_PREFIX = '.tmp-';
/** A file in a layer's directory whose mtime says when a sandbox of this machine last named it. */
const USED_FILE = 'used';
const LOCK_PREFIX = '.lock-';
/**
 * A layers directory may be shared by processes of several machines or pods (control replicas on
 * one volume), whose pids mean nothing here: a lock names its holder's host, a temporary directory
 * a tag of it. A holder of this host is judged by its pid; one of another host by its lock's mtime,
 * which the holder renews every LOCK_RENEW_MS, and its temporary directories only once they are
 * FOREIGN_TMP_STALE_MS old.
 */
const HOST = hostname();
const HOST_TAG = createHash('sha256').update(HOST).digest('hex').slice(0, 8);
const LOCK_RENEW_MS = 30_000;
const FOREIGN_LOCK_STALE_MS = 4 * LOCK_RENEW_MS;
const FOREIGN_TMP_STALE_MS = 6 * 3600_000;

/** sha256 of JSON with object keys sorted at every level, so equal values hash equally. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

export function sha256Hex(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex');
}

/** Package order and duplicates do not change what mmdebstrap installs, so they do not change the key. */
export function rootfsKey(recipe: DebianRootfsRecipe): string {
  const normal = {
    kind: recipe.kind,
    suite: recipe.suite,
    variant: recipe.variant,
    packages: [...new Set(recipe.packages)].sort(),
  };
  return sha256Hex(`${ROOTFS_BUILDER_VERSION}\n${canonicalJson(normal)}`);
}

/**
 * Layers as directories `<root>/<id>/tree` (the overlay lowerdir) with `<root>/<id>/meta.json`.
 * A layer is assembled in `<root>/.tmp-<id>-<pid>-<rand>/` and renamed into place in one step, so
 * `<root>/<id>` exists only when complete. A per-id lock file (holding the builder's pid) keeps two
 * processes sharing a data dir from building the same layer twice; leftovers of dead builders
 * (tmp dirs, locks) are removed by the next build.
 */
export class FsLayerStore implements LayerStore {
  readonly root: string;
  private readonly log: Log;
  private readonly inflight = new Map<string, Promise<LayerInfo>>();

  constructor(root: string, opts: { log?: Log } = {}) {
    this.root = root;
    this.log = opts.log ?? (() => undefined);
  }

  path(id: string): string {
    return join(this.dir(id), 'tree');
  }

  async has(id: string): Promise<boolean> {
    if (!ID_RE.test(id)) return false;
    return stat(join(this.dir(id), 'meta.json')).then(
      () => true,
      () => false,
    );
  }

  async meta(id: string): Promise<LayerMeta | undefined> {
    if (!ID_RE.test(id)) return undefined;
    try {
      return JSON.parse(await readFile(join(this.dir(id), 'meta.json'), 'utf8')) as LayerMeta;
    } catch {
      return undefined;
    }
  }

  info(id: string): LayerInfo {
    return { id, path: this.path(id) };
  }

  ensureRootfs(recipe: DebianRootfsRecipe, log: Log, opts: { signal?: AbortSignal; aptCacheDir?: string } = {}): Promise<LayerInfo> {
    const id = rootfsKey(recipe);
    return this.ensureLayer(id, (tree) => buildDebianRootfs(recipe, tree, log, opts.signal, opts.aptCacheDir), log, opts);
  }

  /**
   * Returns layer `id`, first running `build(tree)` to fill an empty `tree` directory when the layer
   * is missing. Concurrent calls for one id (in this process or another) share one build.
   */
  ensureLayer(
    id: string,
    build: (tree: string) => Promise<BuiltLayer>,
    log: Log,
    opts: { signal?: AbortSignal } = {},
  ): Promise<LayerInfo> {
    if (!ID_RE.test(id)) return Promise.reject(new Error(`invalid layer id: ${id}`));
    const running = this.inflight.get(id);
    if (running) return running;
    const p = this.buildOnce(id, build, log, opts.signal).finally(() => this.inflight.delete(id));
    this.inflight.set(id, p);
    return p;
  }

  async remove(id: string): Promise<void> {
    const doomed = await this.detach(id);
    if (doomed) await removeTreeWithMounts(doomed);
  }

  /**
   * Takes layer `id` out of the store in one rename (a reader finds it whole or not at all) and
   * returns where it went, for the caller to delete (undefined: there was no such layer). What is
   * left there if the caller dies is a leftover that cleanupStale removes.
   */
  async detach(id: string): Promise<string | undefined> {
    if (!ID_RE.test(id)) throw new Error(`invalid layer id: ${id}`);
    // Rename first: a half-deleted tree must never sit under a final id.
    const doomed = join(this.root, `${TMP_PREFIX}${id}-${process.pid}-del-${randomBytes(4).toString('hex')}`);
    try {
      await rename(this.dir(id), doomed);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
    return doomed;
  }

  /** Records that layer `id` was used at `at` (its `used` file's mtime); a missing layer is left alone. */
  async markUsed(id: string, at = new Date()): Promise<void> {
    if (!ID_RE.test(id)) throw new Error(`invalid layer id: ${id}`);
    const file = join(this.dir(id), USED_FILE);
    try {
      await utimes(file, at, at);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      // First use here: made in the layer's own directory, which exists only while the layer does
      // ('wx' never writes through a file another call made meanwhile).
      await writeFile(file, '', { flag: 'wx', mode: 0o600 }).then(
        () => utimes(file, at, at),
        (e: NodeJS.ErrnoException) => {
          if (e.code === 'EEXIST') return utimes(file, at, at);
          if (e.code !== 'ENOENT') throw e;
        },
      );
    }
  }

  /** When layer `id` was last used here (ms since the epoch): its `used` mark, else when it was made. */
  async lastUsedMs(id: string): Promise<number | undefined> {
    if (!ID_RE.test(id)) return undefined;
    for (const f of [USED_FILE, 'meta.json']) {
      const s = await stat(join(this.dir(id), f)).catch(() => undefined);
      if (s) return s.mtimeMs;
    }
    return undefined;
  }

  async list(): Promise<string[]> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    const ids: string[] = [];
    for (const n of names) if (ID_RE.test(n) && (await this.has(n))) ids.push(n);
    return ids.sort();
  }

  /** Removes tmp dirs and locks left by builders that are no longer alive. */
  async cleanupStale(): Promise<void> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    for (const n of names) {
      const m = /^\.tmp-[0-9a-f]{64}-(\d+)(?:-h([0-9a-f]{8}))?/.exec(n) ?? /^\.lock-[0-9a-f]{64}$/.exec(n);
      if (!m) continue;
      if (n.startsWith(LOCK_PREFIX)) {
        if (await this.lockHeld(join(this.root, n))) continue;
      } else if (m[2] !== undefined && m[2] !== HOST_TAG) {
        // Another host's: its pid cannot be asked here; only an old one is a leftover.
        const age = await stat(join(this.root, n)).then((st) => Date.now() - st.mtimeMs, () => 0);
        if (age < FOREIGN_TMP_STALE_MS) continue;
      } else if (pidAlive(Number(m[1]))) continue;
      this.log(`layer store: removing leftover ${n}`);
      if (n.startsWith(TMP_PREFIX)) await removeTreeWithMounts(join(this.root, n));
      else await rm(join(this.root, n), { force: true });
    }
  }

  private dir(id: string): string {
    return join(this.root, id);
  }

  private async buildOnce(
    id: string,
    build: (tree: string) => Promise<BuiltLayer>,
    log: Log,
    signal?: AbortSignal,
  ): Promise<LayerInfo> {
    if (await this.has(id)) return this.info(id);
    // Template layers are tenants' images: only root (which mounts them) may look inside.
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    const unlock = await this.lock(id, signal);
    if (!unlock) return this.info(id); // another process finished it while we waited
    const tmp = join(this.root, `${TMP_PREFIX}${id}-${process.pid}-h${HOST_TAG}-${randomBytes(4).toString('hex')}`);
    try {
      if (await this.has(id)) return this.info(id);
      await this.cleanupStale();
      const started = Date.now();
      await mkdir(join(tmp, 'tree'), { recursive: true });
      const built = await build(join(tmp, 'tree'));
      signal?.throwIfAborted();
      const meta: LayerMeta = {
        ...built.extra,
        id,
        kind: built.kind,
        createdAt: new Date().toISOString(),
        buildMs: Date.now() - started,
        sizeBytes: built.sizeBytes,
        entries: built.entries,
      };
      await writeFile(join(tmp, 'meta.json'), JSON.stringify(meta, null, 2) + '\n');
      await rename(tmp, this.dir(id));
      return this.info(id);
    } finally {
      await removeTreeWithMounts(tmp).catch((err: unknown) => this.log(`layer store: cannot remove ${tmp}: ${String(err)}`));
      await unlock();
    }
  }

  /** Takes the per-id lock; resolves undefined when the layer appeared while waiting. */
  private async lock(id: string, signal?: AbortSignal): Promise<(() => Promise<void>) | undefined> {
    const file = join(this.root, `${LOCK_PREFIX}${id}`);
    for (let waited = false; ; waited = true) {
      signal?.throwIfAborted();
      try {
        const fh = await open(file, 'wx');
        await fh.writeFile(`${process.pid}@${HOST}`);
        await fh.close();
        // Renewed while held: a process of another host judges it by this.
        const renew = setInterval(() => {
          const now = new Date();
          void utimes(file, now, now).catch(() => undefined);
        }, LOCK_RENEW_MS);
        renew.unref();
        return async () => {
          clearInterval(renew);
          const owner = await this.lockOwner(file);
          if (owner?.pid === process.pid && owner.host === HOST) await rm(file, { force: true });
        };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      if (waited && (await this.has(id))) return undefined;
      if (!(await this.lockHeld(file))) {
        await rm(file, { force: true });
        continue;
      }
      if (!waited) this.log(`layer ${id.slice(0, 12)}: another process is building it, waiting`);
      await sleep(500, undefined, { signal });
    }
  }

  /** Who holds a lock: `pid@host` (a bare pid: this host's, as earlier versions wrote it). */
  private async lockOwner(file: string): Promise<{ pid: number; host: string } | undefined> {
    const text = await readFile(file, 'utf8').catch(() => undefined);
    if (text === undefined) return undefined;
    const at = text.indexOf('@');
    const pid = Number(at < 0 ? text : text.slice(0, at));
    // An empty lock file is one being written this instant: treat it as alive.
    if (!Number.isInteger(pid) || pid <= 0) return { pid: process.pid, host: HOST };
    return { pid, host: at < 0 ? HOST : text.slice(at + 1) };
  }

  /** Whether a lock's holder is alive: this host's by its pid, another's by the lock's renewals. */
  private async lockHeld(file: string): Promise<boolean> {
    const owner = await this.lockOwner(file);
    if (!owner) return false;
    if (owner.host === HOST) return pidAlive(owner.pid);
    const age = await stat(file).then((st) => Date.now() - st.mtimeMs, () => Infinity);
    return age < FOREIGN_LOCK_STALE_MS;
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** mmdebstrap into `tree`, then shrink, add the sandbox mount points and shift to canonical ids. */
async function buildDebianRootfs(
  recipe: DebianRootfsRecipe,
  tree: string,
  log: Log,
  signal?: AbortSignal,
  aptCacheDir?: string,
): Promise<BuiltLayer> {
  if (!/^[a-z][a-z0-9-]*$/.test(recipe.suite)) throw new Error(`invalid Debian suite: ${recipe.suite}`);
  const packages = [...new Set(recipe.packages)].sort();
  for (const p of packages) if (!/^[a-z0-9][a-z0-9+.-]*$/.test(p)) throw new Error(`invalid package name: ${p}`);
  const host = await readHostAptConfig();
  const sources = sourcesForSuite(host, recipe.suite);
  if (sources.trim() === '') {
    throw new Error(`no Debian apt source on this host can serve suite '${recipe.suite}' (host sources are read from /etc/apt)`);
  }
  const args = ['--mode=root', `--variant=${recipe.variant}`];
  if (aptCacheDir) {
    // The shared download cache (mmdebstrap's documented way): what it holds is put in the tree's
    // archives before the download (hard links: free), and nothing empties them, so what was
    // downloaded is still there afterwards for harvestDebs to keep.
    await mkdir(aptCacheDir, { recursive: true, mode: 0o755 });
    args.push('--skip=download/empty', '--skip=essential/unlink', '--skip=cleanup/apt/cache', `--setup-hook=${seedArchivesScript(aptCacheDir)}`);
  }
  if (packages.length > 0) args.push(`--include=${packages.join(',')}`);
  args.push(recipe.suite, tree, '-');
  log(`mmdebstrap ${recipe.suite} (${packages.length} extra packages: ${packages.join(' ') || '-'})`);
  // In a UTS namespace of its own, named neutrally: package scripts that record the hostname
  // (an MTA's mailname, a certificate's name) must not record the host's.
  await runTool('unshare', ['--uts', '--', 'sh', '-c', `hostname ${NEUTRAL_HOSTNAME} && exec "$0" "$@"`, 'mmdebstrap', ...args], {
    stdin: sources,
    onLine: (l) => log(`  ${l}`),
    signal,
  });

  // Lists and caches are re-fetched by any step that installs packages; keeping them costs ~40 MB.
  for (const sub of ['var/lib/apt/lists', 'var/cache/apt']) {
    const d = join(tree, sub);
    for (const n of await readdir(d).catch(() => [] as string[])) {
      if (n === 'partial' || n === 'archives') continue;
      await rm(join(d, n), { recursive: true, force: true });
    }
  }
  const archives = join(tree, 'var/cache/apt/archives');
  if (aptCacheDir) await harvestDebs(archives, aptCacheDir, log);
  for (const n of await readdir(archives).catch(() => [] as string[])) {
    if (n.endsWith('.deb')) await rm(join(archives, n), { force: true });
  }
  await mkdir(join(tree, 'workspace'), { recursive: true, mode: 0o755 });
  await mkdir(join(tree, '.sb'), { recursive: true, mode: 0o755 });
  await mkdir(join(tree, 'tmp'), { recursive: true });
  await chmod(join(tree, 'tmp'), 0o1777);
  // mmdebstrap copied the host's hostname and resolv.conf in; an image names no host.
  await neutralizeHostFiles(tree);
  await addDefaultUser(tree);
  const login = await lightenLoginShell(tree);
  log(`login shell: ${Object.entries(login).map(([f, o]) => `${f} ${o}`).join(', ')}`);

  const t = Date.now();
  const shifted = shiftOwnership(tree, CANONICAL_ID_OFFSET);
  log(`shifted ownership of ${shifted.entries} entries by +${CANONICAL_ID_OFFSET} in ${Date.now() - t} ms`);
  return {
    kind: 'debian-rootfs',
    sizeBytes: shifted.bytes,
    entries: shifted.entries,
    extra: { recipe, builderVersion: ROOTFS_BUILDER_VERSION, packages },
  };
}
