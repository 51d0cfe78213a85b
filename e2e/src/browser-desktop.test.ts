import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { agent, api, createSandbox, startServer, type CreatedSandbox, type TestServer } from './harness.js';
import { launchChromium, SCREENSHOTS, watchErrors } from './browser-support.js';

// Issue 31, item 4: a desktop sandbox's screen in the web console (noVNC through the private
// preview of its port, in a frame), in Chromium: click into the editor on that screen, type with
// the browser's keyboard, and read the text back from the file the editor saves in the sandbox.

let server: TestServer;
let browser: Browser;
let sb: CreatedSandbox;

before(async () => {
  // No warm pool, no network: Chromium fails the loads in flight (ERR_NETWORK_CHANGED) when
  // interfaces come and go on the host, as a pool booting sandboxes makes them.
  server = await startServer({ templates: ['base', 'desktop'], env: { SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0' } });
  browser = await launchChromium();
  mkdirSync(SCREENSHOTS, { recursive: true });
  sb = await createSandbox(server, { template_name: 'desktop', timeout_seconds: 900, internet_access: false });
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

async function until<T>(what: string, fn: () => Promise<T | undefined | null | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await fn().catch(() => undefined);
    if (v) return v;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}

const windows = async () => (await agent(sb, 'GET', '/desktop/windows/list')).body.windows as Array<{ id: string; title: string; x: number; y: number; width: number; height: number; focused: boolean }>;

test('the console shows the desktop through noVNC; a click and typing in the browser reach the editor', { timeout: 300_000 }, async () => {
  await agent(sb, 'POST', '/commands/background', { command: 'mousepad' });
  const editor = await until('the editor window', async () => (await windows()).find((w) => /mousepad/i.test(w.title)));

  const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  const page = await context.newPage();
  const errors = watchErrors(page);
  await page.goto(`${server.baseUrl}/console`);
  await page.fill('#api-key', server.apiKey);
  await page.click('#sign-in button[type=submit]');
  await page.locator('#live.on').waitFor({ timeout: 30_000 });
  await page.goto(`${server.baseUrl}/console#/sandboxes/${sb.id}`);
  await page.locator('#desktop-panel').waitFor({ timeout: 30_000 });
  await page.click('#desktop-open');
  const frame = page.frameLocator('#desktop-frame');
  const canvas = frame.locator('canvas').first();
  try {
    await canvas.waitFor({ timeout: 30_000 });
  } catch (err) {
    await page.screenshot({ path: join(SCREENSHOTS, 'console-desktop-failed.png') });
    const logs = (await agent(sb, 'GET', '/desktop/debug/logs')).body.logs as string[];
    throw new Error(`${(err as Error).message}\npage errors: ${errors.join('\n')}\nframe: ${page.frames().map((f) => f.url()).join(' ')}\ndesktop log: ${logs.slice(-15).join('\n')}`);
  }
  // noVNC draws the screen once connected: wait for its status to say so.
  await until('noVNC connected', async () => (await page.frames().find((f) => /vnc\.html/.test(f.url()))?.evaluate(() => document.querySelector('#noVNC_status')?.textContent ?? '')) !== undefined && (await canvas.boundingBox())!.width > 100);
  await page.waitForTimeout(1500);

  // A click in the middle of the editor, as the frame shows it (scaled to fit).
  const box = (await canvas.boundingBox())!;
  const scale = box.width / 1024;
  await page.mouse.click(box.x + (editor.x + editor.width / 2) * scale, box.y + (editor.y + editor.height / 2) * scale);
  await until('the editor focused by the click', async () => (await windows()).find((w) => w.id === editor.id && w.focused));
  const text = `through novnc ${randomBytes(3).toString('hex')}`;
  await page.keyboard.type(text, { delay: 30 });
  await page.screenshot({ path: join(SCREENSHOTS, 'console-desktop.png') });

  // Saved through the agent API, and read back from the sandbox's file.
  const path = `/tmp/novnc-${randomBytes(3).toString('hex')}.txt`;
  await agent(sb, 'POST', '/desktop/keyboard/combination', { keys: ['ctrl', 's'] });
  await until('the save dialog focused', async () => (await windows()).find((w) => /save/i.test(w.title) && w.focused));
  await agent(sb, 'POST', '/desktop/keyboard/combination', { keys: ['ctrl', 'a'] });
  await agent(sb, 'POST', '/desktop/keyboard/type', { text: path });
  const saved = await until('the saved file', async () => {
    await agent(sb, 'POST', '/desktop/keyboard/press', { key: 'Return' });
    await new Promise((r) => setTimeout(r, 500));
    const r = await agent(sb, 'GET', `/files/read?path=${encodeURIComponent(path)}`);
    return r.status === 200 ? String(r.body.content) : undefined;
  });
  assert.equal(saved.trimEnd(), text);
  // noVNC asks for its package.json (to show its version), which Debian's package does not ship.
  assert.deepEqual(errors.filter((e) => !/package\.json|status of 404/.test(e)), []);
  await context.close();
  await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
});
