// The lifecycle API through app.inject, over a real SQLite store and the FakeRuntime: no root, no
// container, under a few seconds. What containers themselves do is runtime/conformance.test.ts.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { Sandbox } from '@sandboxd/protocol';
import { agentGet } from '../node/agent-client.js';
import { buildFakeApp, type FakeApp } from '../testing/fake-app.js';
import { validator } from '../testing/openapi-check.js';
import { publicOrgId } from '../services/org-ids.js';

describe('the lifecycle API over the FakeRuntime (inject)', () => {
  let f: FakeApp;
  let a: string;
  let b: string;
  const check = validator();

  before(async () => {
    f = await buildFakeApp();
    a = f.orgs.a.key;
    b = f.orgs.b.key;
  });

  after(async () => {
    await f?.close();
  });

  const create = async (key: string, body: Record<string, unknown> = {}) => {
    const res = await f.call(key, 'POST', '/v1/sandboxes', { template_name: 'base', ...body });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body as { id: string; [k: string]: unknown };
  };

  test('create: 201, a sandbox in the documented shape, running in the runtime, its env_vars given to its agent', async () => {
    const res = await f.call(a, 'POST', '/v1/sandboxes', { template_name: 'base', env_vars: { GREETING: 'hello' }, timeout_seconds: 600 });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const sb = res.body;
    check(Sandbox, sb, 'POST /v1/sandboxes');
    assert.match(sb.id, /^sb[a-z0-9]{20}$/);
    assert.equal(sb.status, 'running');
    assert.equal(sb.template_name, 'base');
    assert.equal(sb.organization_id, publicOrgId(f.orgs.a.id));
    assert.equal(sb.public_host, `http://${sb.id}.sandbox.test:8081`);
    assert.equal(sb.timeout_seconds, 600);
    assert.equal(typeof sb.auth_token, 'string');
    assert.equal(typeof sb.request_id, 'string');
    assert.equal(await f.runtime.status(sb.id), 'running');
    const env = await agentGet(f.runtime.agentSocket(sb.id), '/env', 2000);
    assert.deepEqual((env.body as { env_vars: unknown }).env_vars, { GREETING: 'hello' });
    assert.equal((await f.store.sandboxes.byId(sb.id))?.status, 'running');
  });

  test('get and list: the organization sees its own sandboxes, and only those', async () => {
    const mine = await create(a);
    const theirs = await create(b);
    const got = await f.call(a, 'GET', `/v1/sandboxes/${mine.id}`);
    assert.equal(got.status, 200);
    assert.equal(got.body.id, mine.id);
    assert.equal(got.body.status, 'running');
    const list = await f.call(a, 'GET', '/v1/sandboxes');
    assert.equal(list.status, 200);
    const ids = (list.body.data as Array<{ id: string }>).map((s) => s.id);
    assert.ok(ids.includes(mine.id));
    assert.ok(!ids.includes(theirs.id), "another organization's sandbox is not listed");
  });

  test('pause, resume, stop, start: the API and the runtime agree at each step', async () => {
    const { id } = await create(a);
    for (const [action, status] of [
      ['pause', 'paused'],
      ['resume', 'running'],
      ['stop', 'stopped'],
      ['start', 'running'],
    ] as const) {
      const res = await f.call(a, 'POST', `/v1/sandboxes/${id}/${action}`);
      assert.equal(res.status, 200, `${action}: ${JSON.stringify(res.body)}`);
      assert.deepEqual([res.body.id, res.body.status], [id, status]);
      assert.equal((await f.call(a, 'GET', `/v1/sandboxes/${id}`)).body.status, status);
      assert.equal(await f.runtime.status(id), status, `runtime after ${action}`);
    }
    const again = await f.call(a, 'POST', `/v1/sandboxes/${id}/resume`);
    assert.deepEqual([again.status, again.body.code], [409, 'INVALID_STATE'], 'resume of a running sandbox');
  });

  test('delete: 200, then 404; the runtime lets go of it', async () => {
    const { id } = await create(a);
    await f.call(a, 'POST', `/v1/sandboxes/${id}/pause`);
    const del = await f.call(a, 'DELETE', `/v1/sandboxes/${id}`);
    assert.equal(del.status, 200);
    assert.deepEqual([del.body.id, del.body.status], [id, 'deleted']);
    const gone = await f.call(a, 'GET', `/v1/sandboxes/${id}`);
    assert.deepEqual([gone.status, gone.body.code], [404, 'NOT_FOUND']);
    // The teardown runs after the answer.
    await f.services.sandboxes.settle();
    assert.equal(await f.runtime.status(id), 'missing');
    assert.ok(!existsSync(f.runtime.agentSocket(id)));
  });

  test("an unknown id is 404; another organization's sandbox is 403 for every verb, and left as it was", async () => {
    const unknown = await f.call(a, 'GET', '/v1/sandboxes/sbnosuchsandbox00000000');
    assert.deepEqual([unknown.status, unknown.body.code], [404, 'NOT_FOUND']);
    const { id } = await create(b);
    for (const [method, url] of [
      ['GET', `/v1/sandboxes/${id}`],
      ['POST', `/v1/sandboxes/${id}/pause`],
      ['POST', `/v1/sandboxes/${id}/stop`],
      ['DELETE', `/v1/sandboxes/${id}`],
    ] as const) {
      const res = await f.call(a, method, url);
      assert.deepEqual([res.status, res.body.code], [403, 'PERMISSION_DENIED'], `${method} ${url}`);
    }
    assert.equal(await f.runtime.status(id), 'running');
    assert.equal((await f.call(b, 'GET', `/v1/sandboxes/${id}`)).body.status, 'running');
  });

  test('bad requests: a body that is not JSON, a field of the wrong type, no key', async () => {
    const notJson = await f.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: { 'x-api-key': a, 'content-type': 'application/json' }, payload: '{"template_name": ' });
    assert.deepEqual([notJson.statusCode, notJson.json().code], [400, 'VALIDATION_ERROR']);
    const wrongType = await f.call(a, 'POST', '/v1/sandboxes', { template_name: 'base', timeout_seconds: 'soon' });
    assert.deepEqual([wrongType.status, wrongType.body.code], [400, 'VALIDATION_ERROR']);
    const anonymous = await f.app.inject({ method: 'GET', url: '/v1/sandboxes' });
    assert.equal(anonymous.statusCode, 401);
  });

  test("a create whose runtime fails: a clean 503 RUNTIME_ERROR, no row left, nothing in the runtime", async () => {
    const before = await f.runtime.list();
    const heal = f.runtime.failOn('create', new Error('disk exploded at /var/lib/secret/path'));
    let res;
    try {
      res = await f.call(a, 'POST', '/v1/sandboxes', { template_name: 'base' });
    } finally {
      heal();
    }
    assert.equal(res.status, 503, JSON.stringify(res.body));
    assert.equal(res.body.code, 'RUNTIME_ERROR');
    assert.ok(!JSON.stringify(res.body).includes('/var/lib/secret'), "the runtime's words stay in the log");
    assert.deepEqual(await f.runtime.list(), before, 'nothing left in the runtime');
    const live = await f.store.sandboxes.live();
    assert.ok(!live.some((r) => r.status === 'creating'), 'no placeholder row');
    const listed = await f.call(a, 'GET', '/v1/sandboxes');
    assert.deepEqual(
      (listed.body.data as Array<{ id: string }>).map((s) => s.id).sort(),
      live.filter((r) => r.orgId === f.orgs.a.id).map((r) => r.id).sort(),
      'the API lists exactly the live rows',
    );
    // The service works again once the runtime does.
    await create(a);
  });

  test("a create with an egress policy: the runtime's sandbox gets it before it is handed out", async () => {
    const sb = await create(a, { internet_access: true, deny_out: ['203.0.113.0/24'] });
    assert.deepEqual(f.runtime.egressOf(sb.id), { internet: true, allow: [], deny: ['203.0.113.0/24'] });
    const off = await create(a, { internet_access: false });
    assert.equal(f.runtime.egressOf(off.id), undefined);
    const refused = await f.call(a, 'PUT', `/v1/sandboxes/${off.id}/network`, { internet_access: true });
    assert.deepEqual([refused.status, refused.body.code], [409, 'INVALID_STATE']);
  });
});
