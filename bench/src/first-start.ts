// bench/first-start: what a new user meets on a fresh machine (issue 27). Starts the daemon
// (`sandboxd serve`) on a fresh data dir with an empty package cache and its own port, and measures
// start → the API answering, start → a first `base` create answering a command, and start → all
// five built-ins ready; the baseline, in the same run, is one bare mmdebstrap of the base rootfs
// (what every built-in cost on its own before they were layered).
// Usage (root, after npm run build; takes minutes): node bench/dist/first-start.js
import { mkdtemp } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { BASE_RECIPE } from '../../packages/server/dist/images/builtin.js';
import { FsLayerStore } from '../../packages/server/dist/images/layer-store.js';
import { removeTreeWithMounts } from '../../packages/server/dist/runtime/proc.js';
import { agent, api, startServer, TEST_DATA_DIR } from '../../e2e/dist/harness.js';

const ALL = ['base', 'python', 'nodejs', 'go', 'code-interpreter'];
const sec = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

async function baseline(): Promise<number> {
  const dir = await mkdtemp(join(TEST_DATA_DIR, 'bench-mmdebstrap-'));
  try {
    const t0 = performance.now();
    await new FsLayerStore(join(dir, 'layers')).ensureRootfs(BASE_RECIPE, () => undefined);
    return performance.now() - t0;
  } finally {
    await removeTreeWithMounts(dir);
  }
}

async function main(): Promise<void> {
  const bare = await baseline();
  console.log(`baseline: a bare mmdebstrap of the base rootfs, no cache: ${sec(bare)}`);

  const t0 = performance.now();
  // SANDBOXD_LAYERS_DIR empty: the daemon's own <data dir>/layers (fresh), as on a new machine.
  const server = await startServer({ templates: ALL, env: { SANDBOXD_LAYERS_DIR: '', SANDBOXD_APT_CACHE_DIR: '' }, readyTimeoutMs: 20 * 60_000 });
  const serving = performance.now() - t0;
  console.log(`start → API answering: ${sec(serving)}`);
  try {
    let firstCommand = 0;
    const seen = new Map<string, string>();
    let lastPrint = 0;
    for (;;) {
      if (!firstCommand) {
        const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base' });
        if (res.status === 201) {
          const sb = { publicHost: res.body.public_host, authToken: res.body.auth_token };
          const run = await agent(sb, 'POST', '/commands/run', { command: 'echo ok' });
          if (run.status !== 200 || !String(run.body.stdout).includes('ok')) throw new Error(`first command: ${run.status} ${JSON.stringify(run.body)}`);
          firstCommand = performance.now() - t0;
          console.log(`start → first base create answering a command: ${sec(firstCommand)}`);
          await api(server, 'DELETE', `/v1/sandboxes/${res.body.id}`);
        } else if (res.status !== 503 || res.body.code !== 'TEMPLATE_BUILDING') {
          throw new Error(`create base: ${res.status} ${JSON.stringify(res.body)}`);
        }
      }
      const list = await api(server, 'GET', '/v1/templates');
      const rows = (list.body.data as Array<{ name: string; status: string; progress: number | null; error_message: string | null }>).filter((t) => ALL.includes(t.name));
      for (const t of rows) {
        const s = t.status === 'building' ? `building ${t.progress} %` : t.status;
        if (t.status === 'failed') throw new Error(`${t.name} failed: ${t.error_message}`);
        if (seen.get(t.name) !== t.status) console.log(`  ${sec(performance.now() - t0)}: ${t.name} ${s}`);
        seen.set(t.name, t.status);
      }
      if (performance.now() - lastPrint > 30_000) {
        lastPrint = performance.now();
        console.log(`  ${sec(lastPrint - t0)}: ${rows.map((t) => `${t.name} ${t.status === 'building' ? `${t.progress}%` : t.status}`).join(', ')}`);
      }
      if (firstCommand && rows.length === ALL.length && rows.every((t) => t.status === 'active')) break;
      if (performance.now() - t0 > 20 * 60_000) throw new Error('not all ready after 20 minutes');
      await new Promise((r) => setTimeout(r, 500));
    }
    const allReady = performance.now() - t0;
    console.log(`start → all five built-ins ready: ${sec(allReady)}`);
    console.log(
      JSON.stringify({ bareMmdebstrapBaseS: +(bare / 1000).toFixed(1), servingS: +(serving / 1000).toFixed(1), firstBaseCommandS: +(firstCommand / 1000).toFixed(1), allFiveReadyS: +(allReady / 1000).toFixed(1), allFiveOverBareBase: +(allReady / bare).toFixed(2) }),
    );
  } finally {
    await server.stop();
  }
}

await main();
