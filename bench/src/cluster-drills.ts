// bench/cluster-drills: the failure drills of a whole cluster on this machine (PostgreSQL, two
// namespaced nodes, two control replicas, an edge: e2e/src/cluster-drills.test.ts), run RUNS times
// as the suite runs them, with the medians of the figures each run records (issue 29's table):
//   - creates during the 15 s after a node is killed: success rate (goal 100 %, room elsewhere);
//   - a request to a sandbox on a hung node (SIGSTOP): time to a clear 503 (goal ≤ 2 s);
//   - node SIGTERM → exit, with two control replicas connected (goal ≤ 10 s, 0 containers left);
//   - sandboxes unavailable when one of two control replicas dies (goal 0).
// The baseline of a drill is the state before its failure, asserted in the same run (every
// sandbox answered, both nodes leased); the ratio to the all-in-one of create → first command is
// bench/dist/cluster.js's.
// Usage (root, after npm run build): node bench/dist/cluster-drills.js [RUNS=3]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { percentile } from './stats.js';

const RUNS = Number(process.argv[2] ?? 3);
const root = join(dirname(fileURLToPath(import.meta.url)), '../..');
const dir = mkdtempSync(join(tmpdir(), 'sbd-drills-'));
const byName = new Map<string, { unit: string; values: number[] }>();
let failed = 0;
try {
  for (let run = 1; run <= RUNS; run++) {
    const file = join(dir, `run-${run}.jsonl`);
    const r = spawnSync(process.execPath, ['--test', '--test-reporter=dot', join(root, 'e2e/dist/cluster-drills.test.js')], {
      env: { ...process.env, SANDBOXD_DRILL_FIGURES: file, NO_PROXY: '127.0.0.1,localhost', no_proxy: '127.0.0.1,localhost' },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    if (r.status !== 0) failed++;
    let lines: string[] = [];
    try {
      lines = readFileSync(file, 'utf8').split('\n').filter(Boolean);
    } catch {
      /* the run recorded nothing */
    }
    for (const line of lines) {
      const f = JSON.parse(line) as { name: string; value: number; unit: string };
      const e = byName.get(f.name) ?? { unit: f.unit.replace(/of \d+.*/, '').trim() || f.unit, values: [] };
      e.values.push(f.value);
      byName.set(f.name, e);
    }
    process.stdout.write(`run ${run}/${RUNS}: ${r.status === 0 ? 'every drill passed' : 'a drill failed (above)'}\n`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
for (const [name, e] of byName) {
  process.stdout.write(`${name}: median ${percentile(e.values, 50)} ${e.unit} (runs: ${e.values.join(', ')})\n`);
}
process.exit(failed ? 1 : 0);
