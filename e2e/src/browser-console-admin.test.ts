import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { API_SCOPES } from '@sandboxd/protocol';
import { api, createSandbox, type TestServer } from './harness.js';
import { browserEnv, SCREENSHOTS, watchErrors } from './browser-support.js';

// Issue 14, item 5: the console's templates page (the list, a build started from the page with its
// log followed live to its end) and its keys & organizations page (create an organization and a
// key, the secret shown once, revoke), in a real browser; a key without admin sees no such page.
// Issue 29, item 6: the operator's nodes page and the node a sandbox's page names.

const env = browserEnv();

async function signIn(browser: Browser, server: TestServer, key: string): Promise<{ page: Page; errors: string[]; close: () => Promise<void> }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const errors = watchErrors(page);
  await page.goto(`${server.baseUrl}/console`);
  await page.fill('#api-key', key);
  await page.click('#sign-in button[type=submit]');
  await page.locator('#sign-out').waitFor();
  return { page, errors, close: () => context.close() };
}

const as = (key: string) => ({ ...env.server, apiKey: key });

describe('/console templates and admin in a browser', { timeout: 900_000 }, () => {
  test('templates: the built-in ones, a build from the form followed live to success, then the new template listed', async () => {
    const { page, errors, close } = await signIn(env.browser, env.server, env.server.apiKey);
    await page.click('#nav-templates');
    await page.locator('tr[data-template="base"][data-status="active"]').waitFor();
    assert.equal(await page.locator('tr[data-template="base"] button[data-action="delete"]').count(), 0, 'a built-in template cannot be deleted');

    // A step the form cannot read is refused in the page, before any request.
    const alias = `console-${randomBytes(3).toString('hex')}`;
    await page.fill('#build-name', alias);
    await page.fill('#build-from', 'debian:11');
    await page.fill('#build-steps', 'FROB x');
    await page.click('#build-start');
    await page.locator('.notice.error', { hasText: 'line 1' }).waitFor();

    // A small build: the base image and one run step whose output is new (no cached layer has it).
    const marker = `built-by-the-console-${randomBytes(4).toString('hex')}`;
    await page.fill('#build-steps', `# one step\nRUN echo ${marker} && \\\n  echo "six times seven is $((6*7))"`);
    await page.fill('#build-cpu', '1');
    await page.fill('#build-memory', '512');
    await page.fill('#build-disk', '2');
    await page.click('#build-start');
    await page.locator('#build-panel[data-status]').waitFor({ timeout: 30_000 });
    const buildId = (await page.locator('#build-panel').getAttribute('data-build'))!;
    assert.match(buildId, /^tpl_[0-9a-f]+$/);
    await page.locator('#build-logs', { hasText: `build ${buildId}: template "${alias}"` }).waitFor({ timeout: 60_000 });
    await page.locator('#build-logs', { hasText: 'six times seven is 42' }).waitFor({ timeout: 600_000 });
    await page.locator('#build-panel[data-status="active"]').waitFor({ timeout: 120_000 });
    await page.locator('#build-logs', { hasText: `build ${buildId} succeeded` }).waitFor();
    assert.match(await page.locator('#build-logs').innerText(), new RegExp(marker));
    await page.locator(`tr[data-template="${alias}"][data-status="active"]`).waitFor({ timeout: 30_000 });
    assert.match(await page.locator(`tr[data-template="${alias}"]`).innerText(), /1 vCPU · 512 MB · 2 GB/);

    const st = await api(env.server, 'GET', `/v1/templates/build/${buildId}/status`);
    assert.equal(st.body.status, 'active');
    assert.equal((await api(env.server, 'GET', `/v1/templates/${alias}`)).body.build_id, buildId);
    await page.screenshot({ path: join(SCREENSHOTS, 'console-templates.png'), fullPage: true });

    // A finished build's log opens again from its row; then delete the template from the page.
    await page.reload();
    await page.locator(`tr[data-template="${alias}"]`).getByRole('button', { name: `Build log of ${alias}` }).click();
    await page.locator('#build-logs', { hasText: marker }).waitFor({ timeout: 15_000 });
    page.once('dialog', (d) => void d.accept());
    await page.getByRole('button', { name: `Delete ${alias}` }).click();
    await page.locator(`tr[data-template="${alias}"]`).waitFor({ state: 'detached' });
    assert.equal((await api(env.server, 'GET', `/v1/templates/${alias}`)).status, 404);

    assert.deepEqual(errors, []);
    await close();
  });

  test('admin: create an organization and a key with one scope, its secret once, then revoke it', async () => {
    const { page, errors, close } = await signIn(env.browser, env.server, env.server.apiKey);
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: env.server.baseUrl });
    await page.click('#nav-admin');
    await page.locator('#keys[data-org]').waitFor();
    // The form offers exactly the service's scopes.
    assert.deepEqual(await page.locator('#key-form input[name="scope"]').evaluateAll((els) => els.map((e) => (e as HTMLInputElement).value)), [...API_SCOPES]);

    const org = `console-org-${randomBytes(3).toString('hex')}`;
    await page.fill('#org-name', org);
    await page.click('#create-org');
    await page.locator(`tr[data-org="${org}"].current`).waitFor();
    await page.locator(`#keys[data-org="${org}"]`).waitFor();
    const orgs = await api(env.server, 'GET', '/v1/admin/orgs');
    assert.ok(orgs.body.data.some((o: { name: string }) => o.name === org));

    // A key with sandboxes:read only.
    await page.fill('#key-name', 'read-only');
    for (const s of API_SCOPES) await page.locator(`#key-form input[value="${s}"]`).setChecked(s === 'sandboxes:read');
    await page.click('#create-key');
    const secret = (await page.locator('#key-secret-value').innerText()).trim();
    assert.match(secret, /^sbd_/);
    assert.match(await page.locator('#key-secret').innerText(), /cannot be shown again/);
    const keyId = (await page.locator('#key-secret').getAttribute('data-key'))!;
    await page.locator(`#key-rows tr[data-key="${keyId}"][data-revoked="false"]`).waitFor();
    assert.match(await page.locator(`#key-rows tr[data-key="${keyId}"]`).innerText(), /read-only/);

    // Copy puts it on the clipboard.
    await page.click('#copy-secret');
    await page.locator('.notice', { hasText: 'Copied' }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), secret);
    await page.screenshot({ path: join(SCREENSHOTS, 'console-admin.png'), fullPage: true });

    // The key works, for its organization and its one scope.
    const account = await api(as(secret), 'GET', '/v1/account');
    assert.equal(account.status, 200);
    assert.equal(account.body.organization.name, org);
    assert.deepEqual(account.body.key.scopes, ['sandboxes:read']);
    assert.equal(account.body.operator, false);
    assert.equal((await api(as(secret), 'GET', '/v1/sandboxes')).status, 200);
    assert.equal((await api(as(secret), 'GET', '/v1/templates')).status, 403);
    assert.equal((await api(as(secret), 'POST', '/v1/sandboxes', { template_name: 'base' })).status, 403);

    // Dismissed, the secret is gone from the page; the list still shows the key (never its secret).
    await page.click('#dismiss-secret');
    assert.equal(await page.locator('#key-secret').count(), 0);
    assert.ok(!(await page.content()).includes(secret), 'the secret left the page');

    // Revoke from the page (after a confirm): the API refuses the key at once.
    page.once('dialog', (d) => void d.accept());
    await page.getByRole('button', { name: 'Revoke read-only' }).click();
    await page.locator(`#key-rows tr[data-key="${keyId}"][data-revoked="true"]`).waitFor();
    assert.equal((await api(as(secret), 'GET', '/v1/account')).status, 401);
    const listed = await api(env.server, 'GET', `/v1/admin/keys?org=${org}`);
    assert.ok(listed.body.data.find((k: { id: string }) => k.id === keyId).revoked_at);

    // The signed-in key is marked and cannot revoke itself.
    await page.getByRole('button', { name: 'Keys of default' }).click();
    await page.locator('#keys[data-org="default"]').waitFor();
    const own = page.locator('#key-rows tr', { hasText: '(this key)' });
    await own.waitFor();
    assert.equal(await own.locator('button[data-action="revoke"]').count(), 0);

    assert.deepEqual(errors, []);
    await close();
  });

  test("nodes: the operator's nodes page shows the one machine; a sandbox's page names the node that holds it", async () => {
    const sb = await createSandbox(env.server, { template_name: 'base', timeout_seconds: 600 });
    try {
      const nodes = await api(env.server, 'GET', '/v1/admin/nodes');
      assert.equal(nodes.status, 200);
      assert.equal(nodes.body.mode, 'all-in-one');
      const node = nodes.body.data[0].id as string;
      const { page, errors, close } = await signIn(env.browser, env.server, env.server.apiKey);
      await page.goto(`${env.server.baseUrl}/console#/sandboxes/${sb.id}`);
      await page.locator('#sandbox-state[data-status="running"]').waitFor();
      assert.equal((await page.locator('#sandbox-node').innerText()).trim(), node);

      // The node's link leads to the nodes page: this machine, up, in process, holding the sandbox.
      await page.locator('#sandbox-node a').click();
      const row = page.locator(`#node-rows tr[data-node="${node}"][data-up="true"]`);
      await row.waitFor();
      assert.equal(await page.locator('#nodes-summary').getAttribute('data-mode'), 'all-in-one');
      const cells = await row.locator('td').allInnerTexts();
      assert.equal(cells[1], 'active');
      assert.equal(cells[2], 'in process');
      assert.ok(Number(cells[3]) >= 1, `the sandboxes it holds: ${cells[3]}`);
      assert.equal(cells[9], 'this process');
      assert.ok(await page.locator('#nav-nodes.current').count(), 'the nodes link is the current one');
      await page.screenshot({ path: join(SCREENSHOTS, 'console-nodes.png'), fullPage: true });
      assert.deepEqual(errors, []);
      await close();
    } finally {
      await api(env.server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });

  test('a key without admin has no keys & orgs page, no nodes page, and sees no node on a sandbox', async () => {
    const made = await api(env.server, 'POST', '/v1/admin/keys', { org: 'default', name: 'no-admin' });
    assert.equal(made.status, 201);
    assert.ok(!made.body.scopes.includes('admin'));
    const sb = await createSandbox(env.server, { template_name: 'base', timeout_seconds: 600 });
    try {
      const { page, errors, close } = await signIn(env.browser, env.server, made.body.secret);
      await page.locator('#nav-templates').waitFor();
      assert.equal(await page.locator('#nav-admin').count(), 0);
      assert.equal(await page.locator('#nav-nodes').count(), 0);
      await page.goto(`${env.server.baseUrl}/console#/admin`);
      await page.locator('#page', { hasText: 'No such page' }).waitFor();
      assert.equal(await page.locator('#org-rows').count(), 0);
      await page.goto(`${env.server.baseUrl}/console#/nodes`);
      await page.locator('#page', { hasText: 'No such page' }).waitFor();
      assert.equal(await page.locator('#node-rows').count(), 0);
      // The same organization's sandbox: its page, without the node.
      await page.goto(`${env.server.baseUrl}/console#/sandboxes/${sb.id}`);
      await page.locator('#sandbox-state[data-status="running"]').waitFor();
      assert.equal(await page.locator('#sandbox-node').count(), 0);
      assert.deepEqual(errors, []);
      await close();
    } finally {
      await api(env.server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });
});
