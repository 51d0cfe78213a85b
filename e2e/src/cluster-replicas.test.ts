// A cluster with two control replicas and an edge, on PostgreSQL, over two real nodes: every
// replica serves every sandbox (the API, its public_host, its previews, the events), whichever
// made it; a replica killed in the middle of a burst of creates leaves no sandbox the store does
// not know; PostgreSQL restarted, the edge keeps serving the sandboxes it knows; the edge
// restarted, everything else goes on.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { request, type IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { api, createSandbox, freePort, startNode, startServer, type TestNode, type TestServer } from './harness.js';

const DOMAIN = 'cluster.test';
const GRACE_SECONDS = 10;

/** A call to a sandbox's agent through a gateway's single port, by Host header (host mode needs DNS otherwise). */
function via(gatewayPort: number, host: string, method: string, path: string, token: string, body?: unknown): Promise<{ status: number; body: any }> {
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: gatewayPort,
        method,
        path,
        agent: false,
        headers: {
          host,
          authorization: `Bearer ${token}`,
          ...(data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => {
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            /* a preview's app answers what it likes */
          }
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      },
    );
    req.on('error', reject);
    req.setTimeout(30_000, () => req.destroy(new Error('timed out')));
    req.end(data);
  });
}

async function until<T>(what: string, fn: () => Promise<T>, ok: (v: T) => boolean, ms = 5000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: T;
  do {
    last = await fn();
    if (ok(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  } while (Date.now() < deadline);
  assert.fail(`${what}: still ${JSON.stringify(last).slice(0, 300)} after ${ms} ms`);
}

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

describe('a cluster with two control replicas and an edge', { timeout: 900_000 }, () => {
  let postgres: TestPostgres;
  let dbUrl: string;
  const nodes: TestNode[] = [];
  let a: TestServer;
  let b: TestServer;
  let edge: TestServer;
  const gw = { a: 0, b: 0, edge: 0 };
  const host = (id: string) => `${id}.${DOMAIN}`;
  const keys = testClusterKeyFiles();

  const clusterEnv = (gatewayPort: number) => ({
    SANDBOXD_DATABASE_URL: dbUrl,
    SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile,
    SANDBOXD_GATEWAY_DOMAIN: DOMAIN,
    SANDBOXD_GATEWAY_PORT: String(gatewayPort),
    // Control's warm pool off: every sandbox on a node is then a create's, for the orphan test.
    SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0',
    SANDBOXD_CLUSTER_CLAIM_SECONDS: '2',
  });

  /** Every sandbox the nodes run, and every live sandbox the store records. */
  const census = async () => {
    const running = nodes.flatMap((n) => execFileSync('crun', ['--root', join(n.dataDir, 'crun'), 'list', '-q'], { encoding: 'utf8' }).split('\n').filter(Boolean));
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
    postgres = await startPostgres();
    dbUrl = await postgres.createDatabase();
    for (const id of ['rep-node-a', 'rep-node-b']) {
      nodes.push(await startNode({ id, verifyKey: keys.verifyPem, databaseUrl: dbUrl, leaseSeconds: 3, env: { SANDBOXD_NODE_ORPHAN_GRACE_SECONDS: String(GRACE_SECONDS) } }));
    }
    gw.a = await freePort();
    gw.b = await freePort();
    gw.edge = await freePort();
    // Two replicas starting together: they migrate, reconcile and take the signing key in turn.
    [a, b] = await Promise.all([
      startServer({ command: 'control', templates: ['base', 'code-interpreter'], env: clusterEnv(gw.a) }),
      startServer({ command: 'control', templates: ['base', 'code-interpreter'], env: clusterEnv(gw.b) }),
    ]);
    edge = await startServer({ command: 'edge', env: clusterEnv(gw.edge), readyTimeoutMs: 60_000 });
  });

  after(async () => {
    await edge?.stop();
    await b?.stop();
    await a?.stop();
    for (const n of nodes) await n.stop();
    await postgres?.stop();
    keys.remove();
  });

  test('a sandbox made through one replica is served by the other and by the edge; paused or deleted through one, every one sees it at once', async () => {
    const sb = await createSandbox(a, { template: 'base' });
    assert.equal(sb.publicHost, `http://${host(sb.id)}:${gw.a}`);
    assert.equal((await api(b, 'GET', `/v1/sandboxes/${sb.id}`)).status, 200, 'the other replica knows it');
    for (const port of [gw.a, gw.b, gw.edge]) {
      const r = await via(port, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'echo', args: ['hi'] });
      assert.equal(r.status, 200, `gateway ${port}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.stdout, 'hi\n');
    }
    // Known to every gateway now: a pause through B reaches A's and the edge's routes.
    assert.equal((await api(b, 'POST', `/v1/sandboxes/${sb.id}/pause`)).status, 200);
    for (const port of [gw.a, gw.edge]) {
      const r = await until(`gateway ${port} after the pause`, () => via(port, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' }), (x) => x.status !== 200);
      assert.equal(r.body.code, 'SANDBOX_PAUSED', JSON.stringify(r.body));
    }
    assert.equal((await api(a, 'POST', `/v1/sandboxes/${sb.id}/resume`)).status, 200);
    await until('the edge after the resume', () => via(gw.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' }), (x) => x.status === 200);
    assert.equal((await api(b, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    for (const port of [gw.a, gw.edge]) {
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

  test('a preview made public through one replica is served by the edge without a token, and private again through the other', async () => {
    const sb = await createSandbox(a, { template_name: 'code-interpreter' });
    try {
      await via(gw.a, host(sb.id), 'POST', '/commands/run', sb.authToken, {
        command: 'sh',
        args: ['-c', 'mkdir -p /srv && echo from-a-replica > /srv/i.txt && (cd /srv && nohup python3 -m http.server 3000 --bind 127.0.0.1 >/dev/null 2>&1 &)'],
      });
      const made = await api<{ url: string; public: boolean }>(a, 'PUT', `/v1/sandboxes/${sb.id}/ports/3000`, { public: true });
      assert.equal(made.status, 200, JSON.stringify(made.body));
      const previewHost = `3000-${sb.id}.${DOMAIN}`;
      const served = await until('the public preview on the edge', () => via(gw.edge, previewHost, 'GET', '/i.txt', ''), (x) => x.status === 200);
      assert.equal(served.body, 'from-a-replica\n');
      assert.equal((await api(b, 'PUT', `/v1/sandboxes/${sb.id}/ports/3000`, { public: false })).status, 200);
      await until('the preview private again on the edge', () => via(gw.edge, previewHost, 'GET', '/i.txt', ''), (x) => x.status === 401);
    } finally {
      await api(a, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });

  test('PostgreSQL restarted: the edge keeps serving a sandbox it knows; the API answers 503 meanwhile, and all is well after', async () => {
    const sb = await createSandbox(b, { template: 'base' });
    try {
      assert.equal((await via(gw.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' })).status, 200);
      await postgres.restart(async () => {
        const t0 = Date.now();
        const r = await via(gw.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'echo', args: ['still'] });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.stdout, 'still\n');
        assert.ok(Date.now() - t0 < 15_000, `served in ${Date.now() - t0} ms`);
        assert.equal((await api(a, 'GET', `/v1/sandboxes/${sb.id}`)).status, 503);
      });
      await until('the API after the restart', () => api(a, 'GET', `/v1/sandboxes/${sb.id}`), (x) => x.status === 200, 15_000);
      // Messages sent while the store was away are lost: every route is read again after it.
      // (Its node's lease is renewed within a third of it once the store is back.)
      await until('a pause after the restart', () => api(a, 'POST', `/v1/sandboxes/${sb.id}/pause`), (x) => x.status === 200, 10_000);
      await until('the edge sees the pause made after the restart', () => via(gw.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' }), (x) => x.status !== 200, 10_000);
    } finally {
      await api(b, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });

  test('the edge restarted: its connections end, everything else goes on, and it serves again', async () => {
    const sb = await createSandbox(a, { template: 'base' });
    try {
      const long = via(gw.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'sleep', args: ['30'] }).then(
        (r) => r.status,
        () => 'cut',
      );
      await new Promise((r) => setTimeout(r, 500));
      await edge.kill9();
      assert.equal(await long, 'cut', 'a request through the edge ends with it');
      assert.equal((await via(gw.a, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' })).status, 200, 'control serves meanwhile');
      await edge.restart();
      assert.equal((await via(gw.edge, host(sb.id), 'POST', '/commands/run', sb.authToken, { command: 'true' })).status, 200);
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
      const run = await via(gw.b, host(r.body.id!), 'POST', '/commands/run', r.body.auth_token!, { command: 'true' });
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
