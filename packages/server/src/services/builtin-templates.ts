import { ensurePythonCompatLayer } from '../images/base-images.js';
import { ensureBuiltinTemplates } from '../images/builtin-build.js';
import { builtinStackIds } from '../images/builtin-layers.js';
import { withParents, type BuiltinTemplate } from '../images/builtin.js';
import type { FsLayerStore, Log } from '../images/layer-store.js';
import type { LayerInfo } from '../images/types.js';
import type { Runtime } from '../runtime/types.js';
import type { TemplateService } from './templates.js';

export interface BuiltinStartDeps {
  wanted: BuiltinTemplate[];
  layers: FsLayerStore;
  templates: TemplateService;
  /** Where the layers above base are installed (a build container). */
  runtime: Pick<Runtime, 'runStep'>;
  aptCacheDir: string;
  concurrency?: number;
  log: Log;
  /** A template's layers are ready (a cluster computes their digests for the nodes). */
  onLayers?: (ids: string[]) => void;
  /** Stops the builds under way (the daemon shutting down): their build containers end, nothing half-built is kept. */
  signal?: AbortSignal;
}

/**
 * The built-ins as the service starts: those whose layers are all here are recorded active at once;
 * the others are recorded `building` (0 %) and built behind the serving daemon, their progress and
 * estimate written to the store as they go, each recorded active as soon as its own stack is
 * ready (base first), or `failed` with its error (built again at the next start). Resolves when
 * this returns; `done` settles when every build has ended.
 */
export async function startBuiltinTemplates(d: BuiltinStartDeps): Promise<{ done: Promise<void>; building: string[] }> {
  const all = withParents(d.wanted);
  const wanted = new Map(d.wanted.map((t) => [t.name, t]));
  // The Python templates get pip/python under /usr/local/bin and system-wide pip installs, as clients expect.
  const needsCompat = d.wanted.some((t) => t.language === 'python');
  const compat = needsCompat ? await ensurePythonCompatLayer(d.layers, d.log) : undefined;
  const stackFor = (t: BuiltinTemplate, own: LayerInfo[]) => (t.language === 'python' && compat ? [compat, ...own] : own);
  const building: string[] = [];
  for (const t of d.wanted) {
    const ids = builtinStackIds(all, t.name);
    const present = (await Promise.all(ids.map((id) => d.layers.has(id)))).every(Boolean);
    if (present) {
      const stack = stackFor(t, ids.map((id) => d.layers.info(id)));
      await d.templates.registerBuiltin(t, stack);
      d.onLayers?.(stack.map((l) => l.id));
    } else {
      building.push(t.name);
      const eta = withParents([t]).reduce((n, x) => n + x.expectedSeconds, 0);
      await d.templates.builtinProgress(t, 0, eta);
    }
  }
  if (building.length > 0) d.log(`built-in templates building behind the service: ${building.join(', ')} (progress in GET /v1/templates; a create answers 503 TEMPLATE_BUILDING until each is ready)`);
  const swallow = (what: string) => (err: unknown) => d.log(`built-in templates: cannot record ${what}: ${String(err)}`);
  // Each template's writes in order: a progress written late must never put a ready one back to building.
  const chains = new Map<string, Promise<void>>();
  const settled = new Set<string>();
  const inOrder = (name: string, fn: () => Promise<unknown>, what: string): Promise<void> => {
    const p = (chains.get(name) ?? Promise.resolve()).then(fn).then(() => undefined, swallow(what));
    chains.set(name, p);
    return p;
  };
  const done = ensureBuiltinTemplates(d.layers, all, d.log, {
    runtime: d.runtime,
    aptCacheDir: d.aptCacheDir,
    concurrency: d.concurrency,
    signal: d.signal,
    events: {
      progress: (name, percent, eta) => {
        const t = wanted.get(name);
        if (t && building.includes(name) && !settled.has(name)) void inOrder(name, () => d.templates.builtinProgress(t, percent, eta), `${name}'s progress`);
      },
      ready: async (name, own) => {
        const t = wanted.get(name);
        if (!t) return;
        const stack = stackFor(t, own);
        settled.add(name);
        await inOrder(name, () => d.templates.registerBuiltin(t, stack), `${name} as ready`);
        d.onLayers?.(stack.map((l) => l.id));
        if (building.includes(name)) d.log(`built-in template ${name} is ready`);
      },
      failed: async (name, err) => {
        const t = wanted.get(name);
        if (!t) return;
        settled.add(name);
        await inOrder(name, () => d.templates.builtinFailed(t, err), `${name} as failed`);
      },
    },
  }).then(() => undefined);
  return { done, building };
}
