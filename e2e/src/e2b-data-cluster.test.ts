// E2B's data plane in a cluster: PostgreSQL, one node, control and an edge. Control serves
// E2B_SANDBOX_URL on its API port (/e2b/sandbox, routed by E2b-Sandbox-Id and E2b-Sandbox-Port);
// the edge, which has no API port, serves E2B's host names (49983-<id>.<domain>,
// 49999-<id>.<domain>) and the same /e2b/sandbox prefix by header on its gateway port. Each
// reaches the sandbox's agent on the node through the node's relay.
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, test } from 'node:test';
import { Sandbox as E2bSandbox } from 'e2b';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { api, createSandbox, freePort, startServer, stopAll, type CreatedSandbox, type TestServer } from './harness.js';
import { startNode, type TestNode } from './harness-node.js';

const DOMAIN = 'e2b-cluster.test';
let postgres: TestPostgres;
let node: TestNode;
let control: TestServer;
let edge: TestServer;
let edgePort = 0;
let sb: CreatedSandbox;
const keys = testClusterKeyFiles();

before(async () => {
  postgres = await startPostgres();
  const dbUrl = await postgres.createDatabase();
  node = await startNode({ id: 'e2b-data-node', verifyKey: keys.verifyPem, databaseUrl: dbUrl, leaseSeconds: 3, env: { SANDBOXD_WARM_POOL_SIZE: '0' } });
  const cluster = { SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile, SANDBOXD_GATEWAY_DOMAIN: DOMAIN };
  control = await startServer({ command: 'control', templates: ['base'], env: { ...cluster, SANDBOXD_GATEWAY_PORT: String(await freePort()) } });
  edgePort = await freePort();
  edge = await startServer({ command: 'edge', env: { ...cluster, SANDBOXD_GATEWAY_PORT: String(edgePort) }, readyTimeoutMs: 60_000 });
  for (const deadline = Date.now() + 15 * 60_000; ; await new Promise((r) => setTimeout(r, 2000))) {
    const t = await api(control, 'GET', '/v1/templates/base');
    if (t.body?.status === 'active') break;
    assert.ok(Date.now() < deadline && t.body?.status !== 'failed', `template base: ${JSON.stringify(t.body)}`);
  }
  sb = await createSandbox(control, { template_name: 'base' });
});

after(async () => {
  await stopAll(
    () => (sb ? api(control, 'DELETE', `/v1/sandboxes/${sb.id}`) : undefined),
    () => edge?.stop(),
    () => control?.stop(),
    () => node?.stop(),
    () => postgres?.stop(),
    () => keys.remove(),
  );
});

/** One request to 127.0.0.1:port with the Host header given (no DNS needed). */
function call(port: number, host: string, method: string, path: string, headers: Record<string, string>, body?: string | Buffer): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, agent: false, headers: { host, ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      // latin1: byte for byte (Connect's envelopes are binary-framed; the rest is ASCII).
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('latin1') }));
    });
    req.on('error', reject);
    req.setTimeout(60_000, () => req.destroy(new Error(`no answer to ${path}`)));
    req.end(body);
  });
}

const cell = JSON.stringify({ code: 'echo "from $(hostname)"', language: 'bash' });
const stdoutOf = (ndjson: string) =>
  ndjson
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { type: string; text?: string })
    .filter((m) => m.type === 'stdout')
    .map((m) => m.text)
    .join('');

/** A Connect Start of `sh -c script` (E2B's envd, served by the gateway that takes the request): its stdout. */
const start = (script: string) => {
  const payload = Buffer.from(JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', script] } }));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
};
const connectHeaders = { 'content-type': 'application/connect+json', 'connect-protocol-version': '1' };
function connectStdout(raw: string): string {
  const buf = Buffer.from(raw, 'latin1');
  let out = '';
  for (let off = 0; off + 5 <= buf.length; off += 5 + buf.readUInt32BE(off + 1)) {
    const msg = JSON.parse(buf.subarray(off + 5, off + 5 + buf.readUInt32BE(off + 1)).toString() || '{}') as { event?: { data?: { stdout?: string } }; error?: unknown };
    if (msg.error) throw new Error(`Connect error: ${JSON.stringify(msg.error)}`);
    if (msg.event?.data?.stdout) out += Buffer.from(msg.event.data.stdout, 'base64').toString();
  }
  return out;
}

test("control's API port: E2B_SANDBOX_URL's routing headers reach the code interpreter and envd on the node", async () => {
  const routing = (port: number) => ({ 'e2b-sandbox-id': sb.id, 'e2b-sandbox-port': String(port), 'x-access-token': sb.authToken });
  const apiPort = new URL(control.baseUrl).port;
  const ran = await call(Number(apiPort), `127.0.0.1:${apiPort}`, 'POST', '/e2b/sandbox/execute', { ...routing(49999), 'content-type': 'application/json' }, cell);
  assert.equal(ran.status, 200, ran.text);
  assert.match(stdoutOf(ran.text), /^from \S+\n$/);
  assert.equal((await call(Number(apiPort), `127.0.0.1:${apiPort}`, 'GET', '/e2b/sandbox/health', routing(49983))).status, 204);
  // envd's Connect calls: spoken by control's gateway, run by the agent on the node.
  const proc = await call(Number(apiPort), `127.0.0.1:${apiPort}`, 'POST', '/e2b/sandbox/process.Process/Start', { ...routing(49983), ...connectHeaders }, start('echo "ran on $(hostname)"'));
  assert.equal(proc.status, 200, proc.text);
  assert.match(connectStdout(proc.text), /^ran on \S+\n$/);
});

test("the edge: E2B's host names, and the /e2b/sandbox prefix by header on its gateway port", async () => {
  const token = { 'x-access-token': sb.authToken };
  const byName = await call(edgePort, `49999-${sb.id}.${DOMAIN}`, 'POST', '/execute', { ...token, 'content-type': 'application/json' }, cell);
  assert.equal(byName.status, 200, byName.text);
  assert.match(stdoutOf(byName.text), /^from \S+\n$/);
  assert.equal((await call(edgePort, `49983-${sb.id}.${DOMAIN}`, 'GET', '/health', token)).status, 204);
  const byHeader = await call(edgePort, DOMAIN, 'POST', '/e2b/sandbox/execute', { ...token, 'e2b-sandbox-id': sb.id, 'e2b-sandbox-port': '49999', 'content-type': 'application/json' }, cell);
  assert.equal(byHeader.status, 200, byHeader.text);
  assert.match(stdoutOf(byHeader.text), /^from \S+\n$/);
  assert.equal((await call(edgePort, `49983-${sb.id}.${DOMAIN}`, 'GET', '/health', {})).status, 401);
  const proc = await call(edgePort, `49983-${sb.id}.${DOMAIN}`, 'POST', '/process.Process/Start', { ...token, ...connectHeaders }, start('echo edge'));
  assert.equal(proc.status, 200, proc.text);
  assert.equal(connectStdout(proc.text), 'edge\n');
});

test('the unmodified e2b client through control: create, commands streaming and in the background, files, pause and connect, kill', async () => {
  const k = await api(control, 'POST', '/v1/admin/keys', { org: 'default', name: 'e2b-cluster', format: 'e2b' });
  assert.equal(k.status, 201, JSON.stringify(k.body));
  // As a user configures the client, here per call: the two URLs and the key (nothing reaches E2B's hosts).
  const opts = { apiKey: k.body.secret as string, apiUrl: `${control.baseUrl}/e2b`, sandboxUrl: `${control.baseUrl}/e2b/sandbox`, domain: 'invalid' };
  const sbx = await E2bSandbox.create('base', { ...opts, timeoutMs: 600_000 });
  try {
    const chunks: string[] = [];
    const r = await sbx.commands.run('echo one; sleep 0.3; echo two; whoami', { onStdout: (d) => void chunks.push(d) });
    assert.equal(r.stdout, 'one\ntwo\nuser\n');
    assert.ok(chunks.length >= 2, 'output streamed as it came');
    const bg = await sbx.commands.run('sleep 30', { background: true });
    const again = await sbx.commands.connect(bg.pid);
    await again.kill();
    await sbx.files.write('notes/a.txt', 'kept across a pause');
    assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'kept across a pause');
    assert.deepEqual((await sbx.files.list('notes')).map((e) => e.name), ['a.txt']);
    await sbx.betaPause();
    const back = await E2bSandbox.connect(sbx.sandboxId, opts);
    assert.equal(await back.files.read('notes/a.txt'), 'kept across a pause');
    assert.equal((await back.commands.run('cat notes/a.txt')).stdout, 'kept across a pause');
  } finally {
    await E2bSandbox.kill(sbx.sandboxId, opts);
  }
  assert.equal(await E2bSandbox.kill(sbx.sandboxId, opts), false, 'a killed sandbox is gone');
});
