// bench/layer-fetch: templates everywhere. A cluster on this machine (PostgreSQL, one `sandboxd
// node` with a layers directory of its own, `sandboxd control` with the shared one, no warm pool),
// and for each template given: the first create on the node, which fetches the template's layers
// from control (size moved and fetch time from the node's log), against the creates after it (p50),
// which find the layers there. Each create is timed to its first command.
// Usage (root, after npm run build): node bench/dist/layer-fetch.js [TEMPLATES=base,code-interpreter] [N=5]
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { agent, api, startServer, TEST_DATA_DIR } from '../../e2e/dist/harness.js';
import { startNode } from '../../e2e/dist/harness-node.js';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres } from '../../packages/server/dist/testing/postgres.js';

const TEMPLATES = (process.argv[2] ?? 'base,code-interpreter').split(',');
const N = Number(process.argv[3] ?? 5);
const FETCHED_RE = /fetched layer ([0-9a-f]{12}) \(([\d.]+) MB\) from control in ([\d.]+) s/g;

const keys = testClusterKeyFiles();
const pg = await startPostgres();
const nodeLayers = join(TEST_DATA_DIR, 'nodes', `bench-layers-${randomBytes(3).toString('hex')}`);
mkdirSync(nodeLayers, { recursive: true, mode: 0o700 });
const dbUrl = await pg.createDatabase();
const node = await startNode({ id: 'bench-layers-node', verifyKey: keys.verifyPem, databaseUrl: dbUrl, env: { SANDBOXD_LAYERS_DIR: nodeLayers } });
const control = await startServer({
  command: 'control',
  templates: TEMPLATES,
  env: { SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile, SANDBOXD_WARM_POOL_SIZE: '0', SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0' },
});
const fetched = () => [...readFileSync(node.logFile, 'utf8').matchAll(FETCHED_RE)].map((m) => ({ mb: Number(m[2]), seconds: Number(m[3]) }));

/** Create → first command, ms; the sandbox deleted after. */
async function createOnce(template: string): Promise<number> {
  const t0 = performance.now();
  const res = await api(control, 'POST', '/v1/sandboxes', { template_name: template, timeout_seconds: 600 });
  if (res.status !== 201) throw new Error(`create ${template}: ${res.status} ${JSON.stringify(res.body)}`);
  const r = await agent({ publicHost: res.body.public_host, authToken: res.body.auth_token }, 'POST', '/commands/run', { command: 'true' });
  if (r.status !== 200) throw new Error(`first command: ${r.status}`);
  const ms = performance.now() - t0;
  await api(control, 'DELETE', `/v1/sandboxes/${res.body.id}`);
  return ms;
}

try {
  console.log(`bench/layer-fetch: ${TEMPLATES.join(', ')}; N=${N} later creates each`);
  for (const t of TEMPLATES) {
    const before = fetched().length;
    const firstMs = await createOnce(t);
    const moved = fetched().slice(before);
    const later: number[] = [];
    for (let i = 0; i < N; i++) later.push(await createOnce(t));
    if (fetched().length !== before + moved.length) throw new Error('a later create fetched again');
    later.sort((a, b) => a - b);
    const mb = moved.reduce((n, m) => n + m.mb, 0);
    const s = moved.reduce((n, m) => n + m.seconds, 0);
    console.log(
      `${t.padEnd(18)} first create ${(firstMs / 1000).toFixed(2)} s (fetched ${moved.length} layer(s), ${mb.toFixed(1)} MB in ${s.toFixed(1)} s, ${s > 0 ? (mb / s).toFixed(0) : '-'} MB/s)` +
        `   later creates p50 ${(later[Math.floor(later.length / 2)]! / 1000).toFixed(2)} s   ratio ${(firstMs / later[Math.floor(later.length / 2)]!).toFixed(1)}x`,
    );
  }
} finally {
  await control.stop();
  await node.stop();
  await pg.stop();
  keys.remove();
  rmSync(nodeLayers, { recursive: true, force: true });
}
