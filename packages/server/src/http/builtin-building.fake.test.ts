// A built-in template building behind the serving daemon (issue 27): what the API shows of it and
// what a create of it answers, over a real SQLite store and the FakeRuntime.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Template } from '@sandboxd/protocol';
import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { notReady } from '../services/templates.js';
import { buildFakeApp, type FakeApp } from '../testing/fake-app.js';
import { validator } from '../testing/openapi-check.js';

describe('a built-in template still building', () => {
  let f: FakeApp;
  let a: string;
  const check = validator();
  const go = BUILTIN_TEMPLATES.find((t) => t.name === 'go')!;

  before(async () => {
    f = await buildFakeApp();
    a = f.orgs.a.key;
  });
  after(async () => {
    await f?.close();
  });

  test('is listed and shown as building with its percent, not active', async () => {
    await f.services.templates.builtinProgress(go, 42, 30);
    const list = await f.call(a, 'GET', '/v1/templates');
    assert.equal(list.status, 200);
    const item = (list.body.data as Array<Record<string, unknown>>).find((t) => t.name === 'go')!;
    assert.equal(item.status, 'building');
    assert.equal(item.is_active, false);
    assert.equal(item.progress, 42);
    const one = await f.call(a, 'GET', '/v1/templates/go');
    assert.equal(one.status, 200);
    check(Template, one.body, 'GET /v1/templates/{name}');
    assert.equal(one.body.progress, 42);
    // An active template has no percent.
    const base = await f.call(a, 'GET', '/v1/templates/base');
    assert.equal(base.body.progress, null);
    assert.equal(base.body.is_active, true);
  });

  test('a create of it answers 503 TEMPLATE_BUILDING with retry_after and Retry-After, then succeeds once ready', async () => {
    await f.services.templates.builtinProgress(go, 50, 20);
    const res = await f.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: { 'x-api-key': a }, payload: { template_name: 'go' } });
    assert.equal(res.statusCode, 503, res.body);
    const body = res.json();
    assert.equal(body.code, 'TEMPLATE_BUILDING');
    assert.match(body.message, /template "go" is still being built \(50 % done/);
    assert.ok(body.retry_after >= 5 && body.retry_after <= 25, String(body.retry_after));
    assert.equal(res.headers['retry-after'], String(body.retry_after));
    assert.equal(body.progress, 50);
    // Ready: the same create is served.
    await f.services.templates.registerBuiltin(go, [{ id: 'fake-base-layer', path: '/nonexistent' }]);
    const ok = await f.call(a, 'POST', '/v1/sandboxes', { template_name: 'go' });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    await f.call(a, 'DELETE', `/v1/sandboxes/${ok.body.id}`);
  });

  test('a lower percent does not overwrite a fresher, higher one (another replica is ahead)', async () => {
    await f.services.templates.builtinProgress(go, 70, 10);
    await f.services.templates.builtinProgress(go, 0, 100);
    assert.equal((await f.call(a, 'GET', '/v1/templates/go')).body.progress, 70);
  });

  test('a failed build shows failed with its error; a create of it is a 409 naming the error', async () => {
    await f.services.templates.builtinFailed(go, new Error('installing golang-go git failed: exit status 100'));
    const one = await f.call(a, 'GET', '/v1/templates/go');
    assert.equal(one.body.status, 'failed');
    assert.equal(one.body.progress, null);
    assert.match(one.body.error_message, /exit status 100/);
    const res = await f.call(a, 'POST', '/v1/sandboxes', { template_name: 'go' });
    assert.equal(res.status, 409);
    assert.equal(res.body.code, 'TEMPLATE_NOT_READY');
    assert.match(res.body.message, /exit status 100/);
  });

  test('the estimate is bounded: 5 s at least, 10 minutes at most, 30 s when none is known', () => {
    const row = { name: 'x', orgId: null, status: 'building', buildProgress: 1, errorMessage: null } as const;
    const at = (eta: string | null) => notReady({ ...row, buildEtaAt: eta } as never, 0).extra.retry_after;
    assert.equal(at(new Date(1000).toISOString()), 5);
    assert.equal(at(new Date(3600_000).toISOString()), 600);
    assert.equal(at(null), 30);
  });
});
