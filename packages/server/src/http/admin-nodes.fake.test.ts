// Which node holds what, as the operator's keys see it over the API (issue 29, item 6): the admin
// nodes list, and the `node` of each sandbox, never shown to a tenant's key.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { AdminNodeList } from '@sandboxd/protocol';
import { buildFakeApp, type FakeApp } from '../testing/fake-app.js';
import { validator } from '../testing/openapi-check.js';

describe("the operator's view of the nodes (inject)", () => {
  let f: FakeApp;
  let operator: string;
  let operatorNoAdmin: string;
  const check = validator({ closed: true });

  before(async () => {
    f = await buildFakeApp();
    const org = await f.services.keys.ensureOrg('default');
    operator = (await f.services.keys.createKey(org.id, { name: 'ops', scopes: ['admin'] })).secret;
    operatorNoAdmin = (await f.services.keys.createKey(org.id, { name: 'ops-ro', scopes: ['sandboxes:read', 'sandboxes:write', 'templates:read'] })).secret;
  });

  after(async () => {
    await f?.close();
  });

  test("a sandbox's node is in the operator's answers, and in no tenant's", async () => {
    const mine = await f.call(operator, 'POST', '/v1/sandboxes', { template_name: 'base' });
    assert.equal(mine.status, 201, JSON.stringify(mine.body));
    const theirs = await f.call(f.orgs.a.key, 'POST', '/v1/sandboxes', { template_name: 'base' });
    assert.equal(theirs.status, 201);
    const node = f.node.id;

    assert.equal((await f.call(operator, 'GET', `/v1/sandboxes/${mine.body.id}`)).body.node, node);
    assert.deepEqual((await f.call(operator, 'GET', '/v1/sandboxes')).body.data.map((s: { node?: string }) => s.node), [node]);
    for (const [key, id] of [
      [f.orgs.a.key, theirs.body.id],
      [operatorNoAdmin, mine.body.id],
    ]) {
      const got = await f.call(key, 'GET', `/v1/sandboxes/${id}`);
      assert.equal(got.status, 200);
      assert.equal('node' in got.body, false, 'a key that is not the operator\'s admin sees no node');
      assert.ok((await f.call(key, 'GET', '/v1/sandboxes')).body.data.every((s: object) => !('node' in s)));
    }
  });

  test('GET /v1/admin/nodes: the registry\'s nodes for the operator, 403 for any other key', async () => {
    await f.store.nodes.register({ id: 'node-x', url: 'http://10.0.0.9:7070', capacity: { vcpu: 4, memoryMb: 4096, diskGb: 50, maxSandboxes: 20 } }, 60_000);
    const res = await f.call(operator, 'GET', '/v1/admin/nodes');
    assert.equal(res.status, 200, JSON.stringify(res.body));
    check(JSON.parse(JSON.stringify(AdminNodeList)), res.body, 'GET /v1/admin/nodes');
    assert.equal(res.body.mode, 'cluster');
    assert.deepEqual(res.body.data.map((n: { id: string; up: boolean; url: string }) => [n.id, n.up, n.url]), [['node-x', true, 'http://10.0.0.9:7070']]);
    for (const key of [f.orgs.a.key, operatorNoAdmin]) assert.equal((await f.call(key, 'GET', '/v1/admin/nodes')).status, 403);
    assert.equal((await f.call('sbd_nope', 'GET', '/v1/admin/nodes')).status, 401);
  });
});
