// A cluster on this machine: PostgreSQL, two `sandboxd node` processes (each its own bridge, subnet,
// cgroup parent and data dir) and `sandboxd control`. Sandboxes are placed over the nodes and served
// through control's gateway across the node relay; a node killed with kill -9 makes its sandboxes
// answer 503 NODE_UNAVAILABLE while the other node goes on; back, it serves them again. One node
// holds the database's credentials, the other registers through control with its own credential.
// Each node keeps a warm pool: a create goes to the node with a ready sandbox of its key, and is
// served from it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Sandbox as HopxSandbox } from '@hopx-ai/sdk';
import { Sandbox } from '@sandboxd/sdk';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { clientFor, sbx } from './sdk-support.js';
import { agent, api, createSandbox, crunContainers, freePort, REPO_ROOT, startServer, stopAll, type CreatedSandbox, type TestServer } from './harness.js';
import { startNode, type TestNode } from './harness-node.js';

const LEASE_SECONDS = 3;

describe('a cluster: control over two nodes, on PostgreSQL', { timeout: 900_000 }, () => {
  let pg: TestPostgres;
  let dbUrl: string;
  const nodes: TestNode[] = [];
  let control: TestServer;
  /** Control signs with the private key (a file); the nodes get the public key only (inline PEM). */
  const keys = testClusterKeyFiles();

  /** `sandboxd nodes list --json` against the cluster's database. */
  const nodesList = () => {
    const r = spawnSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'nodes', 'list', '--json'], { env: { ...process.env, SANDBOXD_DATABASE_URL: dbUrl }, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout) as Array<{ id: string; up: boolean; committed: { active: number }; warmReady: number }>;
  };
  const onNode = async (sb: CreatedSandbox) => {
    const r = await agent<{ stdout: string }>(sb, 'POST', '/commands/run', { command: 'cat /etc/hostname; echo; cat /proc/self/cgroup | head -1' });
    return r;
  };

  before(async () => {
    pg = await startPostgres();
    dbUrl = await pg.createDatabase();
    // Each node keeps one ready sandbox per key it was asked for.
    const warmPool = { SANDBOXD_WARM_POOL_SIZE: '1' };
    nodes.push(await startNode({ id: 'e2e-node-a', verifyKey: keys.verifyPem, databaseUrl: dbUrl, leaseSeconds: LEASE_SECONDS, env: warmPool }));
    // node-b holds no database credentials: it registers through control with its own registry
    // credential (made by the CLI), before control is up, and once control answers.
    const credential = join(dirname(keys.signingKeyFile), 'e2e-node-b.credential');
    const made = spawnSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'cluster', 'node-credential', 'e2e-node-b', '--out', credential], { env: { ...process.env, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile }, encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
    const controlPort = await freePort();
    nodes.push(
      await startNode({ id: 'e2e-node-b', verifyKey: keys.verifyPem, leaseSeconds: LEASE_SECONDS, env: { ...warmPool, SANDBOXD_NODE_CREDENTIAL_FILE: credential, SANDBOXD_CONTROL_URL: `http://127.0.0.1:${controlPort}` } }),
    );
    control = await startServer({
      command: 'control',
      templates: ['base', 'code-interpreter'],
      env: { SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile },
      port: controlPort,
    });
    // node-b registers once control answers (it retries): both listed and up.
    const bothUp = () => {
      const l = nodesList();
      return l.length === 2 && l.every((n) => n.up);
    };
    for (let i = 0; i < 100 && !bothUp(); i++) await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(nodesList().map((n) => [n.id, n.up]).sort(), [['e2e-node-a', true], ['e2e-node-b', true]], 'node-b registered through control');
    assert.ok(!readFileSync(nodes[1]!.logFile, 'utf8').includes('postgresql://'), 'node-b never saw the database');
  });

  after(async () => {
    await stopAll(
      () => control?.stop(),
      ...nodes.map((n) => () => n.stop()),
      () => pg?.stop(),
      () => keys.remove(),
    );
  });

  test('creates are spread over the nodes, and each sandbox is served through control', async () => {
    const sbs: CreatedSandbox[] = [];
    for (let i = 0; i < 4; i++) sbs.push(await createSandbox(control, { template: 'base' }));
    for (const sb of sbs) {
      const r = await onNode(sb);
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    // Both nodes hold some: a node's ready sandboxes draw creates only while it is about as
    // committed as the other (the exact spread of placement is services/cluster-*placement.test's
    // and bench/cluster's).
    const list = nodesList();
    assert.deepEqual(
      list.map((n) => [n.id, n.up]),
      [
        ['e2e-node-a', true],
        ['e2e-node-b', true],
      ],
    );
    assert.equal(list.reduce((n, x) => n + x.committed.active, 0), 4);
    assert.ok(list.every((n) => n.committed.active >= 1), JSON.stringify(list.map((n) => [n.id, n.committed.active])));
    for (const sb of sbs) assert.equal((await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  });

  test("a create is placed on the node that holds a ready sandbox of its key, and served from that node's pool", async () => {
    const [a, b] = nodes as [TestNode, TestNode];
    const nodesCmd = (...args: string[]) => {
      const r = spawnSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'nodes', ...args], { env: { ...process.env, SANDBOXD_DATABASE_URL: dbUrl }, encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
    };
    const warmOnB = () => nodesList().find((n) => n.id === 'e2e-node-b')!.warmReady;
    const settle = async (check: () => boolean) => {
      for (let i = 0; i < 100 && !check(); i++) await new Promise((r) => setTimeout(r, 100));
      return check();
    };
    // A key no create asked for yet (no network), asked of node-b alone (node-a cordoned): node-b
    // boots it, and its pool then keeps one of that key ready and says so in its heartbeat.
    const NO_NET = { template: 'base', internet_access: false };
    const before = warmOnB();
    nodesCmd('cordon', 'e2e-node-a');
    try {
      // Control reads the node list every 2 s.
      await new Promise((r) => setTimeout(r, 2500));
      const first = await createSandbox(control, NO_NET);
      assert.ok(crunContainers(b.dataDir).includes(first.id), 'the first went to node-b (node-a cordoned)');
      assert.equal((await api(control, 'DELETE', `/v1/sandboxes/${first.id}`)).status, 200);
    } finally {
      nodesCmd('uncordon', 'e2e-node-a');
    }
    assert.ok(await settle(() => warmOnB() >= before + 1), `node-b reports one more ready sandbox (${before} before, ${warmOnB()} now)`);
    await new Promise((r) => setTimeout(r, 2500));
    const readyOnB = crunContainers(b.dataDir);
    const warmCreates = async () => {
      const text = await (await fetch(`${control.baseUrl}/metrics`, { headers: { 'x-api-key': control.apiKey } })).text();
      return Number(/^sandboxd_sandbox_creates_total\{template="base",source="warm_pool"\} (\d+)/m.exec(text)?.[1] ?? 0);
    };
    const counted = await warmCreates();
    // Neither node holds a sandbox and both hold the layers: they would tie, and node-a (first by
    // name) would take it. node-b's ready sandbox of the key is what draws it.
    assert.deepEqual(nodesList().map((n) => n.committed.active), [0, 0]);
    const sb = await createSandbox(control, NO_NET);
    try {
      assert.ok(readyOnB.includes(sb.id), `the create got a sandbox node-b had ready (${sb.id}; ready there: ${readyOnB.join(', ')})`);
      assert.ok(!crunContainers(a.dataDir).includes(sb.id));
      assert.equal(await warmCreates(), counted + 1, 'counted as served from the warm pool');
      const r = await agent<{ stdout: string }>(sb, 'POST', '/commands/run', { command: 'echo "$SANDBOX_ID $(hostname)"' });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.stdout.trim(), `${sb.id} sandbox-${sb.id.slice(2, 10)}`, 'its id, hostname and SANDBOX_ID are the ones node-b gave it');
      assert.ok(await settle(() => crunContainers(b.dataDir).some((id) => id !== sb.id && !readyOnB.includes(id))), "node-b's pool boots the next one");
    } finally {
      assert.equal((await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    }
  });

  test('a node killed: its sandboxes answer 503 NODE_UNAVAILABLE, the other node serves and takes the creates; back, all are served again', async () => {
    const sbs: CreatedSandbox[] = [];
    const b = nodes[1]!;
    // One on each node (where a create goes varies with which node's pool has one ready).
    const onB = () => sbs.filter((sb) => crunContainers(b.dataDir).includes(sb.id)).length;
    for (let i = 0; i < 10 && (sbs.length < 2 || onB() === 0 || onB() === sbs.length); i++) sbs.push(await createSandbox(control, { template: 'base' }));
    assert.ok(onB() > 0 && onB() < sbs.length, 'sandboxes on both nodes');
    for (const sb of sbs) await agent(sb, 'POST', '/commands/run', { command: 'echo kept > /tmp/kept' });
    await b.kill9();
    // Which of the two is on node-b: the one whose calls fail once its lease is out.
    const t0 = Date.now();
    let lost: CreatedSandbox | undefined;
    let lostBody: any;
    while (!lost && Date.now() - t0 < 6 * LEASE_SECONDS * 1000) {
      for (const sb of sbs) {
        const r = await onNode(sb);
        if (r.status === 503) {
          lost = sb;
          lostBody = r.body;
        }
      }
      if (!lost) await new Promise((r) => setTimeout(r, 200));
    }
    assert.ok(lost, 'a sandbox of the killed node is reported unavailable');
    const lostAfter = (Date.now() - t0) / 1000;
    assert.equal(lostBody.code, 'NODE_UNAVAILABLE');
    assert.ok(lostAfter <= 2 * LEASE_SECONDS + 2, `reported after ${lostAfter.toFixed(1)} s (lease ${LEASE_SECONDS} s)`);
    const kept = sbs.find((s) => !crunContainers(b.dataDir).includes(s.id))!;
    // The listing says which cannot be served now: once the node's lease ran out (the first 503
    // above came at once, from a refused connection), at the node list's next read (every 2 s).
    const availability = async () => {
      const list = await api<{ data: Array<{ id: string; available?: boolean }> }>(control, 'GET', '/v1/sandboxes?limit=1000');
      return new Map(list.body.data.map((x) => [x.id, x.available]));
    };
    let seen = await availability();
    while (seen.get(lost!.id) !== false && Date.now() - t0 < (2 * LEASE_SECONDS + 3) * 1000) {
      await new Promise((r) => setTimeout(r, 200));
      seen = await availability();
    }
    assert.equal(seen.get(lost!.id), false, `listed as unavailable (${((Date.now() - t0) / 1000).toFixed(1)} s after the kill)`);
    assert.equal(seen.get(kept.id), true, 'the other listed as available');
    assert.equal((await onNode(kept)).status, 200, 'the other node goes on');
    const fresh = await createSandbox(control, { template: 'base' });
    assert.equal((await onNode(fresh)).status, 200, 'a new create lands on the node that is up');

    await b.restart();
    let back = 0;
    for (let i = 0; i < 100 && back !== 200; i++) {
      back = (await onNode(lost)).status;
      if (back !== 200) await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(back, 200, 'served again once its node is back');
    const files = await agent<{ stdout: string }>(lost, 'POST', '/commands/run', { command: 'cat /tmp/kept' });
    assert.equal(files.body.stdout.trim(), 'kept', 'with its files');
    let again = await availability();
    for (let i = 0; i < 30 && again.get(lost.id) !== true; i++) {
      await new Promise((r) => setTimeout(r, 200));
      again = await availability();
    }
    assert.equal(again.get(lost.id), true, 'listed as available again');
    for (const sb of [...sbs, fresh]) assert.equal((await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  });

  test('the unmodified @hopx-ai/sdk, our SDK and the sbx CLI run their flows against control', async () => {
    const opts = { apiKey: control.apiKey, baseURL: control.baseUrl };
    const h = await HopxSandbox.create({ template: 'base', timeoutSeconds: 600, ...opts });
    try {
      assert.equal((await h.runCode('echo "$((6 * 7))"', { language: 'bash' })).stdout, '42\n');
      await h.files.write('/tmp/from-hopx.txt', 'written through control');
      assert.equal(await h.files.read('/tmp/from-hopx.txt'), 'written through control');
      await h.pause();
      await h.resume();
      assert.equal((await h.runCode('cat /tmp/from-hopx.txt', { language: 'bash' })).stdout, 'written through control');
    } finally {
      await h.kill();
    }

    const ours = await Sandbox.create({ client: clientFor(control), template: 'base', envVars: { GREETING: 'hi' } });
    try {
      assert.equal((await ours.commands.run('echo "$GREETING"')).stdout, 'hi\n');
      await ours.files.write('/tmp/ours.txt', 'ours');
      assert.equal(await ours.files.read('/tmp/ours.txt'), 'ours');
    } finally {
      await ours.kill();
    }

    const created = await sbx(control, ['create', '-q', '--template', 'base']);
    const id = created.stdout.trim();
    assert.equal(created.code, 0, created.stderr);
    try {
      const ran = await sbx(control, ['exec', id, '--', 'echo from-cli']);
      assert.equal(ran.code, 0, ran.stderr);
      assert.equal(ran.stdout, 'from-cli\n');
    } finally {
      assert.equal((await sbx(control, ['rm', id])).code, 0);
    }
  });

  test("a preview URL is served by control's gateway through the node's relay", async () => {
    const sb = await createSandbox(control, { template_name: 'code-interpreter' });
    try {
      await agent(sb, 'POST', '/commands/run', { command: 'mkdir -p /srv && echo served-from-a-node > /srv/index.txt && (cd /srv && nohup python3 -m http.server 3000 --bind 127.0.0.1 >/dev/null 2>&1 &)' });
      // Listening, as its node sees it (its kernel tables, through the node API).
      let listening = false;
      for (let i = 0; i < 100 && !listening; i++) {
        const ports = await api<{ data: Array<{ port: number }> }>(control, 'GET', `/v1/sandboxes/${sb.id}/ports`);
        listening = ports.body.data?.some((p) => p.port === 3000) ?? false;
        if (!listening) await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(listening, 'the app listens');
      const preview = (await api<{ url: string }>(control, 'GET', `/v1/sandboxes/${sb.id}/ports/3000`)).body;
      assert.equal((await fetch(`${preview.url}/index.txt`)).status, 401, 'private without the token');
      const ok = await fetch(`${preview.url}/index.txt`, { headers: { 'x-sandboxd-token': sb.authToken } });
      const text = await ok.text();
      assert.equal(ok.status, 200, text);
      assert.equal(text, 'served-from-a-node\n');
    } finally {
      await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });
});
