import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import WebSocket from 'ws';
import { Sandbox } from '@e2b/desktop';
import { api, freePort, startServer, type TestServer } from './harness.js';

// The unmodified `@e2b/desktop` (2.4.0, pinned in e2e/package.json) on our `desktop` template, set
// up as a user would (E2B_API_URL, E2B_SANDBOX_URL, an `e2b_` key), on a daemon in host mode so
// that the stream URL the client builds (`https://6080-<id>.<domain>/vnc.html`) names our gateway.
// The client drives everything through commands and files: its own Xvfb and startxfce4 on create
// (ours already run: that must be harmless), scrot, xdotool, xrandr, x11vnc and noVNC.

const DOMAIN = 'sandboxes.test';
let server: TestServer;
let gatewayPort: number;
let desk: Sandbox;
const made: string[] = [];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `probe` until it gives a value, or fails naming `what`. */
async function until<T>(what: string, probe: () => Promise<T | undefined | null | false>, ms = 30_000): Promise<T> {
  for (const deadline = Date.now() + ms; ; await sleep(200)) {
    const v = await probe();
    if (v) return v;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
  }
}

async function templateReady(name: string): Promise<void> {
  for (const deadline = Date.now() + 15 * 60_000; ; await sleep(2000)) {
    const t = await api(server, 'GET', `/v1/templates/${name}`);
    if (t.body?.status === 'active') return;
    assert.ok(Date.now() < deadline && t.body?.status !== 'failed', `template ${name}: ${JSON.stringify(t.body)}`);
  }
}

/** stdout of a shell command in the sandbox (as the client's commands run: `user`, login shell). */
async function sh(cmd: string): Promise<string> {
  return (await desk.commands.run(cmd)).stdout;
}

/** A GET through host mode's single gateway port with the given Host header (no DNS, no TLS terminator). */
function viaHost(host: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: gatewayPort, path, headers: { host, ...headers } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The first message of noVNC's WebSocket (websockify → x11vnc): the RFB version banner. */
function rfbBanner(host: string, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${gatewayPort}/websockify`, ['binary'], { headers: { host, ...headers } });
    const t = setTimeout(() => {
      ws.terminate();
      reject(new Error('no RFB banner within 15 s'));
    }, 15_000);
    ws.once('message', (data) => {
      clearTimeout(t);
      ws.close();
      resolve(Buffer.from(data as Buffer).toString('latin1'));
    });
    ws.once('unexpected-response', (_req, res) => {
      clearTimeout(t);
      reject(new Error(`upgrade refused: ${res.statusCode}`));
    });
    ws.once('error', (err) => {
      clearTimeout(t);
      reject(err);
    });
  });
}

/** The RFB 3.8 security types x11vnc offers (1: none, 2: VNC password), through noVNC's WebSocket. */
function rfbSecurityTypes(host: string, headers: Record<string, string>): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${gatewayPort}/websockify`, ['binary'], { headers: { host, ...headers } });
    let got = Buffer.alloc(0);
    let banner = false;
    const t = setTimeout(() => {
      ws.terminate();
      reject(new Error('no RFB security types within 15 s'));
    }, 15_000);
    ws.on('message', (data) => {
      got = Buffer.concat([got, Buffer.from(data as Buffer)]);
      if (!banner && got.length >= 12) {
        banner = true;
        got = got.subarray(12);
        ws.send(Buffer.from('RFB 003.008\n', 'latin1'));
      }
      if (banner && got.length >= 1 && got.length >= 1 + got[0]!) {
        clearTimeout(t);
        ws.close();
        resolve([...got.subarray(1, 1 + got[0]!)]);
      }
    });
    ws.once('error', (err) => {
      clearTimeout(t);
      reject(err);
    });
  });
}

/** A small xev window that logs its button and key events to `log`; its centre on the screen. */
async function eventWindow(name: string, log: string): Promise<{ x: number; y: number }> {
  // Line-buffered: each event reaches the file as it comes.
  await desk.commands.run(`stdbuf -oL xev -name ${name} -geometry 300x200+300+200 -event button > ${log} 2>&1`, { background: true, timeoutMs: 0 });
  const id = await until(`the ${name} window`, async () => (await desk.commands.run(`xdotool search --onlyvisible --name '^${name}$' || true`)).stdout.trim().split('\n')[0]);
  const geo = Object.fromEntries(
    (await sh(`xdotool getwindowgeometry --shell ${id}`))
      .trim()
      .split('\n')
      .map((l) => l.split('=') as [string, string]),
  );
  await desk.commands.run(`xdotool windowactivate --sync ${id} || true`);
  return { x: Number(geo.X) + Math.floor(Number(geo.WIDTH) / 2), y: Number(geo.Y) + Math.floor(Number(geo.HEIGHT) / 2) };
}

/** The button numbers of the ButtonPress events xev logged. */
async function pressedButtons(log: string): Promise<number[]> {
  const text = await desk.files.read(log);
  return [...text.matchAll(/ButtonPress event[\s\S]*?button (\d+)/g)].map((m) => Number(m[1]));
}

before(async () => {
  gatewayPort = await freePort();
  server = await startServer({
    env: { SANDBOXD_REGISTRY_URL: 'none', SANDBOXD_GATEWAY_DOMAIN: DOMAIN, SANDBOXD_GATEWAY_PORT: String(gatewayPort) },
    templates: ['base', 'desktop'],
  });
  await templateReady('desktop');
  const k = await api(server, 'POST', '/v1/admin/keys', { org: 'default', name: 'e2b-desktop', format: 'e2b' });
  assert.equal(k.status, 201, JSON.stringify(k.body));
  process.env.E2B_API_URL = `${server.baseUrl}/e2b`;
  process.env.E2B_SANDBOX_URL = `${server.baseUrl}/e2b/sandbox`;
  process.env.E2B_API_KEY = k.body.secret;
  // Nothing may reach E2B's own hosts.
  process.env.E2B_DOMAIN = 'invalid';
  // The client's default template is `desktop`: ours.
  desk = await Sandbox.create({ timeoutMs: 900_000 });
  made.push(desk.sandboxId);
});

after(async () => {
  for (const id of made) await api(server, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
  await server?.stop();
});

test('create starts cleanly on our running desktop: one X server, one Xfce session, one panel', { timeout: 120_000 }, async () => {
  const info = await api(server, 'GET', `/v1/sandboxes/${desk.sandboxId}`);
  assert.equal(info.body.template_name, 'desktop', JSON.stringify(info.body));
  // The client ran `Xvfb :0` and `startxfce4` itself: the first found the display taken and left,
  // the second (our /usr/local/bin/startxfce4) saw the session running and did nothing.
  assert.equal((await sh('pgrep -c -x Xvfb')).trim(), '1');
  for (const p of ['xfce4-session', 'xfwm4', 'xfdesktop', 'xfce4-panel']) assert.equal((await sh(`pgrep -c -x ${p}`)).trim(), '1', `${p} runs once`);
  assert.equal((await sh('echo $DISPLAY')).trim(), ':0');
});

test('getScreenSize and screenshot: 1024x768, a real PNG', { timeout: 60_000 }, async () => {
  assert.deepEqual(await desk.getScreenSize(), { width: 1024, height: 768 });
  const png = await desk.screenshot();
  assert.ok(png instanceof Uint8Array && png.length > 1000, `a screenshot of ${png.length} bytes`);
  const b = Buffer.from(png);
  assert.equal(b.subarray(1, 4).toString('latin1'), 'PNG');
  assert.deepEqual([b.readUInt32BE(16), b.readUInt32BE(20)], [1024, 768], 'the IHDR size');
  // The file it read was removed; nothing piles up in /tmp.
  await until('the screenshot file removed', async () => (await sh('ls /tmp | grep -c ^screenshot- || true')).trim() === '0');
});

test('moveMouse, then getCursorPosition; drag ends where it was sent', { timeout: 60_000 }, async () => {
  await desk.moveMouse(123, 456);
  assert.deepEqual(await desk.getCursorPosition(), { x: 123, y: 456 });
  await desk.moveMouse(1000, 700);
  assert.deepEqual(await desk.getCursorPosition(), { x: 1000, y: 700 });
  await desk.drag([50, 60], [70, 80]);
  assert.deepEqual(await desk.getCursorPosition(), { x: 70, y: 80 });
});

test('clicks and scrolls reach a window: left, right, middle, double, wheel', { timeout: 90_000 }, async () => {
  const log = `/tmp/xev-${randomBytes(3).toString('hex')}.log`;
  const at = await eventWindow('e2bclicks', log);
  await desk.leftClick(at.x, at.y);
  await until('button 1', async () => (await pressedButtons(log)).length >= 1, 10_000);
  await desk.rightClick(at.x, at.y);
  await desk.middleClick(at.x, at.y);
  await desk.doubleClick(at.x, at.y);
  await desk.scroll('down', 2);
  await desk.scroll('up', 1);
  const want = [1, 3, 2, 1, 1, 5, 5, 4];
  const got = await until('every press', async () => {
    const b = await pressedButtons(log);
    return b.length >= want.length ? b : undefined;
  }, 15_000);
  assert.deepEqual(got, want);
  await desk.commands.run('pkill -x xev || true');
});

test('launch, write and press: typed text lands in an editor, which saves it to a file we read back', { timeout: 120_000 }, async () => {
  const path = `/home/user/typed-${randomBytes(3).toString('hex')}.txt`;
  const line1 = `typed by @e2b/desktop ${randomBytes(4).toString('hex')}`;
  const line2 = "quotes ' \" and $HOME stay as typed";
  await desk.files.write(path, '');
  // launch runs gtk-launch with the application's desktop file id.
  await desk.launch('org.xfce.mousepad', path);
  const name = path.split('/').pop()!;
  const win = await until('the editor window', async () => (await desk.commands.run(`xdotool search --onlyvisible --name '${name}' || true`)).stdout.trim().split('\n')[0]);
  await desk.commands.run(`xdotool windowactivate --sync ${win}`);
  await until('the editor focused', async () => (await sh('xdotool getactivewindow getwindowname || true')).includes(name));
  assert.match(await desk.getCurrentWindowId(), /^\d+$/);
  assert.match(await desk.getWindowTitle(win), new RegExp(name.replace('.', '\\.')));
  await desk.write(line1);
  await desk.press('enter');
  await desk.write(line2, { chunkSize: 10, delayInMs: 10 });
  await desk.press(['ctrl', 's']);
  const saved = await until('the saved text', async () => {
    const t = await desk.files.read(path);
    return t.includes(line2) ? t : undefined;
  });
  assert.equal(saved.trimEnd(), `${line1}\n${line2}`);
  await desk.commands.run('pkill -x mousepad || true');
});

test('stream: start, getUrl names our gateway (host mode); the preview serves noVNC and the VNC server; stop', { timeout: 120_000 }, async () => {
  assert.equal(desk.sandboxDomain, DOMAIN, 'the control plane gave host mode\'s domain');
  await desk.stream.start();
  const url = new URL(desk.stream.getUrl());
  assert.equal(url.protocol, 'https:');
  assert.equal(url.hostname, `6080-${desk.sandboxId}.${DOMAIN}`);
  assert.equal(url.pathname, '/vnc.html');
  assert.equal(url.searchParams.get('autoconnect'), 'true');
  assert.equal(url.searchParams.get('resize'), 'scale');
  // Its x11vnc and noVNC (from /opt/noVNC, our link to Debian's) run in the sandbox.
  assert.equal((await sh('pgrep -c -x x11vnc')).trim(), '1');
  assert.match(await sh('netstat -tln'), /:6080 /);

  // HTTPS is the TLS terminator's part (docs/e2b.md, host mode): here the same request in plain
  // HTTP to the gateway's host-mode port, with the URL's host.
  const path = `${url.pathname}${url.search}`;
  const denied = await viaHost(url.host, path);
  assert.equal(denied.status, 401, 'a preview is private: no token, no page');
  const token = desk.trafficAccessToken ?? (desk as unknown as { envdAccessToken: string }).envdAccessToken;
  assert.ok(token, 'the sandbox has an access token');
  const page = await viaHost(url.host, path, { 'x-sandboxd-token': token });
  assert.equal(page.status, 200, page.body.slice(0, 300));
  assert.match(page.body, /noVNC/);
  assert.match(await rfbBanner(url.host, { 'x-sandboxd-token': token }), /^RFB 003\.00\d\n/);

  // Opened to anyone with the URL, as E2B's streams are: the page and the VNC stream need no token.
  const pub = await api(server, 'PUT', `/v1/sandboxes/${desk.sandboxId}/ports/6080`, { public: true });
  assert.equal(pub.status, 200, JSON.stringify(pub.body));
  assert.equal((await viaHost(url.host, path)).status, 200);
  assert.match(await rfbBanner(url.host, {}), /^RFB 003\.00\d\n/);
  assert.deepEqual(await rfbSecurityTypes(url.host, {}), [1], 'no VNC password by default (-nopw)');

  // A second start while it runs is the client's own error; stop ends both.
  await assert.rejects(desk.stream.start(), /already running/);
  await desk.stream.stop();
  await until('x11vnc gone', async () => (await sh('pgrep -c -x x11vnc || true')).trim() === '0', 10_000);
  await until('noVNC gone', async () => !/:6080 /.test(await sh('netstat -tln')), 10_000);

  // requireAuth: x11vnc asks for the password the client made (VNC authentication, type 2).
  await desk.stream.start({ requireAuth: true });
  assert.match(desk.stream.getAuthKey(), /^[A-Za-z0-9]{16}$/);
  assert.deepEqual(await rfbSecurityTypes(url.host, {}), [2]);
  await desk.stream.stop();
});
