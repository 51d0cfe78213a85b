import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { NotFoundError, Sandbox as CodeSandbox } from '@e2b/code-interpreter';
import { Sandbox } from 'e2b';
import { api, createSandbox, freePort, startServer, type CreatedSandbox, type TestServer } from './harness.js';

// E2B's data plane on a real daemon and a real sandbox: E2B_SANDBOX_URL is the API port's
// /e2b/sandbox, the sandbox and the port inside it named in E2b-Sandbox-Id and E2b-Sandbox-Port
// (49983 the agent's envd routes, 49999 its code interpreter), the access token in X-Access-Token;
// first spoken by hand, then by the unmodified @e2b/code-interpreter (pinned in e2e/package.json).

let server: TestServer;
let sb: CreatedSandbox;
let base: string;
const made: string[] = [];

before(async () => {
  server = await startServer({ env: { SANDBOXD_REGISTRY_URL: 'none' }, templates: ['code-interpreter'] });
  base = `${server.baseUrl}/e2b/sandbox`;
  // A first start builds the template (cached in the shared layer dir after): wait for it.
  for (const deadline = Date.now() + 15 * 60_000; ; ) {
    const t = await api(server, 'GET', '/v1/templates/code-interpreter');
    if (t.body?.status === 'active') break;
    assert.ok(Date.now() < deadline && t.body?.status !== 'failed', `template code-interpreter: ${JSON.stringify(t.body)}`);
    await new Promise((r) => setTimeout(r, 2000));
  }
  sb = await createSandbox(server, { template_name: 'code-interpreter' });
  made.push(sb.id);
});
after(async () => {
  for (const id of made) await api(server, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
  await server?.stop();
});

const headers = (port: number, id = sb.id, token = sb.authToken) => ({ 'e2b-sandbox-id': id, 'e2b-sandbox-port': String(port), 'x-access-token': token });

type Msg = Record<string, unknown> & { type: string };

async function ndjson(res: Response): Promise<Msg[]> {
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.text())
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Msg);
}

test('by hand: /execute on port 49999 through the API port streams stdout, the main result and the end', async () => {
  const res = await fetch(`${base}/execute`, {
    method: 'POST',
    headers: { ...headers(49999), 'content-type': 'application/json' },
    body: JSON.stringify({ code: "print('hello from e2b')\n1+1" }),
    signal: AbortSignal.timeout(120_000),
  });
  const msgs = await ndjson(res);
  assert.equal(msgs.filter((m) => m.type === 'stdout').map((m) => m.text).join(''), 'hello from e2b\n');
  assert.deepEqual(msgs.find((m) => m.type === 'result'), { type: 'result', text: '2', is_main_result: true });
  assert.equal(msgs.at(-1)!.type, 'end_of_execution');
});

test("by hand: envd's /health on port 49983; wrong org's token, unknown sandbox, bad headers", async () => {
  const health = await fetch(`${base}/health`, { headers: headers(49983), signal: AbortSignal.timeout(30_000) });
  assert.equal(health.status, 204, await health.text());
  // A sandbox of another organization, and its token: neither reaches this one.
  const orgName = `e2b-data-${Date.now()}`;
  const org = await api(server, 'POST', '/v1/admin/orgs', { name: orgName });
  assert.equal(org.status, 201, JSON.stringify(org.body));
  const key = await api(server, 'POST', '/v1/admin/keys', { org: orgName, name: 'other' });
  assert.equal(key.status, 201, JSON.stringify(key.body));
  const theirs = await createSandbox({ baseUrl: server.baseUrl, apiKey: key.body.secret }, { template_name: 'code-interpreter' });
  made.push(theirs.id);
  const cross = await fetch(`${base}/health`, { headers: headers(49983, sb.id, theirs.authToken) });
  assert.equal(cross.status, 401, await cross.text());
  const theirKey = await fetch(`${base}/health`, { headers: { 'e2b-sandbox-id': sb.id, 'e2b-sandbox-port': '49983', 'x-api-key': key.body.secret } });
  assert.equal(theirKey.status, 401);
  const none = await fetch(`${base}/health`, { headers: { 'e2b-sandbox-id': sb.id, 'e2b-sandbox-port': '49983' } });
  assert.equal(none.status, 401);
  assert.equal((await fetch(`${base}/health`, { headers: headers(49983, 'sbnosuchsandbox0000000') })).status, 401, "the token is this sandbox's only");
  // Deleted, with its own token: what E2B's clients read as "not running" (isRunning() false).
  assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${theirs.id}`, undefined, { 'x-api-key': key.body.secret })).status, 200);
  const gone = await fetch(`${base}/health`, { headers: headers(49983, theirs.id, theirs.authToken) });
  assert.equal(gone.status, 502, await gone.text());
  for (const [h, field] of [
    [{ 'e2b-sandbox-port': '49983', 'x-access-token': sb.authToken }, 'e2b-sandbox-id'],
    [{ ...headers(49983), 'e2b-sandbox-port': '70000' }, 'e2b-sandbox-port'],
    [{ ...headers(49983), 'e2b-sandbox-id': '../v1' }, 'e2b-sandbox-id'],
  ] as const) {
    const r = await fetch(`${base}/health`, { headers: h });
    assert.equal(r.status, 400);
    assert.equal(((await r.json()) as { field: string }).field, field);
  }
});

test('the unmodified @e2b/code-interpreter: runCode with state, streaming, errors and a chart; contexts; isRunning after kill', async () => {
  const key = await api(server, 'POST', '/v1/admin/keys', { org: 'default', name: 'e2b-data', format: 'e2b' });
  assert.equal(key.status, 201, JSON.stringify(key.body));
  process.env.E2B_API_URL = `${server.baseUrl}/e2b`;
  process.env.E2B_SANDBOX_URL = base;
  process.env.E2B_API_KEY = key.body.secret;
  // Nothing here may reach E2B's own hosts: a client that ignored the two URLs would fail, not leak.
  process.env.E2B_DOMAIN = 'invalid';
  const sbx = await CodeSandbox.create({ timeoutMs: 300_000 });
  made.push(sbx.sandboxId);
  assert.equal(await sbx.isRunning(), true);

  await sbx.runCode('x = 20');
  const lines: string[] = [];
  const ex = await sbx.runCode("import time\nprint('tick', flush=True)\ntime.sleep(1)\nprint('tock')\nx + 22", { onStdout: (o) => void lines.push(o.line) });
  assert.equal(ex.text, '42');
  assert.deepEqual(ex.logs.stdout, ['tick\n', 'tock\n']);
  assert.deepEqual(lines, ['tick\n', 'tock\n']);
  assert.equal(ex.error, undefined);

  const failed = await sbx.runCode('1/0');
  assert.equal(failed.error?.name, 'ZeroDivisionError');
  assert.equal(failed.error?.value, 'division by zero');
  assert.match(failed.error?.traceback ?? '', /Traceback/);

  const chart = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()');
  const png = chart.results.find((r) => r.png)?.png;
  assert.ok(png && Buffer.from(png, 'base64').subarray(1, 4).toString() === 'PNG', JSON.stringify(chart.toJSON()).slice(0, 300));

  const js = await sbx.runCode('[1, 2, 3].map((n) => n * 2)', { language: 'js' });
  assert.match(js.text ?? '', /2, 4, 6/);

  // Contexts: their calls carry only E2B-Traffic-Access-Token (the control plane's trafficAccessToken).
  const ctx = await sbx.createCodeContext({ cwd: '/tmp' });
  assert.deepEqual([ctx.language, ctx.cwd], ['python', '/tmp']);
  const inCtx = await sbx.runCode('import os\ny = 5\nos.getcwd()', { context: ctx });
  assert.equal(inCtx.text, "'/tmp'");
  assert.equal((await sbx.runCode('y * 2', { context: ctx })).text, '10');
  assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
  await sbx.restartCodeContext(ctx);
  assert.equal((await sbx.runCode('y', { context: ctx })).error?.name, 'NameError');
  await sbx.removeCodeContext(ctx.id);
  await assert.rejects(sbx.runCode('1', { context: ctx }), NotFoundError);
  const jsCtx = await sbx.createCodeContext({ language: 'js' });
  await sbx.runCode('globalThis.k = 3', { context: jsCtx });
  assert.equal((await sbx.runCode('k * 3', { context: jsCtx })).text, '9');

  await sbx.kill();
  assert.equal(await sbx.isRunning(), false, 'a killed sandbox is not running (the gateway answers 502)');
});

/** A request to host mode's gateway port with the Host header a client would send (no DNS needed). */
function viaHost(port: number, url: string, opts: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<{ status: number; text: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: `${u.pathname}${u.search}`, method: opts.method ?? 'GET', headers: { host: u.host, ...opts.headers } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

test("host mode: E2B's host names 49983-<id> and 49999-<id>, and the client's signed upload and download URLs", async () => {
  const gatewayPort = await freePort();
  const hosted = await startServer({ templates: ['base'], env: { SANDBOXD_REGISTRY_URL: 'none', SANDBOXD_GATEWAY_DOMAIN: 'e2b.test', SANDBOXD_GATEWAY_PORT: String(gatewayPort) } });
  try {
    for (const deadline = Date.now() + 15 * 60_000; ; await new Promise((r) => setTimeout(r, 2000))) {
      const t = await api(hosted, 'GET', '/v1/templates/base');
      if (t.body?.status === 'active') break;
      assert.ok(Date.now() < deadline && t.body?.status !== 'failed', `template base: ${JSON.stringify(t.body)}`);
    }
    const key = await api(hosted, 'POST', '/v1/admin/keys', { org: 'default', name: 'e2b-host', format: 'e2b' });
    // No E2B_SANDBOX_URL: the client names hosts `<port>-<id>.<domain>` (https: a TLS front's job; here the Host header).
    delete process.env.E2B_SANDBOX_URL;
    const sbx = await Sandbox.create('base', { apiUrl: `${hosted.baseUrl}/e2b`, apiKey: key.body.secret });
    const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
    const at = (port: number, path: string) => `https://${port}-${sbx.sandboxId}.e2b.test${path}`;
    assert.equal((await viaHost(gatewayPort, at(49983, '/health'), { headers: { 'x-access-token': token } })).status, 204);
    const ran = await viaHost(gatewayPort, at(49999, '/execute'), { method: 'POST', headers: { 'x-access-token': token, 'content-type': 'application/json' }, body: JSON.stringify({ code: 'echo by-host', language: 'bash' }) });
    assert.equal(ran.status, 200, ran.text);
    assert.match(ran.text, /"type":"stdout","text":"by-host\\n"/);
    assert.equal((await viaHost(gatewayPort, at(49999, '/execute'), { method: 'POST', body: '{"code":"echo"}' })).status, 401);

    const up = await sbx.uploadUrl('/tmp/signed.txt', { useSignatureExpiration: 120 });
    assert.match(up, new RegExp(`^https://49983-${sbx.sandboxId}\\.e2b\\.test/files\\?.*signature=v1_`));
    const put = await viaHost(gatewayPort, up, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: 'signed bytes' });
    assert.equal(put.status, 200, put.text);
    const down = await sbx.downloadUrl('/tmp/signed.txt');
    const got = await viaHost(gatewayPort, down);
    assert.equal(got.status, 200, got.text);
    assert.equal(got.text, 'signed bytes');
    const tampered = await viaHost(gatewayPort, down.replace('signed.txt', 'other.txt'));
    assert.equal(tampered.status, 401);
    assert.equal((await viaHost(gatewayPort, up, { method: 'GET' })).status, 401, 'an upload URL does not download');
    await sbx.kill();
    assert.equal((await viaHost(gatewayPort, down)).status, 502, 'a killed sandbox: not running');
  } finally {
    await hosted.stop();
  }
});
