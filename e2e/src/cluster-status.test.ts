// Seeing the cluster (issue 29, item 6): PostgreSQL, two nodes (one on the database, one through
// control's registry with its own credential), control and an edge. `sandboxd cluster status`
// reads it all from the store (the replica and the edge record themselves, the nodes their leases
// and orphans) and fails, for scripts, when something is wrong: a node lost with sandboxes, no
// control up. The admin API lists the same nodes, and names a sandbox's node to the operator.
// Idle, control, the nodes and the edge say next to nothing at info (heartbeats are at debug).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { api, createSandbox, freePort, REPO_ROOT, startServer, stopAll, type TestServer } from './harness.js';
import { startNode, type TestNode } from './harness-node.js';
import { loggedDuring, shown } from './log-lines.js';

const LEASE_SECONDS = 3;
const CLI = join(REPO_ROOT, 'packages/server/dist/cli.js');

describe('seeing the cluster: cluster status, the admin nodes, quiet logs', { timeout: 900_000 }, () => {
  let pg: TestPostgres;
  let dbUrl: string;
  const nodes: TestNode[] = [];
  let control: TestServer;
  let edge: TestServer;
  const keys = testClusterKeyFiles();

  /** `sandboxd cluster status` against the cluster's database: its exit status, its text or JSON. */
  const status = (json = true) => {
    const r = spawnSync(process.execPath, [CLI, 'cluster', 'status', ...(json ? ['--json'] : [])], { env: { ...process.env, SANDBOXD_DATABASE_URL: dbUrl }, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.stderr, '');
    return { code: r.status, out: r.stdout, json: json ? JSON.parse(r.stdout) : undefined };
  };
  const until = async <T>(what: string, fn: () => T | Promise<T>, ok: (v: T) => boolean, ms = 30_000): Promise<T> => {
    const deadline = Date.now() + ms;
    let last: T;
    do {
      last = await fn();
      if (ok(last)) return last;
      await new Promise((r) => setTimeout(r, 250));
    } while (Date.now() < deadline);
    assert.fail(`${what}: still ${JSON.stringify(last).slice(0, 1500)}`);
  };

  before(async () => {
    pg = await startPostgres();
    dbUrl = await pg.createDatabase();
    // The collector looks every 5 s at the least: orphans are counted soon after a node registers.
    const grace = { SANDBOXD_NODE_ORPHAN_GRACE_SECONDS: '20' };
    nodes.push(await startNode({ id: 'st-node-a', verifyKey: keys.verifyPem, databaseUrl: dbUrl, leaseSeconds: LEASE_SECONDS, env: grace }));
    const credential = join(dirname(keys.signingKeyFile), 'st-node-b.credential');
    const made = spawnSync(process.execPath, [CLI, 'cluster', 'node-credential', 'st-node-b', '--out', credential], { env: { ...process.env, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile }, encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
    const controlPort = await freePort();
    nodes.push(await startNode({ id: 'st-node-b', verifyKey: keys.verifyPem, leaseSeconds: LEASE_SECONDS, env: { ...grace, SANDBOXD_NODE_CREDENTIAL_FILE: credential, SANDBOXD_CONTROL_URL: `http://127.0.0.1:${controlPort}` } }));
    const cluster = { SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile };
    control = await startServer({ command: 'control', templates: ['base'], env: cluster, port: controlPort });
    edge = await startServer({
      command: 'edge',
      env: { ...cluster, SANDBOXD_GATEWAY_DOMAIN: 'status.test', SANDBOXD_GATEWAY_PORT: String(await freePort()), SANDBOXD_GATEWAY_BIND: '127.0.0.1' },
      readyTimeoutMs: 60_000,
    });
  });

  after(async () => {
    await stopAll(
      () => edge?.stop(),
      () => control?.stop(),
      ...nodes.map((n) => () => n.stop()),
      () => pg?.stop(),
      () => keys.remove(),
    );
  });

  test('all up: OK (exit 0) with the replica, the edge and both nodes and their leases; the admin API lists the same nodes and names a sandbox\'s', async () => {
    // Both nodes up and counting orphans (each after its collector's first look and the next heartbeat).
    const s = await until('both nodes up, counting orphans', () => status(), (x) => x.json.nodes.length === 2 && x.json.nodes.every((n: any) => n.up && n.reported.orphans !== null));
    assert.equal(s.code, 0, s.out);
    assert.equal(s.json.verdict, 'ok', JSON.stringify([s.json.problems, s.json.warnings]));
    assert.equal(s.json.mode, 'cluster');
    assert.deepEqual([s.json.store.dialect, s.json.store.reachable, s.json.store.schema_version], ['postgres', true, s.json.store.schema_latest]);
    assert.deepEqual(s.json.replicas.map((r: any) => [r.role, r.state, r.url, r.pid]), [['control', 'up', control.baseUrl, control.pid]]);
    assert.deepEqual(s.json.edges.map((r: any) => [r.role, r.state, r.url, r.pid]), [['edge', 'up', edge.baseUrl, edge.pid]]);
    assert.deepEqual(s.json.nodes.map((n: any) => [n.id, n.status, n.url]), [['st-node-a', 'active', nodes[0]!.url], ['st-node-b', 'active', nodes[1]!.url]]);
    assert.equal(s.json.orphans, 0);
    const text = status(false);
    assert.equal(text.code, 0);
    assert.match(text.out, /^control {4}1 up$/m);
    assert.match(text.out, /^edges {6}1 up$/m);
    assert.match(text.out, /^nodes {6}2 up$/m);
    assert.match(text.out, /^ {2}st-node-a +active +up \(beat \d+ s ago\)/m);
    assert.match(text.out, /^verdict {4}OK$/m);

    const sb = await createSandbox(control, { template_name: 'base' });
    try {
      const got = await api(control, 'GET', `/v1/sandboxes/${sb.id}`);
      const holder = got.body.node as string;
      assert.ok(['st-node-a', 'st-node-b'].includes(holder), `the operator's key sees its node: ${JSON.stringify(got.body)}`);
      const listed = await api(control, 'GET', '/v1/admin/nodes');
      assert.equal(listed.status, 200);
      assert.equal(listed.body.mode, 'cluster');
      const byId = new Map(listed.body.data.map((n: any) => [n.id, n]));
      assert.deepEqual([...byId.keys()], ['st-node-a', 'st-node-b']);
      assert.equal((byId.get(holder) as any).committed.active, 1);
      assert.ok((byId.get(holder) as any).up);
      assert.equal(status().json.nodes.find((n: any) => n.id === holder).committed.active, 1, 'cluster status counts it on its node');
      // A tenant's key sees no node.
      const tenant = await api(control, 'POST', '/v1/admin/keys', { org: 'default', name: 'tenant-like', scopes: ['sandboxes:read'] });
      const asTenant = await api({ baseUrl: control.baseUrl, apiKey: tenant.body.secret }, 'GET', `/v1/sandboxes/${sb.id}`);
      assert.equal(asTenant.status, 200);
      assert.equal('node' in asTenant.body, false);
      assert.equal((await api({ baseUrl: control.baseUrl, apiKey: tenant.body.secret }, 'GET', '/v1/admin/nodes')).status, 403);
    } finally {
      await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });

  test('idle, control, the nodes and the edge each write at most a line at info in 10 s (heartbeats, registry calls and refills are at debug)', async () => {
    await new Promise((r) => setTimeout(r, 1000));
    const seen = await loggedDuring([control.logFile, edge.logFile, ...nodes.map((n) => n.logFile)], 10_000);
    for (const { file, events, plain } of seen) {
      assert.deepEqual(plain, [], `${file}: plain text inside the JSON stream`);
      assert.ok(events.length <= 1, `${file}: info lines while idle:\n${events.map(shown).join('\n')}`);
    }
    // The registry's heartbeats of st-node-b (one a second) are in control's log, at debug.
    const debugOnly = spawnSync('grep', ['-c', '"route":"/internal/v1/nodes/:id/heartbeat"', control.logFile], { encoding: 'utf8' });
    assert.equal(debugOnly.stdout.trim(), '0', 'at the default level (info), no heartbeat request is written at all');
  });

  test('a node killed with a sandbox on it: exit 1 naming it, lost in the admin API; back, OK again', async () => {
    const sb = await createSandbox(control, { template_name: 'base' });
    const holder = (await api(control, 'GET', `/v1/sandboxes/${sb.id}`)).body.node as string;
    const node = nodes.find((n) => n.id === holder)!;
    try {
      await node.kill9();
      const s = await until('the node lost', () => status(), (x) => x.code === 1);
      assert.equal(s.json.verdict, 'degraded');
      assert.match(s.json.problems.join('\n'), new RegExp(`^node ${holder} is lost: its last heartbeat was \\d+ s ago, with 1 sandbox\\(es\\) on it`, 'm'));
      const text = status(false);
      assert.equal(text.code, 1);
      assert.match(text.out, new RegExp(`^ {2}${holder} +active +LOST`, 'm'));
      assert.match(text.out, new RegExp(`^verdict {4}DEGRADED: node ${holder} is lost`, 'm'));
      const listed = await api(control, 'GET', '/v1/admin/nodes');
      assert.equal(listed.body.data.find((n: any) => n.id === holder).up, false);

      await node.restart();
      await until('the node back', () => status(), (x) => x.code === 0 && x.json.nodes.every((n: any) => n.up));
    } finally {
      await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });

  test('the edge and control stopped in order: each says so; no control up is DOWN (exit 1)', async () => {
    await edge.shutdown();
    await control.shutdown();
    const s = status();
    assert.equal(s.code, 1);
    assert.equal(s.json.verdict, 'down');
    assert.deepEqual([s.json.replicas.map((r: any) => r.state), s.json.edges.map((r: any) => r.state)], [['stopped'], ['stopped']]);
    assert.match(s.json.problems[0], /^no control replica is up: the last, .+, stopped \d+ s ago$/);
    assert.match(status(false).out, /^verdict {4}DOWN: no control replica is up/m);
  });
});
