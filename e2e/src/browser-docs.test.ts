import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { browserEnv, SCREENSHOTS, watchErrors } from './browser-support.js';

// Issue 14, items 6 and 7: the API reference at /docs, in a real browser (Debian's Chromium,
// headless, driven by playwright-core): it renders every group from the bundled assets under its
// CSP, with no console error, and "try it out" calls the running service with the signed-in key.

const env = browserEnv();

describe('/docs in a browser', { timeout: 180_000 }, () => {
  test('renders every group from its own assets, with no console error; "try it out" calls the service with the signed-in key', async () => {
    const context = await env.browser.newContext({ viewport: { width: 1280, height: 900 } });
    // The console signs in by keeping the key in this tab's session storage.
    await context.addInitScript((key: string) => window.sessionStorage.setItem('sandboxd.apiKey', key), env.server.apiKey);
    const page = await context.newPage();
    const errors = watchErrors(page);
    const origins = new Set<string>();
    page.on('request', (r) => origins.add(new URL(r.url()).origin));

    const res = await page.goto(`${env.server.baseUrl}/docs`, { waitUntil: 'networkidle' });
    assert.equal(res?.status(), 200);
    await page.locator('.opblock-tag-section').first().waitFor({ timeout: 30_000 });
    const groups = await page.locator('.opblock-tag').allInnerTexts();
    for (const g of ['sandboxes', 'templates', 'builds', 'admin', 'code', 'commands', 'files', 'env', 'processes', 'streams']) {
      assert.ok(groups.some((t) => t.trim().startsWith(g)), `group ${g} in ${JSON.stringify(groups)}`);
    }
    await page.screenshot({ path: join(SCREENSHOTS, 'docs.png'), fullPage: false });

    // One call: GET /v1/account/limits, authorized by the key from session storage.
    const op = page.locator('#operations-account-getV1AccountLimits');
    await op.locator('.opblock-summary').click();
    await op.getByRole('button', { name: 'Try it out' }).click();
    const answered = page.waitForResponse((r) => r.url() === `${env.server.baseUrl}/v1/account/limits`);
    await op.getByRole('button', { name: 'Execute' }).click();
    const call = await answered;
    assert.equal(call.status(), 200, 'the key from session storage was sent');
    assert.equal(call.request().headers()['x-api-key'], env.server.apiKey);
    await op.locator('.live-responses-table tbody .response-col_status').first().waitFor();
    assert.match(await op.locator('.live-responses-table tbody .response-col_status').first().innerText(), /200/);
    assert.match(await op.locator('.live-responses-table tbody .response-col_description').first().innerText(), /organization_id/);
    // The answer only: the curl line above it shows the key.
    await op.locator('.live-responses-table').screenshot({ path: join(SCREENSHOTS, 'docs-try-it.png') });

    assert.deepEqual([...origins], [env.server.baseUrl], 'the page loads nothing from another origin');
    assert.deepEqual(errors, []);
    await context.close();
  });
});
