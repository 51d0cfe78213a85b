// Templates everywhere: a node with a layers directory of its own (empty), its API over TLS, gets a
// create; it fetches the template's layers from control once, verified by digest, and keeps them
// while a sandbox uses them: its copy is the same tree (the same content digest), and a later create
// there fetches nothing. Its cache has a budget of almost nothing: once no sandbox uses them the
// layers go, its heartbeat says so, and the next create fetches them again. Prints the figure: the
// first create on a node without the layers against a later one, with the size moved.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pgLib from 'pg';
import { digestLayerTree } from '../../packages/server/dist/images/layer-tar.js';
import { layersDigestOf } from '../../packages/server/dist/node/membership.js';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { makeTestTls } from '../../packages/server/dist/testing/tls.js';
import { agent, api, createSandbox, startServer, stopAll, TEST_DATA_DIR, type CreatedSandbox, type TestServer } from './harness.js';
import { startNode, type TestNode } from './harness-node.js';

const FETCHED_RE = /fetched layer ([0-9a-f]{12}) \(([\d.]+) MB\) from control in ([\d.]+) s/g;

describe('a node without the layers of a template fetches them from control, once', { timeout: 900_000 }, () => {
  let pg: TestPostgres;
  let node: TestNode;
  let control: TestServer;
  const keys = testClusterKeyFiles();
  const tls = makeTestTls(['IP:127.0.0.1']);
  const nodeLayers = join(TEST_DATA_DIR, 'nodes', `own-layers-${randomBytes(3).toString('hex')}`);
  let dbUrlOf = '';
  /** The layers the first create fetched (short ids). */
  let baseLayers: string[] = [];

  before(async () => {
    pg = await startPostgres();
    const dbUrl = await pg.createDatabase();
    // The folder of the nodes' data dirs stays searchable (a sandbox's files are reached through it):
    // only the layers directory itself is private. (Made 0700 in one step with its parent, it
    // failed every node started after it on a machine that had never run the suite.)
    mkdirSync(dirname(nodeLayers), { recursive: true });
    mkdirSync(nodeLayers, { mode: 0o700 });
    dbUrlOf = dbUrl;
    // No warm pool on the node: each create below boots, so the first is the one that meets the
    // missing layers. Its API over TLS, with a certificate of the cluster's CA: every call below
    // (verbs, the agent relay, the snapshot's layer) goes over it. A layers budget of ~1 KB: every
    // layer no sandbox holds goes once it is a second old.
    node = await startNode({
      id: 'e2e-node-own-layers',
      verifyKey: keys.verifyPem,
      databaseUrl: dbUrl,
      env: {
        SANDBOXD_LAYERS_DIR: nodeLayers,
        SANDBOXD_WARM_POOL_SIZE: '0',
        SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0',
        SANDBOXD_NODE_TLS_CERT_FILE: tls.certFile,
        SANDBOXD_NODE_TLS_KEY_FILE: tls.keyFile,
        SANDBOXD_NODE_LAYER_CACHE_GB: '0.000001',
        SANDBOXD_NODE_LAYER_MIN_AGE_SECONDS: '1',
      },
    });
    assert.match(readFileSync(node.logFile, 'utf8'), /serves its runtime at https:\/\/127\.0\.0\.1:/);
    control = await startServer({
      command: 'control',
      templates: ['base'],
      env: { SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile, SANDBOXD_CLUSTER_CA_FILE: tls.caFile },
    });
  });

  after(async () => {
    await stopAll(
      () => control?.stop(),
      () => node?.stop(),
      () => pg?.stop(),
      () => keys.remove(),
      () => tls.remove(),
      () => rmSync(nodeLayers, { recursive: true, force: true }),
    );
  });

  const fetched = () => [...readFileSync(node.logFile, 'utf8').matchAll(FETCHED_RE)].map((m) => ({ id: m[1]!, mb: Number(m[2]), seconds: Number(m[3]) }));

  test('the first create fetches the layers, the node keeps the same tree, the second create fetches nothing', async () => {
    assert.deepEqual(readdirSync(nodeLayers).filter((n) => /^[0-9a-f]{64}$/.test(n)), [], 'the node starts with no layer');
    const t0 = performance.now();
    const first = await createSandbox(control, { template_name: 'base' }).catch((err: unknown) => {
      // What failed, as the two processes saw it.
      throw new Error(`${String(err)}\n--- control:\n${readFileSync(control.logFile, 'utf8').slice(-3000)}\n--- node:\n${readFileSync(node.logFile, 'utf8').slice(-3000)}`);
    });
    const firstMs = performance.now() - t0;
    const r = await agent<{ stdout: string }>(first, 'POST', '/commands/run', { command: 'cat /etc/debian_version' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.match(r.body.stdout, /^\d+/);

    const moved = fetched();
    assert.ok(moved.length >= 1, readFileSync(node.logFile, 'utf8').slice(-3000));
    baseLayers = moved.map((m) => m.id).sort();
    const ids = readdirSync(nodeLayers).filter((n) => /^[0-9a-f]{64}$/.test(n));
    assert.deepEqual(ids.map((id) => id.slice(0, 12)).sort(), moved.map((m) => m.id).sort());
    for (const id of ids) {
      const mine = JSON.parse(readFileSync(join(nodeLayers, id, 'content.json'), 'utf8')) as { digest: string; bytes: number };
      const controls = JSON.parse(readFileSync(join(TEST_DATA_DIR, 'layers', id, 'content.json'), 'utf8')) as { digest: string; bytes: number };
      assert.equal(mine.digest, controls.digest);
      // The node's copy, read again, is the very tree control has: owners, modes, times, links.
      assert.deepEqual(await digestLayerTree(join(nodeLayers, id, 'tree')), { digest: controls.digest, bytes: controls.bytes });
      assert.ok(existsSync(join(nodeLayers, id, 'meta.json')));
    }

    const t1 = performance.now();
    const second = await createSandbox(control, { template_name: 'base' });
    const secondMs = performance.now() - t1;
    assert.equal((await agent(second, 'POST', '/commands/run', { command: 'true' })).status, 200);
    assert.equal(fetched().length, moved.length, 'the second create fetched nothing');

    const mb = moved.reduce((n, m) => n + m.mb, 0);
    const fetchS = moved.reduce((n, m) => n + m.seconds, 0);
    process.stdout.write(
      `# figure: first create of 'base' on a node without its layers: ${(firstMs / 1000).toFixed(2)} s, of which fetching ${moved.length} layer(s), ${mb.toFixed(1)} MB, ${fetchS.toFixed(1)} s; a later create there: ${(secondMs / 1000).toFixed(2)} s\n`,
    );
    for (const sb of [first, second]) assert.equal((await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  });

  test('over its budget, the node evicts the layers no sandbox uses any more; its heartbeat reports the set without them; the next create fetches them again', async () => {
    const ownLayers = () => readdirSync(nodeLayers).filter((n) => /^[0-9a-f]{64}$/.test(n));
    const until = async (what: string, ok: () => Promise<boolean> | boolean, ms = 30_000) => {
      for (const deadline = Date.now() + ms; !(await ok()); await new Promise((r) => setTimeout(r, 250))) {
        if (Date.now() > deadline) throw new Error(`${what}: not within ${ms / 1000} s\n--- node:\n${readFileSync(node.logFile, 'utf8').slice(-3000)}`);
      }
    };
    // The sandboxes of the first test are deleted: nothing holds 'base' here any more.
    await until('the layers evicted', () => ownLayers().length === 0);
    const log = readFileSync(node.logFile, 'utf8');
    for (const id of baseLayers) assert.match(log, new RegExp(`evicted layer ${id} \\([\\d.]+ MB, unused for [\\d.]+ h\\): .*over the budget`));
    // Renamed away first, then deleted: nothing half-removed is left once the deletion is done.
    await until('the evicted trees deleted', () => readdirSync(nodeLayers).filter((n) => n.startsWith('.tmp-')).length === 0);
    // Control reads a node's layers when its heartbeat's digest changes: it is the empty set's now.
    const db = new pgLib.Client({ connectionString: dbUrlOf });
    await db.connect();
    try {
      const digest = async () => (await db.query<{ layers_digest: string | null }>('SELECT layers_digest FROM nodes WHERE id = $1', [node.id])).rows[0]?.layers_digest;
      await until('the heartbeat reporting no layers', async () => (await digest()) === layersDigestOf([]));
    } finally {
      await db.end();
    }
    const before = fetched().length;
    const sb = await createSandbox(control, { template_name: 'base' });
    try {
      assert.equal((await agent(sb, 'POST', '/commands/run', { command: 'true' })).status, 200);
      assert.deepEqual(fetched().slice(before).map((m) => m.id).sort(), baseLayers, 'fetched again, each once');
      // Held while the sandbox exists, however small the budget.
      await new Promise((r) => setTimeout(r, 2500));
      assert.deepEqual(ownLayers().map((id) => id.slice(0, 12)).sort(), baseLayers);
    } finally {
      assert.equal((await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    }
  });

  test("a template built through control (its steps run on control's machine) is served to the node, which fetches its layers", async () => {
    const before = fetched().length;
    const marker = `built-in-the-cluster-${Date.now()}`;
    const res = await api<{ build_id: string }>(control, 'POST', '/v1/templates/build', {
      alias: 'cluster-built',
      cpu: 1,
      memory: 256,
      diskGB: 1,
      steps: [
        { type: 'from', image: 'debian:11' },
        { type: 'run', command: `echo ${marker} > /opt/marker` },
      ],
    });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    let status: { status: string; error_message?: string | null } = { status: 'building' };
    for (const deadline = Date.now() + 900_000; status.status === 'building' && Date.now() < deadline; ) {
      await new Promise((r) => setTimeout(r, 500));
      status = (await api<typeof status>(control, 'GET', `/v1/templates/build/${res.body.build_id}/status`)).body;
    }
    assert.equal(status.status, 'active', JSON.stringify(status));
    const sb = await createSandbox(control, { template_name: 'cluster-built' }).catch((err: unknown) => {
      throw new Error(`${String(err)}\n--- control:\n${readFileSync(control.logFile, 'utf8').slice(-3000)}\n--- node:\n${readFileSync(node.logFile, 'utf8').slice(-3000)}`);
    });
    try {
      const r = await agent<{ stdout: string }>(sb, 'POST', '/commands/run', { command: 'cat', args: ['/opt/marker'] });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.stdout, `${marker}\n`);
      assert.ok(fetched().length > before, 'the node fetched the built layers');
    } finally {
      assert.equal((await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    }
  });

  test("a snapshot of a sandbox on a node: its files come to control as a layer; a create from it, a fork and a restore boot on the node, which fetches that layer", async () => {
    const asSandbox = (b: any): CreatedSandbox => ({ id: b.id, publicHost: b.public_host, authToken: b.auth_token, body: b });
    const sh = async (sb: CreatedSandbox, command: string) => {
      const r = await agent<{ stdout: string; exit_code: number }>(sb, 'POST', '/commands/run', { command });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body.stdout;
    };
    const src = await createSandbox(control, { template_name: 'base' });
    await sh(src, 'mkdir -p /workspace/proj && echo kept > /workspace/proj/a.txt && ln -s a.txt /workspace/proj/link && rm -f /etc/motd');
    const before = fetched().length;
    const snap = await api(control, 'POST', `/v1/sandboxes/${src.id}/snapshots`, { name: 'on-a-node' });
    assert.equal(snap.status, 201, JSON.stringify(snap.body));
    assert.deepEqual(readdirSync(join(node.dataDir, 'exports')), [], "no copy left on the node once sent");

    // A create from it: the node lacks the snapshot's layer and fetches it.
    const made = await api(control, 'POST', '/v1/sandboxes', { snapshot_id: snap.body.snapshot_id });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const copy = asSandbox(made.body);
    assert.equal(await sh(copy, 'cat /workspace/proj/link; test -e /etc/motd && echo motd || echo no-motd'), 'kept\nno-motd\n', 'files, links and deletions come through');
    assert.equal(fetched().length, before + 1, 'one layer fetched: the snapshot\'s');

    // A fork copies the files as they are now; a restore goes back to the snapshot.
    await sh(src, 'echo later > /workspace/proj/b.txt');
    const forked = await api(control, 'POST', `/v1/sandboxes/${src.id}/fork`, { count: 1 });
    assert.equal(forked.status, 201, JSON.stringify(forked.body));
    assert.equal(await sh(asSandbox(forked.body.data[0]), 'cat /workspace/proj/b.txt'), 'later\n');
    const back = await api(control, 'POST', `/v1/sandboxes/${src.id}/restore`, { snapshot_id: snap.body.snapshot_id });
    assert.equal(back.status, 200, JSON.stringify(back.body));
    assert.equal(await sh(src, 'ls /workspace/proj'), 'a.txt\nlink\n');
    assert.deepEqual(readdirSync(join(node.dataDir, 'exports')), [], 'nor after the fork');
  });
});
