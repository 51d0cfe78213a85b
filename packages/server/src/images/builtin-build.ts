import type { Runtime } from '../runtime/types.js';
import { BUILTIN_CLAIMS, checkStackClaims } from './bootstrap.js';
import { withParents, type BuiltinTemplate } from './builtin.js';
import { builtinLayerIds, ensureAptLayer } from './builtin-layers.js';
import type { FsLayerStore, Log } from './layer-store.js';
import type { LayerInfo } from './types.js';

/** What a build of the built-ins tells as it goes (the control plane records it in the store). */
export interface BuiltinEvents {
  /** Percent done of a template still building (its whole stack) and the seconds it should still take. */
  progress?(name: string, percent: number, etaSeconds: number): void;
  /** Its stack (own layers, top-most first) is built and matches its description. */
  ready?(name: string, stack: LayerInfo[]): void | Promise<void>;
  failed?(name: string, err: Error): void | Promise<void>;
}

export interface BuiltinBuildOptions {
  /** Runs the upper layers' installs (a build container); needed only when one must be built. */
  runtime?: Pick<Runtime, 'runStep'>;
  /** The shared package download cache (e.g. <data dir>/apt-cache); none: every build downloads. */
  aptCacheDir?: string;
  signal?: AbortSignal;
  verify?: boolean;
  /** Layers built at once once base is there (the base rootfs is always alone). */
  concurrency?: number;
  events?: BuiltinEvents;
}

/** Which layer goes first when slots are few: the longest chain (to code-interpreter) first. */
const PRIORITY = ['base', 'python', 'code-interpreter', 'nodejs', 'go', 'desktop'];

/**
 * Builds (or finds cached) the layer of every built-in wanted and of the parents they need: base
 * first (a rootfs, alone: mmdebstrap uses both cores), then each other as a layer over its parent's
 * stack, `concurrency` at a time, the critical path first. Each stack is checked against what its
 * description claims before it is called ready. Resolves with every stack that is ready (top-most
 * first); a failure fails that template and those above it, and the others go on. Without
 * `events.failed`, the first failure rejects once the rest is done.
 */
export async function ensureBuiltinTemplates(store: FsLayerStore, templates: BuiltinTemplate[], log: Log, opts: BuiltinBuildOptions = {}): Promise<Map<string, LayerInfo[]>> {
  const all = withParents(templates);
  const ids = builtinLayerIds(all);
  const byName = new Map(all.map((t) => [t.name, t]));
  const started = Date.now();
  const frac = new Map<string, number>();
  for (const t of all) frac.set(t.name, (await store.has(ids.get(t.name)!)) ? 1 : 0);
  const chain = (t: BuiltinTemplate): BuiltinTemplate[] => (t.parent ? [t, ...chain(byName.get(t.parent)!)] : [t]);
  const lastEmit = new Map<string, { at: number; percent: number }>();
  const report = (force = false) => {
    if (!opts.events?.progress) return;
    // Pace: how the work done so far compares with what it was expected to take.
    let doneW = 0;
    let allW = 0;
    for (const t of all) {
      allW += t.expectedSeconds;
      doneW += t.expectedSeconds * frac.get(t.name)!;
    }
    const elapsed = (Date.now() - started) / 1000;
    const pace = doneW > allW * 0.05 && elapsed > 5 ? Math.min(5, Math.max(0.5, elapsed / doneW)) : 1;
    for (const t of all) {
      const c = chain(t);
      const w = c.reduce((n, l) => n + l.expectedSeconds, 0);
      const got = c.reduce((n, l) => n + l.expectedSeconds * frac.get(l.name)!, 0);
      if (got >= w) continue;
      const percent = Math.min(99, Math.floor((100 * got) / w));
      const prev = lastEmit.get(t.name);
      if (!force && prev && (prev.percent === percent || Date.now() - prev.at < 1000)) continue;
      lastEmit.set(t.name, { at: Date.now(), percent });
      opts.events.progress(t.name, percent, Math.max(1, Math.round((w - got) * pace)));
    }
  };
  report(true);

  const slots = new Slots(opts.concurrency ?? 2);
  // A layer built hands its slot to the first of its children (python's to code-interpreter), so
  // the longest chain is never queued behind a shorter one that was waiting.
  const handoff = new Map<string, () => void>();
  const hasChildToBuild = (t: BuiltinTemplate) => all.some((c) => c.parent === t.name && frac.get(c.name)! < 1);
  const layers = new Map<string, Promise<LayerInfo[]>>();
  const stackOf = (t: BuiltinTemplate): Promise<LayerInfo[]> => {
    let p = layers.get(t.name);
    if (!p) {
      p = buildOne(t);
      layers.set(t.name, p);
    }
    return p;
  };
  const buildOne = async (t: BuiltinTemplate): Promise<LayerInfo[]> => {
    const id = ids.get(t.name)!;
    const lowers = t.parent ? await stackOf(byName.get(t.parent)!) : [];
    const tag = `[${t.name}]`;
    const tlog: Log = (l) => {
      log(`${tag} ${l}`);
      const f = t.parent ? aptProgress(l, meter) : rootfsProgress(l);
      if (f !== undefined && f > frac.get(t.name)!) {
        frac.set(t.name, f);
        report();
      }
    };
    const meter = { n: 0, got: 0, unpacked: 0, setup: 0 };
    let layer: LayerInfo;
    if (await store.has(id)) layer = store.info(id);
    else {
      // base is alone; the layers above it share the slots.
      const handed = t.parent ? handoff.get(t.parent) : undefined;
      if (handed) handoff.delete(t.parent!);
      const release = handed ?? (t.parent ? await slots.take(PRIORITY.indexOf(t.name)) : () => undefined);
      let kept = false;
      try {
        const t0 = Date.now();
        log(`${tag} building (${t.parent ? `${t.recipe.packages.join(' ')} over ${t.parent}` : `Debian ${t.recipe.suite} rootfs`}) ...`);
        if (!t.parent) layer = await store.ensureRootfs(t.recipe, tlog, { signal: opts.signal, aptCacheDir: opts.aptCacheDir });
        else {
          if (!opts.runtime) throw new Error(`building ${t.name} needs a runtime for its build container`);
          layer = await ensureAptLayer({ store, runtime: opts.runtime, aptCacheDir: opts.aptCacheDir ?? '', log: tlog, signal: opts.signal }, id, lowers, t.recipe.packages);
        }
        log(`${tag} layer built in ${((Date.now() - t0) / 1000).toFixed(1)} s (${id.slice(0, 12)})`);
        if (t.parent && hasChildToBuild(t)) {
          handoff.set(t.name, release);
          kept = true;
        }
      } finally {
        if (!kept) release();
      }
    }
    const stack = [layer, ...lowers];
    if (opts.verify !== false) {
      const problems = await checkStackClaims(stack, store.root, BUILTIN_CLAIMS[t.name]).catch((err: unknown) => [String(err)]);
      if (problems.length > 0) {
        // No child will take the slot kept for it.
        handoff.get(t.name)?.();
        handoff.delete(t.name);
        throw new Error(`built-in template ${t.name} does not match its description: ${problems.join('; ')}`);
      }
    }
    frac.set(t.name, 1);
    report();
    return stack;
  };

  const out = new Map<string, LayerInfo[]>();
  let firstError: Error | undefined;
  await Promise.all(
    all.map(async (t) => {
      try {
        const stack = await stackOf(t);
        out.set(t.name, stack);
        await opts.events?.ready?.(t.name, stack);
      } catch (e) {
        const err = e instanceof Error ? e : new Error(String(e));
        log(`[${t.name}] failed: ${err.message}`);
        firstError ??= err;
        await opts.events?.failed?.(t.name, err);
      }
    }),
  );
  if (firstError && !opts.events?.failed) throw firstError;
  log(`built-in templates: ${out.size} of ${all.length} ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return out;
}

/** mmdebstrap's phases as the fraction of a rootfs build they usually mark. */
const ROOTFS_PHASES: Array<[RegExp, number]> = [
  [/running apt-get update/, 0.03],
  [/downloading packages/, 0.1],
  [/extracting archives/, 0.35],
  [/installing essential packages/, 0.45],
  [/installing remaining packages/, 0.65],
  [/cleaning package lists|skipping cleanup/, 0.9],
  [/shifted ownership/, 0.97],
];

export function rootfsProgress(line: string): number | undefined {
  for (const [re, f] of ROOTFS_PHASES) if (re.test(line)) return f;
  return undefined;
}

/** apt-get install's output: downloads, then each package unpacked and set up. */
export function aptProgress(line: string, m: { n: number; got: number; unpacked: number; setup: number }): number | undefined {
  const newly = /(\d+) newly installed/.exec(line);
  if (newly) {
    m.n = Number(newly[1]);
    return 0.05;
  }
  if (m.n === 0) return undefined;
  if (/^\s*Get:\d+ /.test(line)) m.got++;
  else if (/^\s*Unpacking /.test(line)) m.unpacked++;
  else if (/^\s*Setting up /.test(line)) m.setup++;
  else return undefined;
  const part = (k: number) => Math.min(1, k / m.n);
  return Math.min(0.99, 0.05 + 0.35 * part(m.got) + 0.3 * part(m.unpacked) + 0.29 * part(m.setup));
}

/** At most `n` holders at once; the waiting one with the lowest rank goes first. */
class Slots {
  private busy = 0;
  private readonly waiting: Array<{ rank: number; go: () => void }> = [];
  constructor(private readonly n: number) {}
  async take(rank: number): Promise<() => void> {
    if (this.busy >= Math.max(1, this.n)) {
      await new Promise<void>((go) => {
        this.waiting.push({ rank, go });
        this.waiting.sort((a, b) => a.rank - b.rank);
      });
    } else this.busy++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next.go();
      else this.busy--;
    };
  }
}
