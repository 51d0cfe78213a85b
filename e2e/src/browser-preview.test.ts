import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page, Response } from 'playwright-core';
import { TokenService } from '../../packages/server/dist/services/tokens.js';
import { agent, api, createSandbox, startServer, type CreatedSandbox, type TestServer } from './harness.js';
import { launchChromium, SCREENSHOTS, watchErrors } from './browser-support.js';

// Preview URLs in a real browser (Debian's Chromium, headless, driven by playwright-core): a private
// preview refuses a browser without credentials; its signed link sets an HttpOnly session cookie and
// lands on the app without the token in the URL; the cookie keeps the browser in on reload, on
// other paths and for the page's own WebSocket; it opens its own port only; a public port opens to
// anyone; an expired or tampered link is refused.

/**
 * The app inside (one process per port): an HTML page that shows its path and the cookies its
 * scripts can read, and that opens a WebSocket to its own host when asked; /echo answers with the
 * Cookie header it got; /ws greets with the handshake's Cookie header, then echoes. Every page sets
 * a cookie of the app's own (readable by scripts) and tries to set one named like the gateway's.
 */
const APP = String.raw`
import base64, hashlib, http.server, json, sys

PORT = int(sys.argv[1])
WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
PAGE = '''<!doctype html>
<html><head><meta charset="utf-8"><title>preview app %d</title>
<style>body{font:16px sans-serif;margin:2em}code{background:#eee;padding:2px 4px}</style></head>
<body><h1>Preview app on port %d</h1>
<p>path: <code id="path"></code></p>
<p>cookies scripts can read: <code id="cookies"></code></p>
<p><button id="ws-try">WebSocket</button> <code id="ws">not tried</code></p>
<p>handshake cookies: <code id="ws-cookie"></code></p>
<script>
document.getElementById('path').textContent = location.pathname + location.search;
document.getElementById('cookies').textContent = document.cookie;
document.getElementById('ws-try').addEventListener('click', function () {
  var out = document.getElementById('ws');
  out.textContent = 'connecting';
  var ws = new WebSocket('ws://' + location.host + '/ws');
  ws.onopen = function () { ws.send('hello from the page'); };
  ws.onmessage = function (m) {
    if (m.data.indexOf('cookie:') === 0) { document.getElementById('ws-cookie').textContent = m.data.slice(7); return; }
    out.textContent = m.data;
    ws.close();
  };
  ws.onerror = function () { out.textContent = 'error'; };
});
document.body.setAttribute('data-ready', '1');
</script></body></html>
''' % (PORT, PORT)


def send_frame(wfile, op, payload):
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | op, n])
    elif n < 65536:
        head = bytes([0x80 | op, 126]) + n.to_bytes(2, 'big')
    else:
        head = bytes([0x80 | op, 127]) + n.to_bytes(8, 'big')
    wfile.write(head + payload)
    wfile.flush()


class App(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
        pass

    def reply(self, status, ctype, body, cookies=()):
        self.send_response(status)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(body)))
        self.send_header('Cache-Control', 'no-store')
        for c in cookies:
            self.send_header('Set-Cookie', c)
        self.end_headers()
        self.wfile.write(body)

    def websocket(self):
        key = self.headers.get('Sec-WebSocket-Key', '')
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header('Upgrade', 'websocket')
        self.send_header('Connection', 'Upgrade')
        self.send_header('Sec-WebSocket-Accept', accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        send_frame(self.wfile, 1, ('cookie:%s' % self.headers.get('Cookie', '')).encode())
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            op, n = head[0] & 15, head[1] & 127
            if n == 126:
                n = int.from_bytes(self.rfile.read(2), 'big')
            elif n == 127:
                n = int.from_bytes(self.rfile.read(8), 'big')
            mask = self.rfile.read(4) if head[1] & 128 else b'\0\0\0\0'
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if op == 8:
                send_frame(self.wfile, 8, data[:2])
                return
            if op == 9:
                send_frame(self.wfile, 10, data)
            elif op in (1, 2):
                send_frame(self.wfile, op, b'echo:' + data)

    def do_GET(self):
        if self.headers.get('Upgrade', '').lower() == 'websocket':
            return self.websocket()
        if self.path == '/favicon.ico':
            return self.reply(204, 'image/x-icon', b'')
        if self.path.startswith('/echo'):
            seen = {'port': PORT, 'path': self.path, 'cookie': self.headers.get('Cookie'), 'token': self.headers.get('X-Sandboxd-Token')}
            return self.reply(200, 'application/json', json.dumps(seen).encode())
        self.reply(200, 'text/html; charset=utf-8', PAGE.encode(), ['app_pref=blue; Path=/', 'sbxp_forged=1; Path=/'])


http.server.ThreadingHTTPServer(('127.0.0.1', PORT), App).serve_forever()
`;

interface Preview {
  url: string;
  port: number;
  public: boolean;
  signed_url?: string;
  signed_url_expires_at?: string;
}

async function previewOf(server: TestServer, sb: CreatedSandbox, port: number): Promise<Preview> {
  const res = await api<Preview>(server, 'GET', `/v1/sandboxes/${sb.id}/ports/${port}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

/** Starts the app on these ports inside the sandbox, then waits until each answers through its preview (with the token). */
async function startApps(server: TestServer, sb: CreatedSandbox, ports: number[]): Promise<void> {
  const launch = ports.map((p) => `nohup python3 /workspace/preview_app.py ${p} >/tmp/preview_app_${p}.log 2>&1 &`).join('\n');
  const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', `cat > /workspace/preview_app.py <<'EOF'\n${APP}\nEOF\n${launch}`] });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  for (const port of ports) {
    const { url } = await previewOf(server, sb, port);
    let last = 0;
    for (let i = 0; i < 150 && last !== 200; i++) {
      if (i > 0) await new Promise((res) => setTimeout(res, 100));
      last = (await fetch(`${url}/echo`, { headers: { 'x-sandboxd-token': sb.authToken } })).status;
    }
    assert.equal(last, 200, `the app on port ${port} answers through its preview`);
  }
}

/** A signed link that lands on `next`. */
const withNext = (signedUrl: string, next: string) => `${signedUrl}&next=${encodeURIComponent(next)}`;

/** What the app's page shows, once its script ran. */
async function shown(page: Page): Promise<{ path: string; cookies: string }> {
  await page.locator('body[data-ready="1"]').waitFor();
  return { path: await page.locator('#path').innerText(), cookies: await page.locator('#cookies').textContent() ?? '' };
}

/** The JSON body of a page Chromium shows (a 401 of the gateway, the app's /echo). */
async function json(res: Response | null): Promise<any> {
  assert.ok(res, 'a response');
  return JSON.parse(await res.text());
}

/**
 * Chromium's console line about a page that came with a 401: it names no URL and may come after the
 * next navigation began, so it is told apart by the responses' own statuses (asserted) instead.
 */
const REFUSED_LINE = /^console: Failed to load resource: the server responded with a status of 401 /;
/** What a page reported (taken from `errors`), but Chromium's console lines about 401s. */
const reported = (errors: string[]) => errors.splice(0).filter((e) => !REFUSED_LINE.test(e));
/** What a page reported besides the 401s expected of refused pages. */
const onlyRefusals = (errors: string[]) => reported(errors).filter((e) => !/^HTTP 401: /.test(e));

describe('preview URLs in a browser', { timeout: 300_000 }, () => {
  let server: TestServer;
  let browser: Browser;
  let sb: CreatedSandbox;
  let first: Preview;
  let second: Preview;
  /** The browser that opened the first preview's signed link (it holds that preview's session). */
  let context: BrowserContext;
  let page: Page;
  let errors: string[];

  before(async () => {
    server = await startServer({ templates: ['base', 'code-interpreter'] });
    browser = await launchChromium();
    mkdirSync(SCREENSHOTS, { recursive: true });
    sb = await createSandbox(server, { template_name: 'code-interpreter', timeout_seconds: 600 });
    await startApps(server, sb, [3000, 3001]);
    first = await previewOf(server, sb, 3000);
    second = await previewOf(server, sb, 3001);
    assert.deepEqual([first.public, second.public], [false, false], 'private by default');
    assert.notEqual(first.url, second.url);
    context = await browser.newContext({ viewport: { width: 1024, height: 640 } });
    page = await context.newPage();
    errors = watchErrors(page);
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  test('without credentials a private preview shows the 401 JSON', async () => {
    const res = await page.goto(`${first.url}/hello`);
    assert.equal(res?.status(), 401);
    assert.match(String(res?.headers()['content-type']), /^application\/json/);
    const body = await json(res);
    assert.equal(body.code, 'AUTHENTICATION_ERROR');
    assert.match(body.message, /port 3000 .* is private: send the sandbox's auth_token in the X-Sandboxd-Token header, or open the signed link/);
    assert.match(await page.locator('body').innerText(), /AUTHENTICATION_ERROR/, 'the page shows the JSON');
    await page.screenshot({ path: join(SCREENSHOTS, 'preview-401.png') });
    assert.deepEqual((await context.cookies()).map((c) => c.name), [], 'no cookie is set by a refusal');
    assert.deepEqual(onlyRefusals(errors), []);
  });

  test('the signed link with next=/hello sets an HttpOnly session cookie and lands on the app; scripts cannot read the cookie, the app never gets it', async () => {
    const link = withNext(first.signed_url!, '/hello');
    const res = await page.goto(link);
    assert.equal(res?.status(), 200);
    assert.equal(page.url(), `${first.url}/hello`, 'redirected to next, no token in the URL');
    const hop = res!.request().redirectedFrom();
    assert.ok(hop, 'the link redirected');
    assert.equal(hop.url(), link);
    assert.equal((await hop.response())?.status(), 302);
    assert.equal(hop.redirectedFrom(), null, 'one redirect, straight to the app');

    const name = `sbxp_${sb.id}_3000`;
    const session = (await context.cookies(first.url)).find((c) => c.name === name);
    assert.ok(session, `the session cookie ${name} is set: ${JSON.stringify(await context.cookies())}`);
    assert.deepEqual([session.httpOnly, session.sameSite, session.path, session.domain], [true, 'Strict', '/', '127.0.0.1']);
    assert.ok(session.expires > Date.now() / 1000 + 3600, 'a session that lasts');
    assert.equal(
      (await context.cookies()).filter((c) => c.name.startsWith('sbxp_')).length,
      1,
      "only the gateway's cookie: the app's one named like it was dropped",
    );

    const view = await shown(page);
    assert.equal(view.path, '/hello');
    assert.equal(view.cookies, 'app_pref=blue', "scripts see the app's cookie, not the HttpOnly session");
    assert.ok(!(await page.evaluate(() => document.cookie)).includes('sbxp_'));

    // The page's own request to its app: the app's cookie goes on, the gateway's stays behind.
    const echoed = await page.evaluate(async () => (await fetch('/echo/from-page')).json());
    assert.deepEqual(echoed, { port: 3000, path: '/echo/from-page', cookie: 'app_pref=blue', token: null });
    assert.deepEqual(reported(errors), []);
  });

  test('a reload and other paths of the preview stay authorized by the cookie; no token in any URL after the redirect', async () => {
    const urls: string[] = [];
    const seen = (r: { url(): string }) => urls.push(r.url());
    page.on('request', seen);

    const reloaded = await page.reload();
    assert.equal(reloaded?.status(), 200);
    assert.equal(page.url(), `${first.url}/hello`);
    assert.equal((await shown(page)).path, '/hello');

    const other = await page.goto(`${first.url}/other/page?x=1`);
    assert.equal(other?.status(), 200);
    assert.equal(page.url(), `${first.url}/other/page?x=1`);
    assert.equal((await shown(page)).path, '/other/page?x=1');

    const echo = await page.goto(`${first.url}/echo/nav`);
    assert.equal(echo?.status(), 200);
    const body = await json(echo);
    assert.equal(body.cookie, 'app_pref=blue', "the app's cookie round-trips; the session cookie never reaches the app");
    assert.equal(body.token, null);
    assert.match(String(await echo!.request().headerValue('cookie')), new RegExp(`(^|; )sbxp_${sb.id}_3000=`), 'the browser did send the session cookie');

    // Back to the page the link landed on, through history: the app, not the link again.
    await page.goBack();
    await page.goBack();
    assert.equal(page.url(), `${first.url}/hello`);
    assert.equal((await shown(page)).path, '/hello');

    page.off('request', seen);
    assert.ok(urls.length >= 4, JSON.stringify(urls));
    assert.deepEqual(urls.filter((u) => /token|_sandboxd/.test(u)), [], 'no token and no link in any URL after the redirect');
    assert.deepEqual(reported(errors), []);
  });

  test("the page's own WebSocket to its preview works with the cookie; the session cookie does not reach the app", async () => {
    const sockets: string[] = [];
    page.on('websocket', (ws) => sockets.push(ws.url()));
    await page.click('#ws-try');
    await page.locator('#ws', { hasText: 'echo:hello from the page' }).waitFor({ timeout: 15_000 });
    assert.deepEqual(sockets, [`${first.url.replace('http:', 'ws:')}/ws`]);
    assert.equal(await page.locator('#ws-cookie').textContent(), 'app_pref=blue', 'the handshake carried the app cookie only');
    await page.screenshot({ path: join(SCREENSHOTS, 'preview-app.png') });

    // A browser without the session: a socket opened from that origin (its 401 page) is refused.
    const anon = await browser.newContext();
    const anonPage = await anon.newPage();
    await anonPage.goto(`${first.url}/hello`);
    const outcome = await anonPage.evaluate(
      (url) =>
        new Promise<string>((resolve) => {
          const ws = new WebSocket(url);
          ws.onopen = () => resolve('open');
          ws.onerror = () => resolve('error');
        }),
      `${first.url.replace('http:', 'ws:')}/ws`,
    );
    assert.equal(outcome, 'error', 'no WebSocket without the session');
    await anon.close();
    assert.deepEqual(reported(errors), []);
  });

  test("another port's private preview is not opened by the first one's cookie; made public, it opens to anyone", async () => {
    const refused = await page.goto(`${second.url}/hello`);
    assert.equal(refused?.status(), 401);
    assert.equal((await json(refused)).code, 'AUTHENTICATION_ERROR');
    assert.match(
      String(await refused!.request().headerValue('cookie')),
      new RegExp(`sbxp_${sb.id}_3000=`),
      "the browser sent port 3000's session (cookies do not tell ports apart): refused all the same",
    );
    // Nor does port 3000's link open port 3001.
    const linkUrl = new URL(first.signed_url!);
    const crossLink = await page.goto(`${second.url}${linkUrl.pathname}${linkUrl.search}`);
    assert.equal(crossLink?.status(), 401);
    assert.match((await json(crossLink)).message, /another sandbox or port/);
    assert.ok(!(await context.cookies()).some((c) => c.name === `sbxp_${sb.id}_3001`), 'no session for port 3001');
    assert.deepEqual(onlyRefusals(errors), []);

    const pub = await api<Preview>(server, 'PUT', `/v1/sandboxes/${sb.id}/ports/3001`, { public: true });
    assert.equal(pub.status, 200, JSON.stringify(pub.body));
    assert.deepEqual([pub.body.url, pub.body.public, pub.body.signed_url], [second.url, true, undefined]);

    const opened = await page.goto(`${second.url}/hello`);
    assert.equal(opened?.status(), 200);
    assert.deepEqual(await shown(page), { path: '/hello', cookies: 'app_pref=blue' });
    const echoed = await page.evaluate(async () => (await fetch('/echo')).json());
    assert.equal(echoed.port, 3001);
    assert.equal(echoed.cookie, 'app_pref=blue', "a public port's app gets no gateway cookie either");

    // A browser with nothing at all.
    const fresh = await browser.newContext();
    const freshPage = await fresh.newPage();
    const freshErrors = watchErrors(freshPage);
    const anyone = await freshPage.goto(`${second.url}/anyone`);
    assert.equal(anyone?.status(), 200);
    assert.equal((await shown(freshPage)).path, '/anyone');
    await freshPage.click('#ws-try');
    await freshPage.locator('#ws', { hasText: 'echo:hello from the page' }).waitFor({ timeout: 15_000 });
    await freshPage.screenshot({ path: join(SCREENSHOTS, 'preview-public.png') });
    assert.deepEqual(reported(freshErrors), []);
    await fresh.close();
    // The first port stays private to anyone without its session.
    const stillPrivate = await browser.newContext();
    assert.equal((await (await stillPrivate.newPage()).goto(`${first.url}/hello`))?.status(), 401);
    await stillPrivate.close();
    assert.deepEqual(reported(errors), []);
  });

  test('an expired or tampered signed link is refused with 401 and sets no cookie', async () => {
    const visitor = await browser.newContext();
    const p = await visitor.newPage();
    const visitorErrors = watchErrors(p);
    const fresh = (await previewOf(server, sb, 3000)).signed_url!;
    const token = new URL(fresh).searchParams.get('token')!;
    const [header, payload, signature] = token.split('.') as [string, string, string];
    const linkWith = (t: string) => withNext(`${first.url}/_sandboxd/auth?token=${t}`, '/hello');

    // Signed with the daemon's own key, but expired a minute ago.
    const keys = new TokenService(join(server.dataDir, 'keys', 'jwt-ed25519.pem'), 60);
    const expired = await keys.issuePreview('link', sb.id, 3000, true, -60);
    const late = await p.goto(linkWith(expired.token));
    assert.equal(late?.status(), 401);
    const lateBody = await json(late);
    assert.equal(lateBody.code, 'TOKEN_EXPIRED');
    assert.match(lateBody.message, /preview link expired/);
    assert.equal(p.url(), linkWith(expired.token), 'not redirected');

    // The signature changed in its middle.
    const at = Math.floor(signature.length / 2);
    const badSig = `${signature.slice(0, at)}${signature[at] === 'A' ? 'B' : 'A'}${signature.slice(at + 1)}`;
    const forged = await p.goto(linkWith(`${header}.${payload}.${badSig}`));
    assert.equal(forged?.status(), 401);
    assert.equal((await json(forged)).code, 'AUTHENTICATION_ERROR');

    // The claims changed (a later expiry, another port) under the original signature.
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    const rewritten = Buffer.from(JSON.stringify({ ...claims, exp: claims.exp + 86_400 })).toString('base64url');
    assert.equal((await p.goto(linkWith(`${header}.${rewritten}.${signature}`)))?.status(), 401);
    const otherPort = Buffer.from(JSON.stringify({ ...claims, port: 3001 })).toString('base64url');
    assert.equal((await p.goto(`${second.url}/_sandboxd/auth?token=${header}.${otherPort}.${signature}`))?.status(), 401);
    // Cut short.
    assert.equal((await p.goto(linkWith(token.slice(0, -10))))?.status(), 401);

    assert.deepEqual(
      (await visitor.cookies()).filter((c) => c.name.startsWith('sbxp_')),
      [],
      'no refused link set a session',
    );
    assert.equal((await p.goto(`${first.url}/hello`))?.status(), 401, 'and the preview is still closed to this browser');
    assert.deepEqual(onlyRefusals(visitorErrors), []);

    // The untouched link does open it: the refusals were for the tampering.
    const ok = await p.goto(linkWith(token));
    assert.equal(ok?.status(), 200);
    assert.equal(p.url(), `${first.url}/hello`);
    assert.deepEqual(reported(visitorErrors), []);
    await visitor.close();
  });
});
