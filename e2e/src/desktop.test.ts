import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox as HopxSandbox, DesktopNotAvailableError } from '@hopx-ai/sdk';
import { NotFoundError, Sandbox, SandboxdError, ValidationError } from '@sandboxd/sdk';
import { startServer, type TestServer } from './harness.js';
import { clientFor, describeResult, SandboxPool, sbx } from './sdk-support.js';

// The built-in `desktop` template (Xvfb + Xfce, started with the sandbox) and the agent's
// /desktop/* API, through our SDK and the unmodified official client (@hopx-ai/sdk).

let server: TestServer;
let pool: SandboxPool;
let desk: Sandbox;
let plain: Sandbox;

/** Width and height from a PNG's IHDR chunk (and that it is a PNG at all). */
function pngSize(png: Uint8Array): { width: number; height: number } {
  const b = Buffer.from(png);
  assert.equal(b.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'a PNG signature');
  assert.equal(b.subarray(12, 16).toString(), 'IHDR');
  return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
}

async function until<T>(what: string, fn: () => Promise<T | undefined | null | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (last error: ${String(last)})` : ''}`);
}

before(async () => {
  server = await startServer({ templates: ['base', 'desktop'] });
  pool = new SandboxPool(clientFor(server));
  [desk, plain] = await Promise.all([pool.create({ template: 'desktop' }), pool.create({ template: 'base' })]);
});
after(async () => {
  await pool?.cleanup();
  await server?.stop();
});

describe('desktop sandbox', () => {
  test('the display is up when the create answers: a 1024x768 PNG, and the display info says so', async () => {
    const t0 = Date.now();
    const png = await desk.desktop.screenshot();
    assert.deepEqual(pngSize(png), { width: 1024, height: 768 });
    assert.ok(png.length > 2000, `a real picture, not an empty one (${png.length} bytes)`);
    process.stderr.write(`first screenshot ${Date.now() - t0} ms after create answered\n`);
    assert.deepEqual(await desk.desktop.displayInfo(), { width: 1024, height: 768, depth: 24, display: ':0' });
    const region = await desk.desktop.screenshotRegion({ x: 10, y: 20, width: 300, height: 200 });
    assert.deepEqual(pngSize(region), { width: 300, height: 200 });
    // DISPLAY is set for the sandbox's own programs too.
    const r = await desk.commands.run('echo $DISPLAY; xdpyinfo | grep dimensions');
    assert.match(r.stdout, /^:0\n.*1024x768 pixels/s, r.stderr);
  });

  test('a mouse move, then the cursor is there; clicks and scrolls are accepted', async () => {
    await desk.desktop.moveMouse(123, 456);
    assert.deepEqual(await desk.desktop.cursorPosition(), { x: 123, y: 456 });
    await desk.desktop.moveMouse(700, 300);
    assert.deepEqual(await desk.desktop.cursorPosition(), { x: 700, y: 300 });
    await desk.desktop.click(500, 400);
    await desk.desktop.scroll(500, 400, 2);
  });

  test('typed text reaches an editor, which saves it (ctrl+s and a file name) to a file we read back', async () => {
    const text = `typed by sandboxd ${randomBytes(4).toString('hex')}`;
    const path = `/tmp/typed-${randomBytes(4).toString('hex')}.txt`;
    await desk.commands.background('mousepad');
    const editor = await until('the editor window', async () => (await desk.desktop.windows()).find((w) => /mousepad/i.test(w.title)));
    await desk.desktop.focusWindow(editor.id);
    await until('the editor focused', async () => (await desk.desktop.windows()).find((w) => w.id === editor.id && w.focused));
    await desk.desktop.type(text);
    await desk.desktop.hotkey('ctrl', 's');
    const dialog = await until('the save dialog', async () => (await desk.desktop.windows()).find((w) => /save/i.test(w.title)));
    await until('the save dialog focused', async () => (await desk.desktop.windows()).find((w) => w.id === dialog.id && w.focused));
    await desk.desktop.hotkey('ctrl', 'a');
    await desk.desktop.type(path);
    // The file chooser may first take Return to close its completion list: Return until it saves.
    const saved = await until('the saved file', async () => {
      await desk.desktop.press('Return');
      await new Promise((r) => setTimeout(r, 500));
      return (await desk.files.read(path).catch(() => '')) || undefined;
    });
    assert.equal(saved.trimEnd(), text);
    // The editor's title now names the file.
    await until('the title naming the file', async () => (await desk.desktop.windows()).find((w) => w.title.includes(path.split('/').pop()!)));
  });

  test('clipboard: set, get, history', async () => {
    const a = `clip-${randomBytes(3).toString('hex')}`;
    await desk.desktop.setClipboard(a);
    assert.equal(await desk.desktop.getClipboard(), a);
    await desk.desktop.setClipboard('second');
    assert.equal(await desk.desktop.getClipboard(), 'second');
    const h = await desk.desktop.clipboardHistory();
    assert.deepEqual(h.slice(0, 2), ['second', a]);
    // The sandbox's programs see the same clipboard.
    assert.equal((await desk.commands.run('xclip -selection clipboard -o')).stdout, 'second');
  });

  test('a recording: start, status, stop, download an MP4', async () => {
    const started = await desk.desktop.startRecording();
    assert.equal(started.recording, true);
    assert.match(started.recordingId ?? '', /^rec_/);
    await desk.desktop.moveMouse(50, 50);
    await new Promise((r) => setTimeout(r, 1500));
    const st = await desk.desktop.recordingStatus();
    assert.equal(st.recording, true);
    const stopped = await desk.desktop.stopRecording();
    assert.equal(stopped.recording, false);
    assert.equal(stopped.status, 'stopped');
    const mp4 = Buffer.from(await desk.desktop.downloadRecording(started.recordingId!));
    assert.equal(mp4.subarray(4, 8).toString(), 'ftyp', 'an MP4');
    assert.equal(mp4.length, stopped.fileSize);
    await assert.rejects(desk.desktop.downloadRecording('rec_nope'), (e: unknown) => e instanceof NotFoundError && (e as SandboxdError).code === 'RECORDING_NOT_FOUND');
  });

  test('VNC: noVNC is served through the private preview of its port', async () => {
    const info = await desk.desktop.startVnc();
    assert.equal(info.running, true);
    assert.equal(info.port, 6080);
    const p = await desk.getPreviewUrl(6080);
    assert.equal(p.public, false);
    const anon = await fetch(`${p.url}/vnc.html`);
    assert.equal(anon.status, 401, 'private: no token, no page');
    await anon.text();
    const page = await fetch(`${p.url}/vnc.html`, { headers: await desk.previewHeaders() });
    assert.equal(page.status, 200);
    assert.match(await page.text(), /noVNC/);
    const link = await desk.desktop.streamUrl();
    assert.match(link, /\/_sandboxd\/auth\?token=.*&next=%2Fvnc\.html/);
  });

  test('sbx desktop screenshot writes the PNG; sbx desktop open prints the signed noVNC link', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sbx-desktop-'));
    try {
      const file = join(dir, 'shot.png');
      const r = await sbx(server, ['desktop', 'screenshot', desk.id, '-o', file]);
      assert.equal(r.code, 0, describeResult(r));
      assert.deepEqual(pngSize(await readFile(file)), { width: 1024, height: 768 });
      const o = await sbx(server, ['desktop', 'open', desk.id]);
      assert.equal(o.code, 0, describeResult(o));
      const link = o.stdout.trim();
      assert.match(link, /^http:\/\/127\.0\.0\.1:\d+\/_sandboxd\/auth\?token=[^&]+&next=%2Fvnc\.html/);
      // The link opens noVNC: its session cookie, then the page.
      const first = await fetch(link, { redirect: 'manual' });
      assert.equal(first.status, 302);
      const cookie = String(first.headers.get('set-cookie')).split(';')[0]!;
      const page = await fetch(new URL(first.headers.get('location')!, link), { headers: { cookie } });
      assert.equal(page.status, 200);
      assert.match(await page.text(), /noVNC/);
      const bad = await sbx(server, ['desktop', 'screenshot', plain.id, '-o', join(dir, 'no.png')]);
      assert.notEqual(bad.code, 0);
      assert.match(bad.stderr, /no desktop/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('bad input is a 400 naming the field; an unknown window a 404', async () => {
    await assert.rejects(desk.desktop.moveMouse(-5, 10), (e: unknown) => e instanceof ValidationError && /x:/.test((e as Error).message));
    await assert.rejects(desk.desktop.press('--help'), (e: unknown) => e instanceof ValidationError);
    await assert.rejects(desk.desktop.focusWindow('0x7fffffff'), (e: unknown) => e instanceof NotFoundError && (e as SandboxdError).code === 'WINDOW_NOT_FOUND');
  });

  test('a sandbox without a desktop answers 501 DESKTOP_NOT_AVAILABLE with what it lacks', async () => {
    await assert.rejects(plain.desktop.screenshot(), (e: unknown) => {
      const s = e as SandboxdError;
      assert.equal(s.code, 'DESKTOP_NOT_AVAILABLE');
      assert.equal(s.status, 501);
      assert.match(s.message, /Xvfb/);
      return true;
    });
  });

  test('the official client: screenshot, mouse, keyboard, display, windows; DesktopNotAvailableError elsewhere', async () => {
    const hx = await HopxSandbox.connect(desk.id, server.apiKey, server.baseUrl);
    const shot = await hx.desktop.screenshot();
    assert.equal(shot.format, 'png');
    assert.deepEqual(pngSize(Buffer.from(shot.image, 'base64')), { width: shot.width, height: shot.height });
    const region = await hx.desktop.screenshotRegion(0, 0, 64, 32);
    assert.deepEqual(pngSize(region), { width: 64, height: 32 });
    await hx.desktop.mouseMove(321, 234);
    assert.deepEqual(await desk.desktop.cursorPosition(), { x: 321, y: 234 });
    await hx.desktop.mouseClick(321, 234, { button: 'left', clicks: 1 });
    await hx.desktop.keyboardPress('Escape');
    await hx.desktop.keyboardCombination(['ctrl', 'Escape']);
    await hx.desktop.keyboardPress('Escape');
    const display = await hx.desktop.getDisplayInfo();
    assert.equal(display.width, 1024);
    assert.ok(Array.isArray(await hx.desktop.listWindows()));
    await hx.desktop.setClipboard('from hopx');
    assert.equal(await hx.desktop.getClipboard(), 'from hopx');
    const vnc = await hx.desktop.getVncInfo();
    assert.equal(vnc.port, 6080);
    const other = await HopxSandbox.connect(plain.id, server.apiKey, server.baseUrl);
    await assert.rejects(other.desktop.screenshot(), (e: unknown) => e instanceof DesktopNotAvailableError);
  });

  test('a new resolution: the display restarts at it', async () => {
    await desk.desktop.setResolution(1280, 720);
    assert.deepEqual(pngSize(await desk.desktop.screenshot()), { width: 1280, height: 720 });
    assert.equal((await desk.desktop.displayInfo()).width, 1280);
    await desk.desktop.setResolution(1024, 768);
    assert.deepEqual(pngSize(await desk.desktop.screenshot()), { width: 1024, height: 768 });
  });
});
