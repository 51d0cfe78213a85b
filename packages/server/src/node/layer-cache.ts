import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import type { FsLayerStore } from '../images/layer-store.js';
import { parseMountInfo, type MountEntry } from '../runtime/mounts.js';
import { removeTreeWithMounts } from '../runtime/proc.js';
import { ID_RE } from '../runtime/sandbox-paths.js';

export interface LayerCacheOptions {
  /** This node's layers directory. */
  store: FsLayerStore;
  /** Where a file per sandbox says which layers it uses (in the node's data directory). */
  recordsDir: string;
  /** The sandboxes that exist on this node (Runtime.list): the truth of which records still count. */
  sandboxes: () => Promise<string[]>;
  /** Bytes of layers kept, those in use aside (0: no budget). */
  budgetBytes: number;
  /** A layer no sandbox named for this long goes, whatever the budget (0: never). */
  maxIdleMs: number;
  /** A layer used (or a record written) more recently than this is never taken (a create under way). */
  minAgeMs?: number;
  /** How often a pass runs (0: only when asked). */
  intervalMs?: number;
  now?: () => number;
  /** The text of this process's mountinfo (tests give their own). */
  mountInfo?: () => Promise<string>;
  log?: (line: string) => void;
}

export interface Eviction {
  id: string;
  bytes: number;
  reason: 'idle' | 'budget';
}

const LAYER_ID_RE = /^[0-9a-f]{64}$/;
const DEFAULT_MIN_AGE_MS = 10 * 60_000;
const DEFAULT_INTERVAL_MS = 10 * 60_000;

interface UseRecord {
  layers: string[];
  /** When it was written (ms): a record of a sandbox not (yet) listed is kept while it is fresh. */
  atMs: number;
}

/**
 * A node's layers directory as a cache: layers fetched on first use are evicted, least recently
 * used first, when they hold more than the budget or have not been used for the longest idle time.
 * A layer is never taken while a sandbox of this node names it: each create or start records the
 * sandbox's layers (a file per sandbox, so a restarted node still knows) before they are resolved,
 * and the record goes when the sandbox is destroyed through the node API or is found gone from the
 * runtime. Both the record and the eviction's decision-and-rename take one lock, so a create either
 * recorded its layers before the decision (they stay) or resolves them after the rename (they are
 * fetched again). As a second guard, a layer whose tree is mounted anywhere in this mount namespace
 * (a bind or idmapped mount of it, an overlay naming it as lowerdir) stays.
 */
export class LayerCache {
  private readonly records = new Map<string, UseRecord>();
  /** Sandboxes whose create or start is under way (how many calls), by id. */
  private readonly underWay = new Map<string, number>();
  private readonly now: () => number;
  private readonly log: (line: string) => void;
  private lock: Promise<void> = Promise.resolve();
  private running?: Promise<Eviction[]>;
  private again = false;
  private timer?: NodeJS.Timeout;
  private retry?: NodeJS.Timeout;
  private loaded?: Promise<void>;

  constructor(private readonly o: LayerCacheOptions) {
    this.now = o.now ?? Date.now;
    this.log = o.log ?? (() => undefined);
  }

  /** Reads the records a previous run left, and starts the periodic passes. */
  async start(): Promise<void> {
    await this.load();
    const every = this.o.intervalMs ?? DEFAULT_INTERVAL_MS;
    if (every > 0 && (this.o.budgetBytes > 0 || this.o.maxIdleMs > 0)) {
      this.timer = setInterval(() => void this.pass().catch((err: unknown) => this.log(`layer cache: pass failed: ${String(err)}`)), every);
      this.timer.unref();
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    clearTimeout(this.retry);
    await this.running?.catch(() => undefined);
  }

  /**
   * Sandbox `id` uses these layers from now on (told before they are resolved: they cannot go after
   * this). Returns what to call once the create or start is over, whatever its outcome: until then
   * its record holds although the runtime does not list the sandbox yet (a fetch may take long).
   */
  async use(id: string, layerIds: string[]): Promise<() => void> {
    if (!ID_RE.test(id)) throw new Error(`invalid sandbox id: ${id}`);
    await this.load();
    this.underWay.set(id, (this.underWay.get(id) ?? 0) + 1);
    let over = false;
    const settled = () => {
      if (over) return;
      over = true;
      const left = (this.underWay.get(id) ?? 1) - 1;
      if (left > 0) this.underWay.set(id, left);
      else this.underWay.delete(id);
    };
    try {
      await this.record(id, layerIds);
    } catch (err) {
      settled();
      throw err;
    }
    return settled;
  }

  private async record(id: string, layerIds: string[]): Promise<void> {
    await this.exclusive(async () => {
      const rec: UseRecord = { layers: [...new Set(layerIds)], atMs: this.now() };
      await mkdir(this.o.recordsDir, { recursive: true, mode: 0o700 });
      const file = join(this.o.recordsDir, `${id}.json`);
      await writeFile(`${file}.tmp`, JSON.stringify(rec) + '\n', { mode: 0o600 });
      await rename(`${file}.tmp`, file);
      this.records.set(id, rec);
    });
  }

  /** Sandbox `id` is gone: its layers are no longer held for it (a pass follows, when over budget). */
  async release(id: string): Promise<void> {
    await this.drop(id);
    this.nudge();
  }

  private async drop(id: string): Promise<void> {
    if (!ID_RE.test(id)) return;
    await this.load();
    await this.exclusive(async () => {
      await rm(join(this.o.recordsDir, `${id}.json`), { force: true });
      this.records.delete(id);
    });
  }

  /** Asks for a pass soon (after a fetch, a destroy): one runs at a time; asks while one runs make one more. */
  nudge(): void {
    if (this.o.budgetBytes <= 0) return;
    if (this.running) {
      this.again = true;
      return;
    }
    void this.pass().catch((err: unknown) => this.log(`layer cache: pass failed: ${String(err)}`));
  }

  /** One eviction pass (or the one already running). */
  pass(): Promise<Eviction[]> {
    if (this.running) return this.running;
    const p = this.passOnce().finally(() => {
      this.running = undefined;
      if (this.again) {
        this.again = false;
        this.nudge();
      }
    });
    this.running = p;
    return p;
  }

  private async passOnce(): Promise<Eviction[]> {
    const { budgetBytes, maxIdleMs } = this.o;
    if (budgetBytes <= 0 && maxIdleMs <= 0) return [];
    await this.load();
    const minAgeMs = this.o.minAgeMs ?? DEFAULT_MIN_AGE_MS;
    const now = this.now();
    const existing = new Set(await this.o.sandboxes());
    for (const [id, rec] of [...this.records]) {
      if (existing.has(id) || this.underWay.has(id) || now - rec.atMs < minAgeMs) continue;
      this.log(`layer cache: sandbox ${id} is gone; its layers are no longer held for it`);
      await this.drop(id);
    }
    // A sandbox of this node with no record (one made before records were kept): its layers are
    // unknown, so none can be taken until it goes.
    const unknown = [...existing].filter((id) => !this.records.has(id));
    if (unknown.length > 0) {
      this.log(`layer cache: ${unknown.length} sandbox(es) here with no record of their layers (${unknown.slice(0, 3).join(', ')}...): evicting nothing until they are gone`);
      return [];
    }
    const layers = await Promise.all(
      (await this.o.store.list()).map(async (id) => ({
        id,
        bytes: (await this.o.store.meta(id))?.sizeBytes ?? 0,
        lastUsedMs: (await this.o.store.lastUsedMs(id)) ?? now,
      })),
    );
    let total = layers.reduce((n, l) => n + l.bytes, 0);
    const mounted = await this.mountedLayers();
    const evicted: Eviction[] = [];
    const oldestFirst = layers.filter((l) => now - l.lastUsedMs >= minAgeMs && !mounted.has(l.id)).sort((a, b) => a.lastUsedMs - b.lastUsedMs);
    for (const l of oldestFirst) {
      const reason = maxIdleMs > 0 && now - l.lastUsedMs > maxIdleMs ? 'idle' : budgetBytes > 0 && total > budgetBytes ? 'budget' : undefined;
      if (!reason) continue;
      const doomed = await this.exclusive(async () => (this.inUse(l.id) ? undefined : this.o.store.detach(l.id)));
      if (!doomed) continue;
      total -= l.bytes;
      evicted.push({ id: l.id, bytes: l.bytes, reason });
      const idle = hours(now - l.lastUsedMs);
      this.log(
        reason === 'idle'
          ? `layer cache: evicted layer ${l.id.slice(0, 12)} (${mb(l.bytes)} MB): unused for ${idle} h, more than ${hours(maxIdleMs)} h`
          : `layer cache: evicted layer ${l.id.slice(0, 12)} (${mb(l.bytes)} MB, unused for ${idle} h): the layers held ${mb(total + l.bytes)} MB, over the budget of ${mb(budgetBytes)} MB`,
      );
      await removeTreeWithMounts(doomed).catch((err: unknown) => this.log(`layer cache: removing ${doomed} failed (removed at the next start): ${String(err)}`));
    }
    if (budgetBytes > 0 && total > budgetBytes) {
      this.log(`layer cache: the layers hold ${mb(total)} MB, over the budget of ${mb(budgetBytes)} MB, but the rest are in use or were used in the last ${Math.round(minAgeMs / 1000)} s`);
      // Another pass once the youngest of those no sandbox holds is old enough (not before the next).
      const young = layers.filter((l) => now - l.lastUsedMs < minAgeMs && !mounted.has(l.id) && !this.inUse(l.id));
      if (young.length > 0) {
        const inMs = Math.min(...young.map((l) => l.lastUsedMs + minAgeMs - now)) + 1000;
        clearTimeout(this.retry);
        this.retry = setTimeout(() => this.nudge(), inMs);
        this.retry.unref();
      }
    }
    return evicted;
  }

  private inUse(layerId: string): boolean {
    for (const rec of this.records.values()) if (rec.layers.includes(layerId)) return true;
    return false;
  }

  /** Layers of this store whose tree (or a part of it) is mounted: bind and idmapped mounts, overlay lowerdirs. */
  private async mountedLayers(): Promise<Set<string>> {
    const text = await (this.o.mountInfo ?? (() => readFile('/proc/self/mountinfo', 'utf8')))();
    return mountedLayerIds(parseMountInfo(text), this.o.store.root);
  }

  /** The records a previous run left, read once (every caller waits for the same read). */
  private load(): Promise<void> {
    return (this.loaded ??= this.readRecords());
  }

  private async readRecords(): Promise<void> {
    const names = await readdir(this.o.recordsDir).catch(() => [] as string[]);
    for (const n of names) {
      const id = n.endsWith('.json') ? n.slice(0, -5) : '';
      if (!ID_RE.test(id)) continue;
      try {
        const rec = JSON.parse(await readFile(join(this.o.recordsDir, n), 'utf8')) as Partial<UseRecord>;
        if (Array.isArray(rec.layers) && typeof rec.atMs === 'number') this.records.set(id, { layers: rec.layers.filter((l) => typeof l === 'string'), atMs: rec.atMs });
      } catch (err) {
        this.log(`layer cache: the record ${n} cannot be read (${String(err)}); sandbox ${id}'s layers are unknown`);
      }
    }
  }

  private async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const prev = this.lock;
    let release!: () => void;
    this.lock = new Promise((r) => (release = r));
    await prev;
    try {
      return await fn();
    } finally {
      release();
    }
  }
}

/**
 * The ids of layers under `layersRoot` that a mount uses: a mount whose root lies in a layer's
 * directory on the layers' own filesystem (bind or idmapped clones: the runtime's lower scratch
 * mounts), one mounted inside a layer's directory, or an overlay naming a layer's tree in its
 * lowerdir. A relative lowerdir (long stacks are
 * mounted from their common parent) is matched by its `<id>/tree` part alone: a safety net errs on
 * the side of keeping.
 */
export function mountedLayerIds(mounts: MountEntry[], layersRoot: string): Set<string> {
  const root = resolve(layersRoot);
  const out = new Set<string>();
  // The mount holding the layers directory (the last of the deepest: mounts stack in order).
  let home: MountEntry | undefined;
  for (const m of mounts) {
    const over = m.mountPoint === '/' || root === m.mountPoint || root.startsWith(`${m.mountPoint}/`);
    if (over && (!home || m.mountPoint.length >= home.mountPoint.length)) home = m;
  }
  const inside = home ? join(home.root, relative(home.mountPoint, root)) : undefined;
  for (const m of mounts) {
    // Something mounted inside a layer's directory: whoever did it is using that tree.
    if (m.mountPoint.startsWith(`${root}/`)) {
      const id = m.mountPoint.slice(root.length + 1).split('/')[0]!;
      if (LAYER_ID_RE.test(id)) out.add(id);
    }
    if (home && inside && m.device === home.device && m.root.startsWith(`${inside}/`)) {
      const id = m.root.slice(inside.length + 1).split('/')[0]!;
      if (LAYER_ID_RE.test(id)) out.add(id);
    }
    if (m.fsType !== 'overlay') continue;
    for (const dir of lowerDirsOf(m.superOptions)) {
      if (dir.startsWith('/')) {
        if (!dir.startsWith(`${root}/`)) continue;
        const id = dir.slice(root.length + 1).split('/')[0]!;
        if (LAYER_ID_RE.test(id)) out.add(id);
      } else {
        const hit = /(?:^|\/)([0-9a-f]{64})\/tree(?:\/|$)/.exec(dir);
        if (hit) out.add(hit[1]!);
      }
    }
  }
  return out;
}

/** An overlay's lower directories, from its options (`lowerdir=a:b`, or `lowerdir+=` one each). */
function lowerDirsOf(options: string): string[] {
  const out: string[] = [];
  for (const m of options.matchAll(/(?:^|,)lowerdir\+?=((?:\\.|[^,\\])*)/g)) {
    for (const d of m[1]!.split(/(?<!\\):/)) if (d) out.push(d.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))).replace(/\\(.)/g, '$1'));
  }
  return out;
}

function mb(bytes: number): string {
  return (bytes / 1e6).toFixed(1);
}

function hours(ms: number): string {
  return (ms / 3_600_000).toFixed(1);
}
