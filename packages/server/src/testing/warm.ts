// Builds (or finds cached) every built-in template in the shared test layer dir before the suite
// runs, so that no single test pays minutes of mmdebstrap and times out. Layers the service on
// this machine already built (same recipe, same id) are taken from its data dir instead.
import { chmodSync, statSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { serviceLayersDir } from '../config/index.js';
import { ensurePythonCompatLayer } from '../images/base-images.js';
import { ensureBuiltinTemplates } from '../images/builtin-build.js';
import { builtinLayerIds } from '../images/builtin-layers.js';
import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import type { StepRunOptions } from '../runtime/types.js';
import { layerStoreForTests, testDataDir } from './fixtures.js';
import { takeLayers } from './layer-reuse.js';
import { createTestRuntime, type TestRuntime } from './runtime-fixtures.js';

const store = await layerStoreForTests();
const log = (line: string) => process.stderr.write(`[warm] ${line}\n`);

// What tests build or import (step layers of template builds, layers of imported or pulled images)
// lands in the shared dir too, and no daemon collects it there: it knows only its own templates.
// Kept, it piled up run after run (hundreds of layers, some of 800 000 files) and slowed every test
// that walks the dir. The cache is the recipes' layers; the rest goes before and after a run.
const cached = new Set(['debian-rootfs', 'builtin-apt', 'python-compat', 'skeleton']);
let pruned = 0;
for (const id of await store.list()) {
  const kind = (await store.meta(id))?.kind;
  if (kind !== undefined && cached.has(kind)) continue;
  await store.remove(id);
  pruned++;
}
if (pruned) log(`removed ${pruned} layer(s) that earlier tests built or imported`);
if (process.argv.includes('--prune-only')) process.exit(0);

await mkdir(store.root, { recursive: true, mode: 0o700 });
await takeLayers(store, serviceLayersDir(), [...builtinLayerIds(BUILTIN_TEMPLATES).values()], log);
// A build container only when a layer above base must really be built here.
let rt: TestRuntime | undefined;
const runtime = { runStep: async (o: StepRunOptions) => (rt ??= await createTestRuntime()).rt.runStep(o) };
try {
  await ensureBuiltinTemplates(store, BUILTIN_TEMPLATES, log, { runtime, aptCacheDir: join(testDataDir(), 'apt-cache') });
  await ensurePythonCompatLayer(store, log);
} finally {
  await rt?.teardown();
}
// The layer store made the shared dir 0700 when it created it; the test daemons' and runtimes'
// data dirs below it must be reachable by sandbox users (crun-runtime checks o+x), as
// /var/lib is for the service's own.
const mode = statSync(testDataDir()).mode & 0o7777;
if ((mode & 0o001) === 0) chmodSync(testDataDir(), mode | 0o011);
