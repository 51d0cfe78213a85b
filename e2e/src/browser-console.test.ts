import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { api, createSandbox } from './harness.js';
import { browserEnv, SCREENSHOTS, watchErrors } from './browser-support.js';

// Issue 14, item 5 (its first part): the web console at /console in a real browser. Sign in with a
// key (session storage, never a URL), see the organization's sandboxes change as they change,
// create, pause, filter and delete from the page, on a laptop and a phone screen.

const env = browserEnv();

const row = (page: Page, id: string) => page.locator(`#sandbox-rows [data-id="${id}"]`);

describe('/console in a browser', { timeout: 300_000 }, () => {
  test('sign in, watch sandboxes live, create, pause, filter and delete; the key stays out of every URL', async () => {
    const context = await env.browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    const errors = watchErrors(page);
    const urls: string[] = [];
    page.on('request', (r) => urls.push(r.url()));

    const res = await page.goto(`${env.server.baseUrl}/console`);
    assert.equal(res?.status(), 200);
    assert.match(String(res?.headers()['content-security-policy']), /script-src 'self'(;|$)/);

    // A wrong key is refused with a message (the 401 it got is expected, not a page error).
    await page.fill('#api-key', 'sbd_not_a_key');
    await page.click('#sign-in button[type=submit]');
    await page.locator('.notice.error').waitFor();
    assert.match(await page.locator('.notice.error').innerText(), /not valid/);
    const refused = errors.splice(0).filter((e) => !/401/.test(e));
    assert.deepEqual(refused, []);
    await page.screenshot({ path: join(SCREENSHOTS, 'console-sign-in.png') });
    // The manual and the API reference are one click away, signed in or not.
    assert.equal(await page.locator('#sign-in #nav-manual').getAttribute('href'), '/manual');
    assert.equal(await page.locator('#sign-in #nav-api-reference').getAttribute('href'), '/docs');

    await page.fill('#api-key', env.server.apiKey);
    await page.click('#sign-in button[type=submit]');
    await page.locator('#live.on').waitFor({ timeout: 30_000 });
    assert.equal(await page.locator('header nav #nav-manual').getAttribute('href'), '/manual');
    assert.equal(await page.locator('header nav #nav-api-reference').getAttribute('href'), '/docs');
    const manual = await fetch(`${env.server.baseUrl}/manual`);
    assert.equal(manual.status, 200);
    assert.match(await manual.text(), /href="\/manual\/lifecycle-api\.md"/, 'the manual lists its pages');

    // A sandbox made elsewhere (the API) appears without a reload.
    const other = await createSandbox(env.server, { template_name: 'base' });
    await row(page, other.id).waitFor({ timeout: 30_000 });

    // One made from the page.
    await page.selectOption('#template', 'base');
    await page.check('#sleep');
    await page.click('#create');
    await page.locator('.notice', { hasText: 'Created' }).waitFor({ timeout: 60_000 });
    const made = (await page.locator('.notice').innerText()).match(/Created (\S+)\./)![1]!;
    await row(page, made).waitFor();
    assert.equal(await row(page, made).getAttribute('data-status'), 'running');
    const madeInfo = (await api(env.server, 'GET', `/v1/sandboxes/${made}`)).body;
    assert.deepEqual([madeInfo.idle_timeout_seconds, madeInfo.auto_resume], [600, true], 'made to sleep when idle');

    // Pause from the page; a pause made through the API shows too.
    await row(page, made).getByRole('button', { name: `Pause ${made}` }).click();
    await page.locator(`#sandbox-rows [data-id="${made}"][data-status="paused"]`).waitFor();
    assert.equal((await api(env.server, 'GET', `/v1/sandboxes/${made}`)).body.status, 'paused');
    assert.equal((await api(env.server, 'POST', `/v1/sandboxes/${other.id}/pause`)).status, 200);
    await page.locator(`#sandbox-rows [data-id="${other.id}"][data-status="paused"]`).waitFor();
    await row(page, made).getByRole('button', { name: `Resume ${made}` }).click();
    await page.locator(`#sandbox-rows [data-id="${made}"][data-status="running"]`).waitFor();

    // Filter.
    await page.fill('#filter', made.slice(-6));
    assert.deepEqual(await page.locator('#sandbox-rows > [data-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-id'))), [made]);
    await page.fill('#filter', '');
    await page.screenshot({ path: join(SCREENSHOTS, 'console-sandboxes.png') });

    // A phone screen: the same page, one column.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: join(SCREENSHOTS, 'console-phone.png'), fullPage: true });
    assert.ok(await page.locator('#create').isVisible());
    await page.setViewportSize({ width: 1280, height: 800 });

    // Deleted through the API, and from the page: both rows go.
    assert.equal((await api(env.server, 'DELETE', `/v1/sandboxes/${other.id}`)).status, 200);
    await row(page, other.id).waitFor({ state: 'detached' });
    await row(page, made).getByRole('button', { name: `Delete ${made}` }).click();
    await row(page, made).waitFor({ state: 'detached' });
    assert.equal((await api(env.server, 'GET', `/v1/sandboxes/${made}`)).status, 404);

    // A reload keeps the session (this tab's storage); signing out forgets the key.
    await page.reload();
    await page.locator('#live.on').waitFor({ timeout: 30_000 });
    await page.click('#sign-out');
    await page.locator('#sign-in').waitFor();
    assert.equal(await page.evaluate(() => window.sessionStorage.getItem('sandboxd.apiKey')), null);

    assert.deepEqual(urls.filter((u) => u.includes(env.server.apiKey)), [], 'the key is never in a URL');
    assert.deepEqual(errors, []);
    await context.close();
  });

  test("a sandbox's page: live charts, a terminal, files up and down, processes, events, and delete", async () => {
    const context = await env.browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
    const page = await context.newPage();
    const errors = watchErrors(page);
    const sb = await createSandbox(env.server, { template_name: 'base' });
    await page.goto(`${env.server.baseUrl}/console`);
    await page.fill('#api-key', env.server.apiKey);
    await page.click('#sign-in button[type=submit]');
    await row(page, sb.id).waitFor({ timeout: 30_000 });
    await row(page, sb.id).getByRole('link', { name: sb.id }).click();
    await page.locator('#sandbox-state[data-status="running"]').waitFor();
    assert.equal(new URL(page.url()).hash, `#/sandboxes/${sb.id}`);

    // The terminal: a real shell in the sandbox, typed into.
    await page
      .locator('#terminal-status', { hasText: /^connected$/ })
      .waitFor({ timeout: 30_000 })
      .catch(async (err: Error) => {
        throw new Error(`${err.message}\nthe terminal says: ${await page.locator('#terminal-status').textContent()}`);
      });
    await page.locator('#terminal .xterm').click();
    await page.keyboard.type('echo "sum=$((6*7))"; hostname > /tmp/from-terminal\n');
    await page.locator('#terminal .xterm-rows', { hasText: 'sum=42' }).waitFor({ timeout: 15_000 });
    const agent = (path: string) => fetch(`${sb.publicHost}${path}`, { headers: { authorization: `Bearer ${sb.authToken}` } });
    // `hostname > file` runs after the echo shown: the file may still be empty for a moment.
    let written = { content: '' };
    for (const end = Date.now() + 10_000; written.content.trim() === '' && Date.now() < end; await new Promise((r) => setTimeout(r, 100))) {
      const r = await agent('/files/read?path=/tmp/from-terminal');
      if (r.ok) written = (await r.json()) as { content: string };
    }
    assert.ok(written.content.trim().length > 0, 'the command ran in the sandbox');

    // Upload a file from the page; it is in the sandbox, listed, and downloads back the same.
    const content = `uploaded from the console ${Date.now()}\n`;
    const cwd = (await page.locator('#files-path').innerText()).trim();
    await page.setInputFiles('#files-upload', { name: 'console-upload.txt', mimeType: 'text/plain', buffer: Buffer.from(content) });
    const listed = page.locator(`#file-rows tr[data-path="${cwd === '/' ? '' : cwd}/console-upload.txt"]`);
    await listed.waitFor({ timeout: 15_000 });
    const read = (await (await agent(`/files/read?path=${encodeURIComponent(`${cwd}/console-upload.txt`)}`)).json()) as { content: string };
    assert.equal(read.content, content);
    const [download] = await Promise.all([page.waitForEvent('download'), listed.getByRole('button', { name: 'Download console-upload.txt' }).click()]);
    assert.equal(download.suggestedFilename(), 'console-upload.txt');
    const { readFile } = await import('node:fs/promises');
    assert.equal(await readFile((await download.path())!, 'utf8'), content);

    // Processes: the sandbox's own, the shell of the terminal among them.
    await page.locator('#process-rows tr', { hasText: 'bash' }).first().waitFor({ timeout: 15_000 });

    // The charts take a sample every 2 s.
    await page.waitForFunction(() => Number(document.querySelector('#chart-memory')?.getAttribute('data-samples')) >= 3, undefined, { timeout: 30_000 });
    await page.waitForFunction(() => Number(document.querySelector('#chart-cpu')?.getAttribute('data-samples')) >= 2, undefined, { timeout: 30_000 });
    assert.ok(Number(await page.locator('#chart-memory').getAttribute('data-last')) > 0, 'memory in use is shown');
    await page.screenshot({ path: join(SCREENSHOTS, 'console-sandbox.png'), fullPage: true });

    // A pause made elsewhere shows as an event; the tools wait for it to run again.
    assert.equal((await api(env.server, 'POST', `/v1/sandboxes/${sb.id}/pause`)).status, 200);
    await page.locator('#events li[data-kind="paused"]').waitFor({ timeout: 15_000 });
    await page.locator('#sandbox-state[data-status="paused"]').waitFor();
    assert.equal(await page.locator('#terminal').count(), 0);
    await page.getByRole('button', { name: `Resume ${sb.id}` }).click();
    await page.locator('#sandbox-state[data-status="running"]').waitFor({ timeout: 30_000 });
    await page
      .locator('#terminal-status', { hasText: /^connected$/ })
      .waitFor({ timeout: 30_000 })
      .catch(async (err: Error) => {
        throw new Error(`${err.message}\nthe terminal says: ${await page.locator('#terminal-status').textContent()}`);
      });

    // A phone screen.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: join(SCREENSHOTS, 'console-sandbox-phone.png'), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });

    // Delete from the page: back to the list, and the sandbox is gone.
    await page.getByRole('button', { name: `Delete ${sb.id}` }).click();
    await page.locator('#sandbox-rows').waitFor({ state: 'attached' });
    await page.waitForFunction(() => location.hash === '#/');
    await row(page, sb.id).waitFor({ state: 'detached' });
    assert.equal((await api(env.server, 'GET', `/v1/sandboxes/${sb.id}`)).status, 404);
    assert.deepEqual(errors, []);
    await context.close();
  });
  test("a sandbox's terminal opens its socket again when it closes without the shell's exit, and when it never opens", async () => {
    const context = await env.browser.newContext({ viewport: { width: 1280, height: 900 } });
    // The first socket is closed as soon as it opens (a connection cut on the way), the second
    // never opens (a handshake that stalls); the third goes through to the sandbox.
    let tries = 0;
    await context.routeWebSocket(/\/terminal\?/, (ws) => {
      tries += 1;
      if (tries === 1) ws.close({ code: 1011, reason: 'cut by the test' });
      else if (tries === 2) return new Promise(() => undefined);
      else ws.connectToServer();
    });
    const page = await context.newPage();
    const sb = await createSandbox(env.server, { template_name: 'base' });
    await page.goto(`${env.server.baseUrl}/console`);
    await page.fill('#api-key', env.server.apiKey);
    await page.click('#sign-in button[type=submit]');
    await row(page, sb.id).getByRole('link', { name: sb.id }).click({ timeout: 30_000 });
    await page.locator('#terminal .xterm-rows', { hasText: '[reconnected: a new shell]' }).waitFor({ timeout: 40_000 });
    await page.locator('#terminal-status', { hasText: /^connected$/ }).waitFor();
    assert.equal(tries, 3);
    await page.locator('#terminal .xterm').click();
    await page.keyboard.type('echo "again=$((40+2))"\n');
    await page.locator('#terminal .xterm-rows', { hasText: 'again=42' }).waitFor({ timeout: 15_000 });
    assert.equal((await api(env.server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    await context.close();
  });
});
