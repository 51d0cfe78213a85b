// The whole cluster on this machine: PostgreSQL, three nodes each in a network namespace of its
// own, two control replicas and an edge. Every replica serves every sandbox (the API, its
// public_host, its previews, the events), whichever made it; the unmodified @hopx-ai/sdk, our SDK
// and sbx run their flows through it (public_host leads to the edge, as a wildcard DNS name
// would); a replica killed in the middle of a burst of creates leaves no sandbox the store does
// not know; PostgreSQL restarted, the edge keeps serving the sandboxes it knows; the edge
// restarted, everything else goes on.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { Sandbox as HopxSandbox } from '@hopx-ai/sdk';
import { Sandbox } from '@sandboxd/sdk';
import pg from 'pg';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { api, createSandbox, crunContainers, freePort, startServer, stopAll, type CreatedSandbox, type TestServer } from './harness.js';
import { startNode, type TestNode } from './harness-node.js';
import { until, viaGateway } from './cluster-support.js';
import { NODE_NETNS_RANGE } from './node-netns.js';
import { clientFor, sbx } from './sdk-support.js';
import { childEnv, resolveDomainTo } from './test-dns.js';

const DOMAIN = 'cluster.test';
const GRACE_SECONDS = 10;
/** The nodes' warm pools off: every sandbox on a node is then a create's, for the orphan test. */
const NO_WARM_POOL = { SANDBOXD_WARM_POOL_SIZE: '0', SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0' };

/**
 * Each gateway listens on the same port (the one every public_host names) on an address of its own:
 * control A's, control B's and the edge's. *.cluster.test resolves to the edge's, as DNS would.
 */
const ADDR = { a: '127.0.0.2', b: '127.0.0.3', edge: '127.0.0.4' } as const;
let GATEWAY_PORT = 0;

/** A call to a sandbox's agent through one gateway, by Host header. */
const via = (address: string, host: string, method: string, path: string, token: string, body?: unknown) => viaGateway(address, GATEWAY_PORT, host, method, path, token, body);

/** Server-sent events of a stream, as they come. */
function sse(url: string, apiKey: string): Promise<{ events: Array<{ event: string; data: any }>; close: () => void }> {
  return new Promise((resolve, reject) => {
    const events: Array<{ event: string; data: any }> = [];
    const req = request(url, { headers: { 'x-api-key': apiKey, accept: 'text/event-stream' } }, (res: IncomingMessage) => {
      if (res.statusCode !== 200) return reject(new Error(`events: ${res.statusCode}`));
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        buf += c;
        for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (event && data) events.push({ event, data: JSON.parse(data) });
        }
      });
      res.on('error', () => undefined);
      resolve({ events, close: () => req.destroy() });
    });
    req.on('error', reject);
    req.end();
  });
}

describe('a cluster of three namespaced nodes, two control replicas and an edge', { timeout: 900_000 }, () => {
  let postgres: TestPostgres;
  let dbUrl: string;
  const nodes: TestNode[] = [];
  let a: TestServer;
  let b: TestServer;
  let edge: TestServer;
  const host = (id: string) => `${id}.${DOMAIN}`;
  const keys = testClusterKeyFiles();

  const clusterEnv = (bind: string) => ({
    SANDBOXD_DATABASE_URL: dbUrl,
    SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile,
    SANDBOXD_GATEWAY_DOMAIN: DOMAIN,
    SANDBOXD_GATEWAY_PORT: String(GATEWAY_PORT),
    SANDBOXD_GATEWAY_BIND: bind,
    SANDBOXD_CLUSTER_CLAIM_SECONDS: '2',
  });

  /** Every sandbox the nodes run, and every live sandbox the store records. */
  const census = async () => {
    const running = nodes.flatMap((n) => crunContainers(n.dataDir));
    const client = new pg.Client({ connectionString: dbUrl });
    await client.connect();
    try {
      const rows = (await client.query<{ id: string }>("SELECT id FROM sandboxes WHERE status <> 'deleted'")).rows.map((r) => r.id);
      return { running: running.sort(), recorded: new Set(rows) };
    } finally {
      await client.end();
    }
  };

  before(async () => {
    postgres = await startPostgres({ clients: [NODE_NETNS_RANGE] });
    dbUrl = await postgres.createDatabase();
    // One at a time: each start claims a slot and sets up its host side.
    for (const id of ['rep-node-a', 'rep-node-b', 'rep-node-c']) {
      nodes.push(await startNode({ id, verifyKey: keys.verifyPem, databaseUrl: dbUrl, leaseSeconds: 3, netns: true, env: { SANDBOXD_NODE_ORPHAN_GRACE_SECONDS: String(GRACE_SECONDS), ...NO_WARM_POOL } }));
    }
    GATEWAY_PORT = await freePort();
    resolveDomainTo(DOMAIN, ADDR.edge);
    // Two replicas starting together: they migrate, reconcile and take the signing key in turn.
    // Each replica's API where the namespaced nodes reach it (a host address of theirs), to fetch
    // the layers only it holds (a snapshot's).
    const replica = async (bind: string) => {
      const port = await freePort();
      const env = { ...clusterEnv(bind), SANDBOXD_HOST: '0.0.0.0', SANDBOXD_CONTROL_URL: `http://${nodes[0]!.netns!.hostAddress}:${port}` };
      return startServer({ command: 'control', templates: ['base', 'code-interpreter'], env, port });
    };
    // Both kept for the clean-up even when the other failed to start (a replica left running
    // would keep this file's process alive until its timeout).
    const started = await Promise.allSettled([replica(ADDR.a), replica(ADDR.b)]);
    if (started[0].status === 'fulfilled') a = started[0].value;
    if (started[1].status === 'fulfilled') b = started[1].value;
    for (const s of started) if (s.status === 'rejected') throw s.reason;
    edge = await startServer({ command: 'edge', env: clusterEnv(ADDR.edge), readyTimeoutMs: 60_000 });
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

  test('a sandbox made through one replica is served by the other and by the edge; paused or deleted through one, every one sees it at once', async () => {
    const sb = await createSandbox(a, { template: 'base' });
    assert.equal(sb.publicHost, `http://${host(sb.id)}:${GATEWAY_PORT}`);
    assert.equal((await api(b, 'GET', `/v1/sandboxes/${sb.id}`)).status, 200, 'the other replica knows it');
    for (const port of [ADDR.a, ADDR.b, ADDR.edge]) {
      const r = await via(port, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'echo', args: ['hi'] });
      assert.equal(r.status, 200, `gateway ${port}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.stdout, 'hi\n');
    }
    // Known to every gateway now: a pause through B reaches A's and the edge's routes.
    assert.equal((await api(b, 'POST', `/v1/sandboxes/${sb.id}/pause`)).status, 200);
    for (const port of [ADDR.a, ADDR.edge]) {
      const r = await until(`gateway ${port} after the pause`, () => via(port, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' }), (x) => x.status !== 200);
      assert.equal(r.body.code, 'SANDBOX_PAUSED', JSON.stringify(r.body));
    }
    assert.equal((await api(a, 'POST', `/v1/sandboxes/${sb.id}/resume`)).status, 200);
    await until('the edge after the resume', () => via(ADDR.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' }), (x) => x.status === 200);
    assert.equal((await api(b, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    for (const port of [ADDR.a, ADDR.edge]) {
      await until(`gateway ${port} after the delete`, () => via(port, host(sb.id), 'GET', '/info', sb.authToken), (x) => x.status === 404);
    }
  });

  test("one replica's events reach the other's streams", async () => {
    const stream = await sse(`${b.baseUrl}/v1/events`, b.apiKey);
    try {
      const sb = await createSandbox(a, { template: 'base' });
      await until('the created event on B', async () => stream.events, (es) => es.some((e) => e.event === 'created' && e.data.id === sb.id));
      assert.equal((await api(a, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
      await until('the deleted event on B', async () => stream.events, (es) => es.some((e) => e.event === 'deleted' && e.data.id === sb.id));
    } finally {
      stream.close();
    }
  });

  test("a snapshot taken through one replica is restored through the other: its node fetches the layer from the replica that holds it", async () => {
    const sb = await createSandbox(a, { template: 'base' });
    const run = async (id: string, token: string, command: string) => {
      const r = await via(ADDR.edge, host(id), 'POST', '/commands/run', token, { command });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body.stdout as string;
    };
    await run(sb.id, sb.authToken, 'mkdir -p /workspace && echo from-a > /workspace/kept.txt');
    const snap = await api(a, 'POST', `/v1/sandboxes/${sb.id}/snapshots`, {});
    assert.equal(snap.status, 201, JSON.stringify(snap.body));
    const made = await api(b, 'POST', '/v1/sandboxes', { snapshot_id: snap.body.snapshot_id });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal(await run(made.body.id, made.body.auth_token, 'cat /workspace/kept.txt'), 'from-a\n');
    for (const id of [sb.id, made.body.id]) assert.equal((await api(b, 'DELETE', `/v1/sandboxes/${id}`)).status, 200);
  });

  test('a preview made public through one replica is served by the edge without a token, and private again through the other', async () => {
    const sb = await createSandbox(a, { template_name: 'code-interpreter' });
    try {
      await via(ADDR.a, host(sb.id), 'POST', '/commands/run', sb.authToken, {
        command: 'sh',
        args: ['-c', 'mkdir -p /srv && echo from-a-replica > /srv/i.txt && (cd /srv && nohup python3 -m http.server 3000 --bind 127.0.0.1 >/dev/null 2>&1 &)'],
      });
      const made = await api<{ url: string; public: boolean }>(a, 'PUT', `/v1/sandboxes/${sb.id}/ports/3000`, { public: true });
      assert.equal(made.status, 200, JSON.stringify(made.body));
      const previewHost = `3000-${sb.id}.${DOMAIN}`;
      const served = await until('the public preview on the edge', () => via(ADDR.edge, previewHost, 'GET', '/i.txt', ''), (x) => x.status === 200);
      assert.equal(served.body, 'from-a-replica\n');
      assert.equal((await api(b, 'PUT', `/v1/sandboxes/${sb.id}/ports/3000`, { public: false })).status, 200);
      await until('the preview private again on the edge', () => via(ADDR.edge, previewHost, 'GET', '/i.txt', ''), (x) => x.status === 401);
    } finally {
      await api(a, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });

  test('PostgreSQL restarted: the edge keeps serving a sandbox it knows; the API answers 503 meanwhile, and all is well after', async () => {
    const sb = await createSandbox(b, { template: 'base' });
    try {
      assert.equal((await via(ADDR.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' })).status, 200);
      await postgres.restart(async () => {
        const t0 = Date.now();
        const r = await via(ADDR.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'echo', args: ['still'] });
        // (On a failure, the edge's own account of it.)
        assert.equal(r.status, 200, `${JSON.stringify(r.body)}\n${r.status === 200 ? '' : readFileSync(edge.logFile, 'utf8').slice(-4000)}`);
        assert.equal(r.body.stdout, 'still\n');
        assert.ok(Date.now() - t0 < 15_000, `served in ${Date.now() - t0} ms`);
        assert.equal((await api(a, 'GET', `/v1/sandboxes/${sb.id}`)).status, 503);
      });
      await until('the API after the restart', () => api(a, 'GET', `/v1/sandboxes/${sb.id}`), (x) => x.status === 200, 15_000);
      // Messages sent while the store was away are lost: every route is read again after it.
      // (Its node's lease is renewed within a third of it once the store is back.)
      await until('a pause after the restart', () => api(a, 'POST', `/v1/sandboxes/${sb.id}/pause`), (x) => x.status === 200, 10_000);
      await until('the edge sees the pause made after the restart', () => via(ADDR.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' }), (x) => x.status !== 200, 10_000);
    } finally {
      await api(b, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });

  test('a node cut off from the network: within two leases its sandboxes answer 503 NODE_UNAVAILABLE and are listed unavailable, the others serve and take the creates; reconnected, it serves them again with their files', async () => {
    const made: CreatedSandbox[] = [];
    for (let i = 0; i < 3; i++) made.push(await createSandbox(a, { template: 'base' }));
    for (const sb of made) assert.equal((await via(ADDR.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'sh', args: ['-c', 'echo kept > /tmp/kept'] })).status, 200);
    const holder = nodes.find((n) => crunContainers(n.dataDir).includes(made[0]!.id))!;
    const mine = made.filter((sb) => crunContainers(holder.dataDir).includes(sb.id));
    const others = made.filter((sb) => !mine.includes(sb));
    const t0 = Date.now();
    execFileSync('ip', ['link', 'set', holder.netns!.hostVeth, 'down']);
    try {
      // Its lease runs out (it cannot heartbeat): from then on, it is reported away at once. (A
      // call already under way when the link went down waits for its own timeout, as any would.)
      await until(
        'its sandbox listed unavailable',
        () => api<{ available?: boolean }>(b, 'GET', `/v1/sandboxes/${mine[0]!.id}`),
        (r) => r.body.available === false,
        4 * 3 * 1000,
      );
      const after = (Date.now() - t0) / 1000;
      assert.ok(after <= 2 * 3 + 1, `reported after ${after.toFixed(1)} s (lease 3 s)`);
      const t1 = Date.now();
      const cut = await api(b, 'GET', `/v1/sandboxes/${mine[0]!.id}/metrics`);
      assert.equal(cut.status, 503, JSON.stringify(cut.body));
      assert.equal(cut.body.code, 'NODE_UNAVAILABLE', JSON.stringify(cut.body));
      // At once, or at the latest when control reads the node list again (every 2 s): a call that
      // had reached the node as its lease ran out ends then, not at its 30 s timeout.
      assert.ok(Date.now() - t1 < 2500, `answered after ${Date.now() - t1} ms`);
      const r = await via(ADDR.edge, host(mine[0]!.id), 'POST', '/commands/run', mine[0]!.authToken, { command: 'true' });
      assert.equal(r.status, 503, JSON.stringify(r.body));
      assert.equal(r.body.code, 'NODE_UNAVAILABLE');
      const listed = await until(
        'listed unavailable',
        () => api<{ data: Array<{ id: string; available?: boolean }> }>(a, 'GET', '/v1/sandboxes?limit=1000'),
        (l) => l.body.data.find((x) => x.id === mine[0]!.id)?.available === false,
      );
      for (const sb of others) assert.equal(listed.body.data.find((x) => x.id === sb.id)?.available, true);
      for (const sb of others) assert.equal((await via(ADDR.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' })).status, 200, 'the other nodes serve');
      const fresh = await createSandbox(b, { template: 'base' });
      assert.ok(!crunContainers(holder.dataDir).includes(fresh.id), 'a new create goes elsewhere');
      made.push(fresh);
    } finally {
      execFileSync('ip', ['link', 'set', holder.netns!.hostVeth, 'up']);
    }
    const back = await until(
      'served again',
      () => via(ADDR.edge, host(mine[0]!.id), 'POST', '/commands/run', mine[0]!.authToken, { command: 'cat', args: ['/tmp/kept'] }),
      (r) => r.status === 200,
      20_000,
    );
    assert.equal(back.body.stdout, 'kept\n', 'with its files');
    for (const sb of made) assert.equal((await api(a, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  });

  test('the unmodified @hopx-ai/sdk, our SDK and sbx run their flows: the API on either replica, the agent through the edge', async () => {
    const h = await HopxSandbox.create({ template: 'base', timeoutSeconds: 600, apiKey: a.apiKey, baseURL: a.baseUrl });
    try {
      assert.equal((await h.runCode('echo "$((6 * 7))"', { language: 'bash' })).stdout, '42\n');
      await h.files.write('/tmp/from-hopx.txt', 'through the edge');
      assert.equal(await h.files.read('/tmp/from-hopx.txt'), 'through the edge');
      // Paused through the other replica: the SDK, through the edge, is told so.
      const paused = await api(b, 'POST', `/v1/sandboxes/${h.sandboxId}/pause`);
      assert.equal(paused.status, 200, JSON.stringify(paused.body));
      const resumed = await api(a, 'POST', `/v1/sandboxes/${h.sandboxId}/resume`);
      assert.equal(resumed.status, 200, JSON.stringify(resumed.body));
      assert.equal((await h.runCode('cat /tmp/from-hopx.txt', { language: 'bash' })).stdout, 'through the edge');
    } finally {
      await h.kill();
    }
    const ours = await Sandbox.create({ client: clientFor(b), template: 'base', envVars: { GREETING: 'hi' } });
    try {
      assert.equal(new URL(ours.info.publicHost).hostname, host(ours.id));
      assert.equal((await ours.commands.run('echo "$GREETING"')).stdout, 'hi\n');
      await ours.files.write('/tmp/ours.txt', 'ours');
      assert.equal(await ours.files.read('/tmp/ours.txt'), 'ours');
    } finally {
      await ours.kill();
    }
    const dnsEnv = childEnv(DOMAIN, ADDR.edge);
    const created = await sbx(a, ['create', '-q', '--template', 'base'], { env: dnsEnv });
    const id = created.stdout.trim();
    assert.equal(created.code, 0, created.stderr);
    try {
      const ran = await sbx(b, ['exec', id, '--', 'echo from-cli'], { env: dnsEnv });
      assert.equal(ran.code, 0, ran.stderr);
      assert.equal(ran.stdout, 'from-cli\n');
    } finally {
      assert.equal((await sbx(b, ['rm', id], { env: dnsEnv })).code, 0);
    }
  });

  test('the edge restarted: its connections end, everything else goes on, and it serves again', async () => {
    const sb = await createSandbox(a, { template: 'base' });
    try {
      const long = via(ADDR.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'sleep', args: ['30'] }).then(
        (r) => r.status,
        () => 'cut',
      );
      await new Promise((r) => setTimeout(r, 500));
      await edge.kill9();
      assert.equal(await long, 'cut', 'a request through the edge ends with it');
      assert.equal((await via(ADDR.a, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' })).status, 200, 'control serves meanwhile');
      await edge.restart();
      assert.equal((await via(ADDR.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' })).status, 200);
    } finally {
      await api(a, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });

  test('a replica killed in the middle of a burst of creates: each create answered 201 works; after the grace no node runs a sandbox the store does not know', async () => {
    const burst = Array.from({ length: 8 }, () =>
      fetch(`${a.baseUrl}/v1/sandboxes`, { method: 'POST', headers: { 'x-api-key': a.apiKey, 'content-type': 'application/json' }, body: JSON.stringify({ template_name: 'base' }) }).then(
        async (res) => ({ status: res.status, body: (await res.json()) as { id?: string; auth_token?: string } }),
        () => ({ status: 0, body: {} as { id?: string; auth_token?: string } }),
      ),
    );
    await new Promise((r) => setTimeout(r, 250));
    await a.kill9();
    const results = await Promise.all(burst);
    const made = results.filter((r) => r.status === 201);
    assert.ok(results.every((r) => r.status === 201 || r.status === 0), `each create answered 201 or failed with the replica: ${JSON.stringify(results.map((r) => r.status))}`);
    for (const r of made) {
      const run = await via(ADDR.b, host(r.body.id!), 'POST', '/commands/run', r.body.auth_token!, { command: 'true' });
      assert.equal(run.status, 200, `${r.body.id} works through the other replica: ${JSON.stringify(run.body)}`);
    }
    // What the dead replica booted and never recorded belongs to no one: its node collects it.
    const settled = await until(
      'every sandbox a node runs is recorded',
      census,
      (c) => c.running.every((id) => c.recorded.has(id)),
      (GRACE_SECONDS + 4 * 2 + 30) * 1000,
    );
    for (const r of made) assert.ok(settled.running.includes(r.body.id!), `${r.body.id} was answered 201 and still runs`);
    for (const r of made) assert.equal((await api(b, 'DELETE', `/v1/sandboxes/${r.body.id}`)).status, 200);
    await a.restart();
  });
});
