import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { runTool } from '../runtime/proc.js';
import type { Runtime } from '../runtime/types.js';
import { harvestDebs, seedStepScript } from './apt-cache.js';
import type { BuiltinTemplate } from './builtin.js';
import { canonicalJson, rootfsKey, sha256Hex, type FsLayerStore, type Log } from './layer-store.js';
import type { LayerInfo } from './types.js';

/**
 * Bump when the way a built-in's upper layer is made changes (its script, the container it runs
 * in): those layers stop matching and are built again; the base rootfs keeps its own version.
 */
export const BUILTIN_LAYER_VERSION = 'builtin-apt/1';

/** Where the shared package cache is mounted (read-only) in a layer's build container. */
const CACHE_MOUNT = '/.sb/apt-cache';
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** The id of a layer of `packages` over the layer `parentId`: its recipe, hashed. Order and duplicates do not count. */
export function aptLayerKey(parentId: string, packages: string[]): string {
  if (!/^[0-9a-f]{64}$/.test(parentId)) throw new Error(`invalid parent layer id: ${parentId}`);
  return sha256Hex(`${BUILTIN_LAYER_VERSION}\n${parentId}\n${canonicalJson([...new Set(packages)].sort())}`);
}

/**
 * Each built-in's own layer id, computed from the recipes alone (no I/O): `base` is its rootfs
 * key; every other is its packages over its parent's layer id. `templates` must hold the parents.
 */
export function builtinLayerIds(templates: BuiltinTemplate[]): Map<string, string> {
  const byName = new Map(templates.map((t) => [t.name, t]));
  const ids = new Map<string, string>();
  const idOf = (t: BuiltinTemplate): string => {
    const known = ids.get(t.name);
    if (known) return known;
    let id: string;
    if (!t.parent) id = rootfsKey(t.recipe);
    else {
      const parent = byName.get(t.parent);
      if (!parent) throw new Error(`built-in template ${t.name} needs ${t.parent}`);
      id = aptLayerKey(idOf(parent), t.recipe.packages);
    }
    ids.set(t.name, id);
    return id;
  };
  for (const t of templates) idOf(t);
  return ids;
}

/** A built-in's stack of own layers, top-most first (its layer, its parent's, ..., base's). */
export function builtinStackIds(templates: BuiltinTemplate[], name: string): string[] {
  const ids = builtinLayerIds(templates);
  const byName = new Map(templates.map((t) => [t.name, t]));
  const out: string[] = [];
  for (let t = byName.get(name); t; t = t.parent ? byName.get(t.parent) : undefined) out.push(ids.get(t.name)!);
  return out;
}

const STEP_SCRIPT = (mount: string) => `set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
${seedStepScript(mount)}
apt-get install -y -q --no-install-recommends "$@"
rm -f /var/cache/apt/*.bin
find /var/lib/apt/lists -maxdepth 1 -type f ! -name lock -delete`;

export interface AptLayerBuild {
  store: FsLayerStore;
  /** Runs the install in a throwaway build container (the template builder's step). */
  runtime: Pick<Runtime, 'runStep'>;
  /** The shared package cache; its new downloads are kept there, never in the layer. */
  aptCacheDir: string;
  log: Log;
  signal?: AbortSignal;
}

/**
 * The layer `id` of `packages` installed (apt, no recommends: what mmdebstrap's --include does)
 * over `lowers` (top-most first), built in a build container as a template's APT step is: the
 * step's overlay upper becomes the layer, so its files are already in canonical ownership and its
 * deletions are overlay whiteouts.
 */
export function ensureAptLayer(b: AptLayerBuild, id: string, lowers: LayerInfo[], packages: string[]): Promise<LayerInfo> {
  for (const p of packages) if (!/^[a-z0-9][a-z0-9+.-]*$/.test(p)) return Promise.reject(new Error(`invalid package name: ${p}`));
  return b.store.ensureLayer(
    id,
    async (tree) => {
      await mkdir(b.aptCacheDir, { recursive: true, mode: 0o755 });
      const res = await b.runtime.runStep({
        id: `bi-${id.slice(0, 12)}-${randomBytes(3).toString('hex')}`,
        lowerDirs: lowers.map((l) => l.path),
        upperDir: tree,
        argv: ['/bin/sh', '-c', STEP_SCRIPT(CACHE_MOUNT), 'apt', ...packages],
        env: { HOME: '/root', PATH: DEFAULT_PATH, LANG: 'C.UTF-8' },
        cwd: '/',
        internetAccess: true,
        resources: { vcpu: 2, memoryMb: 2048, diskGb: 8, pidsMax: 4096 },
        timeoutMs: 30 * 60_000,
        binds: [{ source: b.aptCacheDir, target: CACHE_MOUNT }],
        onOutput: lines(b.log),
        signal: b.signal,
      });
      if (res.timedOut) throw new Error(`installing ${packages.join(' ')} timed out`);
      if (res.exitCode !== 0) throw new Error(`installing ${packages.join(' ')} failed: exit status ${res.exitCode}`);
      const archives = join(tree, 'var/cache/apt/archives');
      await harvestDebs(archives, b.aptCacheDir, b.log);
      for (const n of await readdir(archives).catch(() => [] as string[])) if (n.endsWith('.deb')) await rm(join(archives, n), { force: true });
      const size = await treeSize(tree);
      return { kind: 'builtin-apt', sizeBytes: size.bytes, entries: size.entries, extra: { parent: lowers[0]?.id, packages: [...new Set(packages)].sort(), builderVersion: BUILTIN_LAYER_VERSION } };
    },
    b.log,
    { signal: b.signal },
  );
}

function lines(log: Log): (chunk: string) => void {
  let buf = '';
  return (chunk) => {
    buf += chunk;
    const parts = buf.split(/\r?\n|\r/);
    buf = parts.pop() ?? '';
    for (const p of parts) if (p.trim()) log(`  ${p.trimEnd()}`);
  };
}

async function treeSize(dir: string): Promise<{ entries: number; bytes: number }> {
  let entries = 0;
  let bytes = 0;
  await runTool('find', [dir, '-mindepth', '1', '-printf', '%y %s\n'], {
    onLine: (line) => {
      entries++;
      if (line.startsWith('f ')) bytes += Number(line.slice(2)) || 0;
    },
  });
  return { entries, bytes };
}
