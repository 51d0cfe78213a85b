import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { connect } from 'node:net';
import WebSocket from 'ws';
import { Sandbox } from '@sandboxd/sdk';
import { api, createSandbox, freePort, startServer, type CreatedSandbox, type TestServer } from './harness.js';
import { clientFor, describeResult, sbx } from './sdk-support.js';
import { listeningPorts } from '../../packages/server/dist/testing/host-objects.js';

// Issue 12, item 2: preview URLs. A process that listens on a port inside a sandbox (loopback
// included) is served at a URL the API gives: private by default (the sandbox's token in
// X-Sandboxd-Token, or a signed link that sets a cookie), public on request; HTTP, server-sent
// events and WebSocket pass through; a port nothing listens on answers 502 at once.

/**
 * The app inside: JSON echo of what it was sent (path, cookies, credentials, host), an SSE stream,
 * and a WebSocket echo; it sets a cookie of its own and tries to set one named like the gateway's.
 */
const APP = String.raw`
import base64, hashlib, http.server, json, sys, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == '/big':
            body = bytes(range(256)) * 32768
            self.send_response(200)
            self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
            return
        if self.path.startswith('/sse'):
            self.send_response(200)
            self.send_header('Content-Type', 'text/event-stream')
            self.send_header('Cache-Control', 'no-cache')
            self.send_header('Connection', 'close')
            self.end_headers()
            for i in range(3):
                self.wfile.write(('data: tick %d\n\n' % i).encode()); self.wfile.flush(); time.sleep(0.3)
            self.close_connection = True
            return
        if self.headers.get('Upgrade', '').lower() == 'websocket':
            acc = base64.b64encode(hashlib.sha1((self.headers['Sec-WebSocket-Key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').encode()).digest()).decode()
            self.send_response(101)
            self.send_header('Upgrade', 'websocket'); self.send_header('Connection', 'Upgrade')
            self.send_header('Sec-WebSocket-Accept', acc); self.send_header('Set-Cookie', 'sbxp_evil=1'); self.send_header('Set-Cookie', '=sbxp_evil=1')
            self.end_headers(); self.wfile.flush()
            r = self.rfile
            while True:
                h = r.read(2)
                if len(h) < 2: return
                op, n = h[0] & 15, h[1] & 127
                if n == 126: n = int.from_bytes(r.read(2), 'big')
                mask = r.read(4)
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
                if op == 8: return
                out = b'echo:' + data
                self.wfile.write(bytes([0x80 | op, len(out)]) + out); self.wfile.flush()
        body = json.dumps({'path': self.path, 'cookie': self.headers.get('Cookie'), 'token': self.headers.get('X-Sandboxd-Token'),
                           'auth': self.headers.get('Authorization'), 'host': self.headers.get('Host')}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json'); self.send_header('Content-Length', str(len(body)))
        self.send_header('Set-Cookie', 'app=1; Path=/'); self.send_header('Set-Cookie', 'sbxp_evil=1; Path=/')
        self.send_header('Set-Cookie', 'SBXP_evil=2; Path=/'); self.send_header('Set-Cookie', '=sbxp_evil=3; Path=/'); self.send_header('Set-Cookie', 'sbxp_bare')
        self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
`;

/** The agent's /commands/run, through the Host header (host mode's public_host needs DNS). */
function run(sb: CreatedSandbox, script: string): Promise<{ status: number; body: any }> {
  const u = new URL(sb.publicHost);
  const body = JSON.stringify({ command: 'sh', args: ['-c', script] });
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: u.port || 80,
        method: 'POST',
        path: '/commands/run',
        headers: { host: u.host, authorization: `Bearer ${sb.authToken}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function startApp(sb: CreatedSandbox, port: number): Promise<void> {
  const r = await run(sb, `cat > /workspace/app.py <<'EOF'\n${APP}\nEOF\nnohup python3 /workspace/app.py ${port} >/dev/null 2>&1 &`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  for (let i = 0; i < 100; i++) {
    const l = await run(sb, `curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:${port}/`);
    if (l.body.stdout === '200') return;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error('the app did not start');
}

/** A request through a URL with a chosen Host header (host mode needs no DNS this way). */
function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: u.port || 80, path: `${u.pathname}${u.search}`, headers: { host: u.host, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end();
  });
}

function sessionCookie(setCookie: string[] | string | undefined): string {
  const c = (Array.isArray(setCookie) ? setCookie : [setCookie ?? '']).find((x) => x.startsWith('sbxp_'));
  assert.ok(c, `a session cookie is set: ${JSON.stringify(setCookie)}`);
  assert.match(c, /; HttpOnly/);
  assert.match(c, /; SameSite=Strict/);
  return c.split(';')[0]!;
}

describe('preview URLs in port mode', { timeout: 300_000 }, () => {
  let server: TestServer;
  let sb: CreatedSandbox;
  let preview: { url: string; port: number; public: boolean; signed_url: string };

  before(async () => {
    // Three preview ports for the organization: the tests below open 3000, 3001 and 3999.
    server = await startServer({ templates: ['base', 'code-interpreter'], env: { SANDBOXD_MAX_PREVIEWS_PER_ORG: '3' } });
    sb = await createSandbox(server, { template_name: 'code-interpreter', timeout_seconds: 600 });
    await startApp(sb, 3000);
  });
  after(async () => {
    await server?.stop();
  });

  test('GET /ports/{port} gives a private URL and a signed link; the port is listed', async () => {
    const res = await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/3000`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    preview = res.body;
    assert.equal(preview.port, 3000);
    assert.equal(preview.public, false);
    assert.match(preview.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.notEqual(preview.url, sb.publicHost, "a preview has its own URL, not the agent's");
    assert.ok(preview.signed_url.startsWith(`${preview.url}/_sandboxd/auth?token=`));
    assert.ok(Date.parse(res.body.signed_url_expires_at) > Date.now());
    const again = await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/3000`);
    assert.equal(again.body.url, preview.url, 'the same port keeps its URL');
    const list = await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports`);
    assert.deepEqual(list.body.data.find((p: { port: number }) => p.port === 3000), { port: 3000, addresses: ['127.0.0.1'], loopback_only: true });
  });

  test('private: refused without the token, served with it; the app keeps its own headers and cookies, never the gateway credentials', async () => {
    const anon = await get(`${preview.url}/x`);
    assert.equal(anon.status, 401);
    assert.match(JSON.parse(anon.text).message, /X-Sandboxd-Token/);
    const wrong = await get(`${preview.url}/x`, { 'x-sandboxd-token': `${sb.authToken.slice(0, -4)}AAAA` });
    assert.equal(wrong.status, 401);
    const other = await createSandbox(server);
    assert.equal((await get(`${preview.url}/x`, { 'x-sandboxd-token': other.authToken })).status, 401, "another sandbox's token does not open it");
    await api(server, 'DELETE', `/v1/sandboxes/${other.id}`);

    const ok = await get(`${preview.url}/hello?a=1`, { 'x-sandboxd-token': sb.authToken, cookie: 'theme=dark; sbxp_someone_1=forged', authorization: 'Basic dXNlcjpwdw==' });
    assert.equal(ok.status, 200, ok.text);
    const seen = JSON.parse(ok.text);
    assert.equal(seen.path, '/hello?a=1');
    assert.equal(seen.cookie, 'theme=dark', "the gateway's cookies stay behind, the app's go on");
    assert.equal(seen.token, null, 'the sandbox token stays behind');
    assert.equal(seen.auth, 'Basic dXNlcjpwdw==', "the app's own Authorization goes on");
    assert.equal(seen.host, new URL(preview.url).host);
    assert.deepEqual(ok.headers['set-cookie'], ['app=1; Path=/'], 'the app sets its cookies, not ones named like the gateway');
  });

  test('a signed link sets a session cookie for this port and redirects; the cookie opens this port only', async () => {
    const landing = await get(preview.signed_url.replace('/_sandboxd/auth?', '/_sandboxd/auth?next=%2Fdeep%2Fpage%3Fq%3D1&'));
    assert.equal(landing.status, 302, landing.text);
    assert.equal(landing.headers.location, '/deep/page?q=1');
    const cookie = sessionCookie(landing.headers['set-cookie']);
    const ok = await get(`${preview.url}/page`, { cookie: `${cookie}; theme=light` });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(JSON.parse(ok.text).cookie, 'theme=light');
    // Elsewhere: off-host redirects are not followed, a tampered or foreign link is refused.
    assert.equal((await get(preview.signed_url.replace('/_sandboxd/auth?', '/_sandboxd/auth?next=%2F%2Fevil.example%2F&'))).headers.location, '/');
    // Followed from another site: a page that moves on by itself (a redirect would carry the other
    // site's context, and the Strict cookie would be held back once), with the same cookie.
    const crossSite = await get(preview.signed_url.replace('/_sandboxd/auth?', '/_sandboxd/auth?next=%2Fdeep%3Fa%3D1%26b%3D%22&'), { 'sec-fetch-site': 'cross-site' });
    assert.equal(crossSite.status, 200, crossSite.text);
    assert.match(String(crossSite.headers['content-type']), /^text\/html/);
    assert.match(crossSite.text, /<meta http-equiv="refresh" content="0;url=\/deep\?a=1&amp;b=&quot;">/);
    sessionCookie(crossSite.headers['set-cookie']);
    assert.equal((await get(`${preview.signed_url.slice(0, -3)}xyz`)).status, 401);
    assert.equal((await get(`${preview.url}/_sandboxd/auth?token=${sb.authToken}`)).status, 401, 'a sandbox token is not a link');
    const other = await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/3001`);
    assert.equal((await get(`${other.body.url}/`, { cookie: cookie.replace('_3000=', '_3001=') })).status, 401, "port 3000's session does not open port 3001");
    assert.equal((await get(`${other.body.url}${new URL(preview.signed_url).pathname}${new URL(preview.signed_url).search}`)).status, 401, "port 3000's link does not open port 3001");
  });

  test('server-sent events stream through as they are sent; a WebSocket is relayed both ways', async () => {
    const started = Date.now();
    const res = await fetch(`${preview.url}/sse`, { headers: { 'x-sandboxd-token': sb.authToken } });
    assert.equal(res.headers.get('content-type'), 'text/event-stream');
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    const firstAt = Date.now() - started;
    assert.match(first, /^data: tick 0/);
    let rest = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    assert.match(first + rest, /tick 0[\s\S]*tick 1[\s\S]*tick 2/);
    assert.ok(firstAt < Date.now() - started - 300, `the first event came before the stream ended (${firstAt} ms)`);

    const ws = new WebSocket(`${preview.url.replace('http:', 'ws:')}/ws`, { headers: { 'x-sandboxd-token': sb.authToken } });
    let cookies: string[] | undefined = ['not seen'];
    ws.once('upgrade', (r) => (cookies = r.headers['set-cookie']));
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    assert.equal(cookies, undefined, 'no cookie named like the gateway comes through an upgrade');
    const reply = new Promise<string>((resolve) => ws.once('message', (m) => resolve(String(m))));
    ws.send('hello');
    assert.equal(await reply, 'echo:hello');
    ws.close();
    const anon = new WebSocket(`${preview.url.replace('http:', 'ws:')}/ws`);
    const status = await new Promise<number>((resolve) => anon.once('unexpected-response', (_q, r) => resolve(r.statusCode ?? 0)));
    assert.equal(status, 401);
  });

  test('a large body is relayed exactly (in the kernel); the next request on that connection is still checked', async () => {
    const u = new URL(preview.url);
    const sock = connect(Number(u.port), '127.0.0.1');
    const chunks: Buffer[] = [];
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.write(`GET /big HTTP/1.1\r\nhost: ${u.host}\r\nx-sandboxd-token: ${sb.authToken}\r\n\r\n`);
    const want = 8 * 1024 * 1024;
    const size = () => chunks.reduce((n, c) => n + c.length, 0);
    for (let i = 0; i < 1000 && size() < want; i++) await new Promise((r) => setTimeout(r, 10));
    // The same connection, no token: the gateway answers it (401), not the app.
    sock.write(`GET /x HTTP/1.1\r\nhost: ${u.host}\r\n\r\n`);
    for (let i = 0; i < 300 && !Buffer.concat(chunks).includes('X-Sandboxd-Token'); i++) await new Promise((r) => setTimeout(r, 10));
    sock.destroy();
    const all = Buffer.concat(chunks);
    const headEnd = all.indexOf('\r\n\r\n') + 4;
    assert.match(all.subarray(0, headEnd).toString('latin1'), /^HTTP\/1\.1 200[\s\S]*content-length: 8388608/i);
    const body = all.subarray(headEnd, headEnd + want);
    assert.equal(createHash('sha256').update(body).digest('hex'), createHash('sha256').update(Buffer.alloc(want).map((_, i) => i & 255)).digest('hex'));
    assert.match(all.subarray(headEnd + want).toString('latin1'), /^HTTP\/1\.1 401/);
  });

  test('a port nothing listens on answers 502 PORT_NOT_LISTENING at once; bad ports are 400; other organizations get 403', async () => {
    const p = await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/3999`);
    const started = Date.now();
    const res = await get(`${p.body.url}/`, { 'x-sandboxd-token': sb.authToken });
    assert.equal(res.status, 502);
    assert.equal(JSON.parse(res.text).code, 'PORT_NOT_LISTENING');
    assert.match(JSON.parse(res.text).message, /nothing is listening on port 3999/);
    assert.ok(Date.now() - started < 2000, `${Date.now() - started} ms`);
    // The organization's fourth preview port is over its cap (each takes a gateway port); its three still answer.
    const fourth = await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/4000`);
    assert.equal(fourth.status, 409, JSON.stringify(fourth.body));
    assert.equal(fourth.body.code, 'ORG_QUOTA_EXCEEDED');
    assert.match(fourth.body.message, /SANDBOXD_MAX_PREVIEWS_PER_ORG/);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/3999`)).status, 200);
    for (const bad of ['0', '65536', 'abc', '-1', '3.5']) assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/${bad}`)).status, 400, bad);
    assert.equal((await api(server, 'PUT', `/v1/sandboxes/${sb.id}/ports/3000`, { public: 'yes' })).status, 400);
    assert.equal((await api(server, 'PUT', `/v1/sandboxes/${sb.id}/ports/3000`, { public: true, extra: 1 })).status, 400);
    const org = await api(server, 'POST', '/v1/admin/orgs', { name: `other-${Date.now()}` });
    const key = await api(server, 'POST', '/v1/admin/keys', { org: org.body.name, name: 'k' });
    const foreign = await fetch(`${server.baseUrl}/v1/sandboxes/${sb.id}/ports/3000`, { headers: { 'x-api-key': key.body.secret } });
    assert.equal(foreign.status, 403, "another organization's sandbox is 403, as everywhere in the API");
    assert.equal((await api(server, 'GET', '/v1/sandboxes/sbnosuchsandbox/ports/3000')).status, 404);
    // A read-only key of the same organization sees the previews there are, never a signed link
    // into a private one, and makes none (a link opens the app: a notebook is code execution).
    const reader = await api(server, 'POST', '/v1/admin/keys', { org: 'default', scopes: ['sandboxes:read'], name: 'reader' });
    const asReader = (port: number) => fetch(`${server.baseUrl}/v1/sandboxes/${sb.id}/ports/${port}`, { headers: { 'x-api-key': reader.body.secret } });
    const seen = await asReader(3000);
    assert.equal(seen.status, 200);
    const body = (await seen.json()) as Record<string, unknown>;
    assert.equal(body.url, preview.url);
    assert.equal(body.signed_url, undefined, 'no link for a read-only key');
    const unmade = await asReader(3002);
    assert.equal(unmade.status, 403);
    assert.match(((await unmade.json()) as { message: string }).message, /sandboxes:write/);
  });

  test('public: anyone with the URL gets in, until it is private again; both outlive a restart', async () => {
    const pub = await api(server, 'PUT', `/v1/sandboxes/${sb.id}/ports/3000`, { public: true });
    assert.equal(pub.status, 200, JSON.stringify(pub.body));
    assert.deepEqual([pub.body.url, pub.body.public, pub.body.signed_url], [preview.url, true, undefined]);
    assert.equal((await get(`${preview.url}/open`)).status, 200);

    await server.shutdown();
    await server.restart();
    const after = await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/3000`);
    assert.deepEqual([after.body.url, after.body.public], [preview.url, true], 'the URL and the flag are kept');
    await startApp(sb, 3000).catch(() => undefined);
    assert.equal((await get(`${preview.url}/open`)).status, 200, 'served again after the restart');

    await api(server, 'PUT', `/v1/sandboxes/${sb.id}/ports/3000`, { public: false });
    assert.equal((await get(`${preview.url}/open`)).status, 401);
  });

  test('the SDK and the CLI: getPreviewUrl, previewHeaders, sbx preview', async () => {
    const sdkSb = await Sandbox.connect(sb.id, { client: clientFor(server) });
    const p = await sdkSb.getPreviewUrl(3000);
    assert.deepEqual([p.url, p.public, p.port], [preview.url, false, 3000]);
    assert.ok(p.signedUrl?.startsWith(`${preview.url}/_sandboxd/auth?token=`) && p.signedUrlExpiresAt);
    const r = await fetch(`${p.url}/sdk`, { headers: await sdkSb.previewHeaders() });
    assert.equal(r.status, 200);
    assert.equal(((await r.json()) as { path: string }).path, '/sdk');
    await assert.rejects(sdkSb.getPreviewUrl(70000), RangeError);

    const pub = await sbx(server, ['preview', sb.id, '3000', '--public', '--json']);
    assert.equal(pub.code, 0, describeResult(pub));
    assert.deepEqual(JSON.parse(pub.stdout), { port: 3000, url: preview.url, public: true });
    const priv = await sbx(server, ['preview', sb.id, '3000', '--private']);
    assert.equal(priv.code, 0, describeResult(priv));
    assert.ok(priv.stdout.startsWith(`${preview.url}\n  private: `), priv.stdout);
    assert.ok(priv.stdout.includes(`\n  ${preview.url}/_sandboxd/auth?token=`), priv.stdout);
    assert.equal((await get(`${preview.url}/`)).status, 401, 'private again');
    const bad = await sbx(server, ['preview', sb.id, '0']);
    assert.equal(bad.code, 2, describeResult(bad));
  });

  test("a deleted sandbox's previews are gone with it", async () => {
    const urls = [preview.url, (await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/3001`)).body.url as string];
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    // The daemon no longer listens on their ports, and nothing answers there. (Not "refused": the
    // ports are in the host's ephemeral range, and another process may be given one at once.)
    for (const url of urls) {
      const port = Number(new URL(url).port);
      assert.deepEqual(listeningPorts(port, port, server.pid), [], `the daemon no longer listens on ${port}`);
      await assert.rejects(get(`${url}/`), /ECONNREFUSED|ECONNRESET|socket hang up/, `${url} serves nothing`);
    }
  });
});

describe('preview URLs in host mode', { timeout: 180_000 }, () => {
  test('http://{port}-{id}.{domain}: token, signed link and public, routed by the Host header', async () => {
    const gatewayPort = await freePort();
    const server = await startServer({ templates: ['base', 'code-interpreter'], env: { SANDBOXD_GATEWAY_DOMAIN: 'sandboxes.test', SANDBOXD_GATEWAY_PORT: String(gatewayPort) } });
    try {
      const sb = await createSandbox(server, { template_name: 'code-interpreter' });
      await startApp(sb, 8000);
      const p = (await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/8000`)).body;
      assert.equal(p.url, `http://8000-${sb.id}.sandboxes.test:${gatewayPort}`);
      assert.equal((await get(`${p.url}/`)).status, 401);
      const ok = await get(`${p.url}/x`, { 'x-sandboxd-token': sb.authToken });
      assert.equal(ok.status, 200, ok.text);
      assert.equal(JSON.parse(ok.text).path, '/x');
      const landing = await get(p.signed_url);
      assert.equal(landing.status, 302);
      assert.equal((await get(`${p.url}/y`, { cookie: sessionCookie(landing.headers['set-cookie']) })).status, 200);
      // The agent's own host is still the agent's.
      assert.equal((await get(`${sb.publicHost}/health`, { authorization: `Bearer ${sb.authToken}` })).status, 200);
      assert.equal((await get(`http://8001-${sb.id}.sandboxes.test:${gatewayPort}/`, { 'x-sandboxd-token': sb.authToken })).status, 502, 'any port can be asked for with the token');
      await api(server, 'PUT', `/v1/sandboxes/${sb.id}/ports/8000`, { public: true });
      assert.equal((await get(`${p.url}/z`)).status, 200);
      assert.equal((await get(`http://8000-sbnosuch.sandboxes.test:${gatewayPort}/`)).status, 404);
    } finally {
      await server.stop();
    }
  });
});
