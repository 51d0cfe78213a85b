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

const row = (page: Page, id: string) => page.locator(`tr[data-id="${id}"]`);

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

    await page.fill('#api-key', env.server.apiKey);
    await page.click('#sign-in button[type=submit]');
    await page.locator('#live.on').waitFor({ timeout: 30_000 });

    // A sandbox made elsewhere (the API) appears without a reload.
    const other = await createSandbox(env.server, { template_name: 'base' });
    await row(page, other.id).waitFor({ timeout: 30_000 });

    // One made from the page.
    await page.selectOption('#template', 'base');
    await page.click('#create');
    await page.locator('.notice', { hasText: 'Created' }).waitFor({ timeout: 60_000 });
    const made = (await page.locator('.notice').innerText()).match(/Created (\S+)\./)![1]!;
    await row(page, made).waitFor();
    assert.equal(await row(page, made).getAttribute('data-status'), 'running');

    // Pause from the page; a pause made through the API shows too.
    await row(page, made).getByRole('button', { name: `Pause ${made}` }).click();
    await page.locator(`tr[data-id="${made}"][data-status="paused"]`).waitFor();
    assert.equal((await api(env.server, 'GET', `/v1/sandboxes/${made}`)).body.status, 'paused');
    assert.equal((await api(env.server, 'POST', `/v1/sandboxes/${other.id}/pause`)).status, 200);
    await page.locator(`tr[data-id="${other.id}"][data-status="paused"]`).waitFor();
    await row(page, made).getByRole('button', { name: `Resume ${made}` }).click();
    await page.locator(`tr[data-id="${made}"][data-status="running"]`).waitFor();

    // Filter.
    await page.fill('#filter', made.slice(-6));
    assert.deepEqual(await page.locator('#sandbox-rows tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-id'))), [made]);
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
});
