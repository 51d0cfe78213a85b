// Builds (or finds cached) every built-in template in the shared test layer dir before the suite
// runs, so that no single test pays minutes of mmdebstrap and times out.
import { ensureBuiltinTemplates } from '../images/bootstrap.js';
import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { chmodSync, statSync } from 'node:fs';
import { layerStoreForTests, testDataDir } from './fixtures.js';

const store = await layerStoreForTests();
const log = (line: string) => process.stderr.write(`[warm] ${line}\n`);

// What tests build or import (step layers of template builds, layers of imported or pulled images)
// lands in the shared dir too, and no daemon collects it there: it knows only its own templates.
// Kept, it piled up run after run (hundreds of layers, some of 800 000 files) and slowed every test
// that walks the dir. The cache is the recipes' rootfs layers; the rest goes before and after a run.
const cached = new Set(['debian-rootfs', 'python-compat', 'skeleton']);
let pruned = 0;
for (const id of await store.list()) {
  const kind = (await store.meta(id))?.kind;
  if (kind !== undefined && cached.has(kind)) continue;
  await store.remove(id);
  pruned++;
}
if (pruned) log(`removed ${pruned} layer(s) that earlier tests built or imported`);
if (process.argv.includes('--prune-only')) process.exit(0);

await ensureBuiltinTemplates(store, BUILTIN_TEMPLATES, log);
// The layer store made the shared dir 0700 when it created it; the test daemons' and runtimes'
// data dirs below it must be reachable by sandbox users (crun-runtime checks o+x), as
// /var/lib is for the service's own.
const mode = statSync(testDataDir()).mode & 0o7777;
if ((mode & 0o001) === 0) chmodSync(testDataDir(), mode | 0o011);
