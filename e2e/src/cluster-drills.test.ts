// Failure drills on a whole cluster on this machine (issue 29): PostgreSQL, two nodes each in a
// network namespace of its own that hold no database credentials (they register through control's
// two replicas, listed in SANDBOXD_CONTROL_URL), two control replicas and an edge. Each drill
// is what a cluster meets, and what it must do then:
//   - a control replica dies: no sandbox of any node becomes unavailable (each node heartbeats
//     through the other replica);
//   - a node hangs (SIGSTOP): a request to one of its sandboxes gets a clear 503 within 2 s, and
//     creates go on, on the other node;
//   - a node is killed: every create in the next 15 s succeeds on the other node, and once it is
//     back nothing runs that no row owns;
//   - a node gets SIGTERM while both replicas hold its event streams open: it exits within 10 s,
//     leaving only the sandboxes the store owns.
// With SANDBOXD_DRILL_FIGURES=<file>, each drill appends its figures there as JSON lines
// (bench/src/cluster-drills.ts runs the drills and takes their medians).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { appendFileSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { api, createSandbox, crunContainers, freePort, REPO_ROOT, startServer, stopAll, type CreatedSandbox, type TestServer } from './harness.js';
import { startNode, type TestNode } from './harness-node.js';
import { until, viaGateway } from './cluster-support.js';
import { resolveDomainTo } from './test-dns.js';

const DOMAIN = 'drills.test';
/** Long enough that a drill shorter than it shows what a node's silence does within its lease. */
const LEASE_SECONDS = 6;
const CLAIM_SECONDS = 2;
/** Each gateway on the same port, on an address of its own; *.drills.test resolves to the edge's. */
const ADDR = { a: '127.0.0.2', b: '127.0.0.3', edge: '127.0.0.4' } as const;
/** Every sandbox on a node is then a create's: what runs and what the store owns must be the same. */
const NO_WARM_POOL = { SANDBOXD_WARM_POOL_SIZE: '0', SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0' };

function figure(name: string, value: number, unit: string): void {
  process.stdout.write(`# figure: ${name}: ${value} ${unit}\n`);
  if (process.env.SANDBOXD_DRILL_FIGURES) appendFileSync(process.env.SANDBOXD_DRILL_FIGURES, `${JSON.stringify({ name, value, unit })}\n`);
}

describe('failure drills on a cluster of two namespaced nodes, two control replicas and an edge', { timeout: 900_000 }, () => {
  let postgres: TestPostgres;
  let dbUrl: string;
  let gatewayPort = 0;
  const nodes: TestNode[] = [];
  let a: TestServer;
  let b: TestServer;
  let edge: TestServer;
  const keys = testClusterKeyFiles();
  const host = (id: string) => `${id}.${DOMAIN}`;
  const run = (at: string, sb: CreatedSandbox, command = 'true', timeoutMs?: number) => viaGateway(at, gatewayPort, host(sb.id), 'POST', '/commands/run', sb.authToken, { command }, timeoutMs);

  const query = async <T extends object>(sql: string, params: unknown[] = []): Promise<T[]> => {
    const client = new pg.Client({ connectionString: dbUrl });
    await client.connect();
    try {
      return (await client.query<T>(sql, params)).rows;
    } finally {
      await client.end();
    }
  };
  const nodeOf = async (id: string) => (await query<{ node_id: string }>('SELECT node_id FROM sandboxes WHERE id = $1', [id]))[0]?.node_id;
  const leased = async () => new Set((await query<{ id: string }>('SELECT id FROM nodes WHERE lease_expires_at::timestamptz > now()')).map((r) => r.id));
  /**
   * What runs on a node that no row of the store owns (live rows on that node), and what the node
   * reported at its last heartbeat: its pool's ready sandboxes (a take whose asker left while the
   * node was stopped is kept ready for the next create) and its orphans (held by no one).
   */
  const census = async (n: TestNode) => {
    const owned = new Set((await query<{ id: string }>("SELECT id FROM sandboxes WHERE node_id = $1 AND status <> 'deleted'", [n.id])).map((r) => r.id));
    const [row] = await query<{ warm: Record<string, number> | string; orphans: string | number | null }>('SELECT warm, orphans FROM nodes WHERE id = $1', [n.id]);
    const warm = typeof row?.warm === 'string' ? (JSON.parse(row.warm) as Record<string, number>) : (row?.warm ?? {});
    return {
      unowned: crunContainers(n.dataDir).filter((id) => !owned.has(id)),
      warmReady: Object.values(warm).reduce((x, y) => x + y, 0),
      orphans: row?.orphans === null || row?.orphans === undefined ? null : Number(row.orphans),
    };
  };
  /**
   * A sandbox on node `n`: creates through `via` until placement puts one there (the others, kept
   * meanwhile so that the node they went to counts as more committed, deleted after). Placement
   * prefers a node that holds the template's layers while it is at most a tenth more committed, so
   * a node without them may take a few creates' wait.
   */
  const sandboxOn = async (n: TestNode, via: TestServer = b): Promise<CreatedSandbox> => {
    const others: string[] = [];
    try {
      for (let i = 0; i < 16; i++) {
        const sb = await createSandbox(via);
        if ((await nodeOf(sb.id)) === n.id) return sb;
        others.push(sb.id);
        await new Promise((r) => setTimeout(r, 200));
      }
      const placed = await query<{ node_id: string; n: string }>("SELECT node_id, count(*) AS n FROM sandboxes WHERE status <> 'deleted' GROUP BY node_id");
      assert.fail(`no create was placed on ${n.id}: leased ${[...(await leased())].join(', ')}; live sandboxes by node ${JSON.stringify(placed)}`);
    } finally {
      for (const id of others) await api(via, 'DELETE', `/v1/sandboxes/${id}`);
    }
  };
  const bothUp = () => until('both nodes leased', leased, (s) => nodes.every((n) => s.has(n.id)), 30_000);

  before(async () => {
    postgres = await startPostgres();
    dbUrl = await postgres.createDatabase();
    gatewayPort = await freePort();
    resolveDomainTo(DOMAIN, ADDR.edge);
    const clusterEnv = (bind: string) => ({
      SANDBOXD_DATABASE_URL: dbUrl,
      SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile,
      SANDBOXD_GATEWAY_DOMAIN: DOMAIN,
      SANDBOXD_GATEWAY_PORT: String(gatewayPort),
      SANDBOXD_GATEWAY_BIND: bind,
      SANDBOXD_CLUSTER_CLAIM_SECONDS: String(CLAIM_SECONDS),
      SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '100000',
    });
    // The replicas listen on every address: the namespaced nodes reach them at the host's end of
    // their links.
    const ports = [await freePort(), await freePort()];
    const started = await Promise.allSettled([
      startServer({ command: 'control', templates: ['base'], port: ports[0], env: { ...clusterEnv(ADDR.a), SANDBOXD_HOST: '0.0.0.0' } }),
      startServer({ command: 'control', templates: ['base'], port: ports[1], env: { ...clusterEnv(ADDR.b), SANDBOXD_HOST: '0.0.0.0' } }),
    ]);
    if (started[0].status === 'fulfilled') a = started[0].value;
    if (started[1].status === 'fulfilled') b = started[1].value;
    for (const s of started) if (s.status === 'rejected') throw s.reason;
    // Each node's credential, made by the CLI as an operator does; replica A first in each list.
    for (const id of ['drill-a', 'drill-b']) {
      const credentialFile = join(dirname(keys.signingKeyFile), `${id}.credential`);
      const made = spawnSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'cluster', 'node-credential', id, '--out', credentialFile], {
        env: { ...process.env, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile },
        encoding: 'utf8',
      });
      assert.equal(made.status, 0, made.stderr);
      nodes.push(await startNode({ id, verifyKey: keys.verifyPem, leaseSeconds: LEASE_SECONDS, netns: true, registry: { credentialFile, controlPorts: ports }, env: { ...NO_WARM_POOL, SANDBOXD_CLUSTER_CLAIM_SECONDS: String(CLAIM_SECONDS) } }));
    }
    edge = await startServer({ command: 'edge', env: clusterEnv(ADDR.edge), readyTimeoutMs: 60_000 });
    await bothUp();
  });

  after(async () => {
    await stopAll(
      () => edge?.stop(),
      () => b?.stop(),
      () => a?.stop(),
      ...nodes.map((n) => () => n.stop()),
      () => postgres?.stop(),
      () => keys.remove(),
    );
  });

  test('a control replica dies: every sandbox of every node stays available through the other replica and the edge', async () => {
    const sbs = [await sandboxOn(nodes[0]!)];
    // Not left behind for the later drills' census if the second cannot be placed.
    sbs.push(await sandboxOn(nodes[1]!).catch(async (err: unknown) => {
      await api(b, 'DELETE', `/v1/sandboxes/${sbs[0]!.id}`);
      throw err;
    }));
    await a.kill9();
    try {
      // Longer than a lease: each node must heartbeat through replica B by then, or lose its lease.
      const failures: string[] = [];
      let calls = 0;
      for (const end = Date.now() + (LEASE_SECONDS + 4) * 1000; Date.now() < end; ) {
        for (const sb of sbs) {
          for (const at of [ADDR.b, ADDR.edge]) {
            const r = await run(at, sb);
            calls++;
            if (r.status !== 200) failures.push(`${at} ${sb.id}: ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
          }
        }
        await new Promise((r) => setTimeout(r, 250));
      }
      figure('sandboxes unavailable when one of two control replicas dies', failures.length, `of ${calls} requests`);
      const tail = (file: string, lines: number) => readFileSync(file, 'utf8').split('\n').filter((l) => !l.includes('"level":"debug"')).slice(-lines).join('\n');
      const tails = () => [...nodes.map((n) => `${n.id}:\n${tail(n.logFile, 15)}`), `replica B:\n${tail(b.logFile, 30)}`].join('\n');
      assert.deepEqual(failures, [], tails());
      assert.deepEqual([...(await leased())].sort(), ['drill-a', 'drill-b'], `both nodes kept their leases\n${tails()}`);
    } finally {
      await a.restart();
    }
    for (const sb of sbs) assert.equal((await api(a, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  });

  test('a node hangs: a request to its sandbox gets a clear 503 within 2 s; creates go on, on the other node', async () => {
    const [hung, other] = nodes as [TestNode, TestNode];
    const sb = await sandboxOn(hung);
    assert.equal((await run(ADDR.edge, sb)).status, 200);
    const made: string[] = [];
    hung.signal('SIGSTOP');
    try {
      // Within the node's lease: only its silence tells it has stopped.
      const t0 = performance.now();
      const r = await run(ADDR.edge, sb, 'true', 20_000);
      const ms = Math.round(performance.now() - t0);
      figure('a request to a sandbox on a hung node: time to a clear 503', ms, 'ms');
      assert.equal(r.status, 503, JSON.stringify(r.body));
      assert.equal(r.body.code, 'NODE_UNAVAILABLE', JSON.stringify(r.body));
      assert.ok(ms <= 2000, `the 503 came after ${ms} ms`);
      // Through control too (its gateway relays as the edge does).
      const t1 = performance.now();
      assert.equal((await run(ADDR.b, sb, 'true', 20_000)).status, 503);
      assert.ok(performance.now() - t1 <= 2000);

      let ok = 0;
      const createMs: number[] = [];
      for (let i = 0; i < 4; i++) {
        const t = performance.now();
        const c = await api(b, 'POST', '/v1/sandboxes', { template_name: 'base' });
        createMs.push(performance.now() - t);
        if (c.status === 201) {
          ok++;
          made.push(c.body.id);
          assert.equal(await nodeOf(c.body.id), other.id);
        }
      }
      figure('creates while a node hangs: success', (100 * ok) / 4, '%');
      figure('creates while a node hangs: slowest', Math.round(Math.max(...createMs)), 'ms');
      assert.equal(ok, 4);
    } finally {
      hung.signal('SIGCONT');
    }
    // Back: its sandbox is served again, as it was.
    await until('the hung node serving again', () => run(ADDR.edge, sb), (r) => r.status === 200, 20_000);
    for (const id of [sb.id, ...made]) assert.equal((await api(b, 'DELETE', `/v1/sandboxes/${id}`)).status, 200);
  });

  test('a node is killed: every create in the next 15 s succeeds on the other node; once it is back, nothing runs that no row owns', async () => {
    const [alive, killed] = nodes as [TestNode, TestNode];
    // Both up (the node hung in the drill before is leased again) before one is killed.
    await bothUp();
    await killed.kill9();
    const made: string[] = [];
    let tried = 0;
    const failures: string[] = [];
    try {
      for (const end = Date.now() + 15_000; Date.now() < end; ) {
        tried++;
        const c = await api(a, 'POST', '/v1/sandboxes', { template_name: 'base' });
        if (c.status === 201) {
          made.push(c.body.id);
          assert.equal(await nodeOf(c.body.id), alive.id);
          // Deleted at once: the drill is about where creates go, not how many one node holds.
          assert.equal((await api(a, 'DELETE', `/v1/sandboxes/${c.body.id}`)).status, 200);
        } else failures.push(`${c.status} ${JSON.stringify(c.body).slice(0, 200)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      figure('creates during the 15 s after a node is killed: success', Math.round((100 * made.length) / tried), `% of ${tried}`);
      assert.deepEqual(failures, []);
    } finally {
      await killed.restart();
    }
    await bothUp();
    // A claim interval and a heartbeat later, every container is a row's or a ready one of the
    // node's pool, and no node holds one that no one owns.
    await new Promise((r) => setTimeout(r, 2 * CLAIM_SECONDS * 1000 + (LEASE_SECONDS * 1000) / 3 + 1500));
    for (const n of nodes) {
      const c = await census(n);
      const said = [n.logFile, a.logFile, b.logFile, edge.logFile].flatMap((f) => readFileSync(f, 'utf8').split('\n').filter((l) => c.unowned.some((id) => l.includes(id))));
      const rows = c.unowned.length ? await query('SELECT id, status, node_id, deleted_reason FROM sandboxes WHERE id = ANY($1)', [c.unowned]) : [];
      assert.equal(c.unowned.length, c.warmReady, `containers on ${n.id} that no row owns and its pool does not hold: ${JSON.stringify(c)}\nrows: ${JSON.stringify(rows)}\nlogs:\n${said.join('\n')}`);
      assert.equal(c.orphans, 0, `${n.id} reports orphans: ${JSON.stringify(c)}`);
    }
  });

  test('a node gets SIGTERM while both replicas hold its streams open: it exits within 10 s and leaves only what the store owns', async () => {
    const n = nodes[0]!;
    const sb = await sandboxOn(n);
    // Both replicas watch every node's OOM events (a stream each keeps open) and relay to it.
    assert.equal((await run(ADDR.a, sb)).status, 200);
    assert.equal((await run(ADDR.b, sb)).status, 200);
    const t0 = performance.now();
    await n.shutdown();
    const ms = Math.round(performance.now() - t0);
    figure('node SIGTERM → exit, with two control replicas connected', ms, 'ms');
    assert.ok(ms <= 10_000, `exited after ${ms} ms; its log's end:\n${readFileSync(n.logFile, 'utf8').split('\n').slice(-25).join('\n')}`);
    assert.deepEqual(crunContainers(n.dataDir), [sb.id], 'its sandbox runs on; nothing else is left');
    await n.restart();
    await bothUp();
    await until('its sandbox served again', () => run(ADDR.edge, sb), (r) => r.status === 200, 20_000);
    assert.equal((await api(b, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  });
});
