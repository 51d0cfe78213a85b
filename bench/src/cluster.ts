// bench/cluster: a cluster on this machine (PostgreSQL, NODES `sandboxd node` processes, `sandboxd
// control`) next to the all-in-one daemon (`sandboxd serve`) in the same run. Figures:
//   - create → first command through control, p50, against the same through the all-in-one daemon
//     (both with their warm pools on, one create at a time);
//   - a burst of BURST concurrent creates through control: success, and how they spread over the
//     nodes (each node's share against an even one).
// Usage (root, after npm run build): node bench/dist/cluster.js [N=30] [BURST=100] [NODES=3]
import { performance } from 'node:perf_hooks';
import { agent, api, startNode, startServer, type TestNode, type TestServer } from '../../e2e/dist/harness.js';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres } from '../../packages/server/dist/testing/postgres.js';
import { row } from './stats.js';

const N = Number(process.argv[2] ?? 30);
const BURST = Number(process.argv[3] ?? 100);
const NODES = Number(process.argv[4] ?? 3);
const LIMITS = { SANDBOXD_MAX_SANDBOXES: '0', SANDBOXD_MAX_TOTAL_MEMORY_MB: '0', SANDBOXD_MAX_TOTAL_DISK_GB: '0', SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '100000' };
const CREATE = { template_name: 'base', internet_access: false };

async function createAndRun(server: TestServer): Promise<{ ms: number; id: string }> {
  const t0 = performance.now();
  const res = await api(server, 'POST', '/v1/sandboxes', CREATE);
  if (res.status !== 201) throw new Error(`create answered ${res.status} ${JSON.stringify(res.body)}`);
  const ran = await agent({ publicHost: res.body.public_host, authToken: res.body.auth_token }, 'POST', '/commands/run', { command: 'true' });
  if (ran.status !== 200) throw new Error(`first command answered ${ran.status}`);
  return { ms: performance.now() - t0, id: res.body.id };
}

async function series(server: TestServer): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < N + 5; i++) {
    const { ms, id } = await createAndRun(server);
    if (i >= 5) out.push(ms);
    await api(server, 'DELETE', `/v1/sandboxes/${id}`);
    // Time for the pool to refill, as between the creates of a client.
    await new Promise((r) => setTimeout(r, 300));
  }
  return out;
}

const pg = await startPostgres();
// Control signs with the private key; the nodes get the public key only.
const keys = testClusterKeyFiles();
const nodes: TestNode[] = [];
let control: TestServer | undefined;
let single: TestServer | undefined;
try {
  const dbUrl = await pg.createDatabase();
  for (let i = 0; i < NODES; i++) nodes.push(await startNode({ id: `bench-node-${i}`, verifyKey: keys.verifyPem, databaseUrl: dbUrl }));
  // The nodes share this machine's cores, and each reports them all: placement's default 16× of 2
  // cores per node holds fewer than a burst and the warm pool's refill (a real node has its own).
  control = await startServer({ command: 'control', templates: ['base'], env: { ...LIMITS, SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile, SANDBOXD_OVERCOMMIT_CPU: '64' } });
  single = await startServer({ templates: ['base'], env: LIMITS });

  const allInOne = await series(single);
  await single.stop();
  // The same daemon on the cluster's PostgreSQL: what the store alone adds.
  single = await startServer({ templates: ['base'], env: { ...LIMITS, SANDBOXD_DATABASE_URL: await pg.createDatabase() } });
  const onPostgres = await series(single);
  await single.stop();
  single = undefined;
  const clustered = await series(control);

  const t0 = performance.now();
  const results = await Promise.allSettled(Array.from({ length: BURST }, () => createAndRun(control!)));
  const burstS = (performance.now() - t0) / 1000;
  const ok = results.filter((r) => r.status === 'fulfilled').length;
  const { execFileSync } = await import('node:child_process');
  const list = JSON.parse(
    execFileSync(process.execPath, ['packages/server/dist/cli.js', 'nodes', 'list', '--json'], { env: { ...process.env, SANDBOXD_DATABASE_URL: dbUrl }, encoding: 'utf8' }),
  ) as Array<{ id: string; committed: { active: number } }>;
  const even = ok / NODES;
  const spread = list.map((n) => `${n.id} ${n.committed.active} (${(((n.committed.active - even) / even) * 100).toFixed(0)} %)`);
  const worst = Math.max(...list.map((n) => Math.abs(n.committed.active - even) / even)) * 100;

  console.log(`\nbench/cluster on ${new Date().toISOString()} (${NODES} nodes on this machine, N=${N}, burst ${BURST})`);
  console.log(row('all-in-one: create → first command (baseline)', allInOne));
  console.log(row('all-in-one on PostgreSQL', onPostgres, allInOne));
  console.log(row('through control: create → first command', clustered, allInOne));
  console.log(`burst of ${BURST} through control: ${ok}/${BURST} served in ${burstS.toFixed(1)} s; spread ${spread.join(', ')}; worst ${worst.toFixed(0)} % from even (goal 100 % and ±20 %)`);
  const why = new Map<string, number>();
  for (const r of results) if (r.status === 'rejected') why.set(String(r.reason).slice(0, 300), (why.get(String(r.reason).slice(0, 300)) ?? 0) + 1);
  for (const [reason, n] of why) console.log(`  failed ×${n}: ${reason}`);
  for (const r of results) if (r.status === 'fulfilled') await api(control, 'DELETE', `/v1/sandboxes/${r.value.id}`);
} finally {
  await single?.stop();
  await control?.stop();
  for (const n of nodes) await n.stop();
  await pg.stop();
  keys.remove();
}
