// E2B's snapshot calls (routes/e2b-snapshots.ts) through app.inject, over a real SQLite store, the
// FakeRuntime and the real snapshot service, in the shapes E2B's clients read;
// e2e/src/e2b-clients.test.ts drives them with the real client on a real daemon.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildFakeApp, type FakeApp } from '../testing/fake-app.js';
import { fromSnapshot, isSnapshotId, snapshotInfoOf } from './e2b-shapes.js';

describe('E2B snapshots over the FakeRuntime (inject)', () => {
  let f: FakeApp;
  let a: string;
  let b: string;

  before(async () => {
    f = await buildFakeApp({}, { snapshots: true });
    a = f.orgs.a.key;
    b = f.orgs.b.key;
  });
  after(async () => {
    await f?.close();
  });

  const create = async (key: string, templateID = 'base') => {
    const res = await f.call(key, 'POST', '/e2b/v2/sandboxes', { templateID });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body as { sandboxID: string; templateID: string; alias: string };
  };
  const snapshot = async (key: string, sandboxId: string, body: unknown = {}) => {
    const res = await f.call(key, 'POST', `/e2b/sandboxes/${sandboxId}/snapshots`, body);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body as { snapshotID: string; names: string[] };
  };
  const list = async (key: string, query = '') => {
    const res = await f.app.inject({ method: 'GET', url: `/e2b/snapshots${query}`, headers: { 'x-api-key': key } });
    assert.equal(res.statusCode, 200, res.body);
    return { items: res.json() as Array<{ snapshotID: string; names: string[] }>, next: res.headers['x-next-token'] as string | undefined };
  };

  test('shapes: ids, a create body from a snapshot, what the client reads', () => {
    assert.equal(isSnapshotId('snap_0123456789abcdef01234567'), true);
    for (const id of ['base', 'snap_', 'snap_xyz', 'snap_0123456789abcdef012345678', 'sb0123']) assert.equal(isSnapshotId(id), false, id);
    assert.deepEqual(fromSnapshot({ template_name: 'base', timeout_seconds: 60, internet_access: true }, 'snap_1'), { snapshot_id: 'snap_1', timeout_seconds: 60, internet_access: true });
    assert.deepEqual(snapshotInfoOf({ id: 'snap_1', name: null }), { snapshotID: 'snap_1', names: [] });
    assert.deepEqual(snapshotInfoOf({ id: 'snap_1', name: 'mine' }), { snapshotID: 'snap_1', names: ['mine'] });
  });

  test('create a snapshot, list it (by sandbox, by name), create from it by id and by name, delete it: true then 404', async () => {
    const sb = await create(a);
    const plain = await snapshot(a, sb.sandboxID);
    assert.ok(isSnapshotId(plain.snapshotID), plain.snapshotID);
    assert.deepEqual(plain.names, []);
    const named = await snapshot(a, sb.sandboxID, { name: 'e2b-snap-named' });
    assert.deepEqual(named.names, ['e2b-snap-named']);
    assert.equal((await f.store.snapshots.byId(named.snapshotID))?.sandboxId, sb.sandboxID);

    const bySandbox = await list(a, `?sandboxID=${sb.sandboxID}`);
    assert.deepEqual(bySandbox.items.map((i) => i.snapshotID), [named.snapshotID, plain.snapshotID], 'newest first');
    assert.equal(bySandbox.next, undefined);
    assert.deepEqual((await list(a, '?name=e2b-snap-named')).items, [named]);
    assert.deepEqual((await list(a, `?name=${plain.snapshotID}`)).items, [plain], 'a name filter matches an id too');
    assert.deepEqual((await list(b, `?sandboxID=${sb.sandboxID}`)).items, [], "another organization sees none of them");
    // Pages through x-next-token.
    const first = await list(a, `?sandboxID=${sb.sandboxID}&limit=1`);
    assert.deepEqual(first.items, [named]);
    assert.ok(first.next);
    const second = await list(a, `?sandboxID=${sb.sandboxID}&limit=1&nextToken=${encodeURIComponent(first.next)}`);
    assert.deepEqual(second.items, [plain]);
    assert.equal(second.next, undefined);

    for (const ref of [plain.snapshotID, 'e2b-snap-named']) {
      const made = await create(a, ref);
      const row = await f.store.sandboxes.byId(made.sandboxID);
      const want = ref === plain.snapshotID ? plain.snapshotID : named.snapshotID;
      assert.equal(row?.snapshotId, want, `${ref}: created from the snapshot`);
      assert.equal(made.alias, 'base', "the snapshot's template");
      assert.deepEqual(row?.layers, (await f.store.snapshots.byId(want))?.layers);
    }

    assert.equal((await f.call(b, 'DELETE', `/e2b/templates/${plain.snapshotID}`)).status, 404, "another organization's: 404");
    assert.equal((await f.call(a, 'DELETE', `/e2b/templates/${plain.snapshotID}`)).status, 204);
    const again = await f.call(a, 'DELETE', `/e2b/templates/${plain.snapshotID}`);
    assert.deepEqual([again.status, again.body.code], [404, 404], 'the client reads 404 as false');
    const gone = await f.call(a, 'POST', '/e2b/v2/sandboxes', { templateID: plain.snapshotID });
    assert.deepEqual([gone.status, gone.body.code], [404, 404]);
    assert.deepEqual((await list(a, `?sandboxID=${sb.sandboxID}`)).items, [named]);
  });

  test("another organization's or an unknown sandbox or snapshot is a 404 in E2B's shape; templates are not deleted here", async () => {
    const sb = await create(a);
    const snap = await snapshot(a, sb.sandboxID);
    for (const [key, id] of [
      [b, sb.sandboxID],
      [a, 'sb00000000000000000000'],
    ] as const) {
      const res = await f.call(key, 'POST', `/e2b/sandboxes/${id}/snapshots`, {});
      assert.deepEqual([res.status, res.body.code, typeof res.body.message], [404, 404, 'string'], id);
    }
    const stranger = await f.call(b, 'POST', '/e2b/v2/sandboxes', { templateID: snap.snapshotID });
    assert.deepEqual([stranger.status, stranger.body.code], [404, 404], "another organization's snapshot is not there to create from");
    assert.doesNotMatch(stranger.body.message, /another organization/);
    assert.equal((await f.call(b, 'POST', '/e2b/v2/sandboxes', { templateID: 'no-such-name' })).status, 404);
    const unknown = await f.call(a, 'DELETE', '/e2b/templates/snap_000000000000000000000000');
    assert.deepEqual([unknown.status, unknown.body.code], [404, 404]);
    const template = await f.call(a, 'DELETE', '/e2b/templates/base');
    assert.deepEqual([template.status, template.body.code], [404, 404]);
    assert.ok(await f.store.templates.byName('base', f.orgs.a.id), 'a template is not deleted through this path');
    assert.ok(await f.store.snapshots.byId(snap.snapshotID), 'nor the snapshot by another organization');
  });

  test('bad input is a 400 as {code, message}; scopes: read lists, write takes and deletes', async () => {
    const sb = await create(a);
    for (const [payload, why] of [
      ['{"name":', 'not JSON'],
      ['{"name":""}', 'empty name'],
      ['{"name":"a\\u0001b"}', 'control character'],
      [JSON.stringify({ name: 'x'.repeat(129) }), 'too long'],
      ['{"name":7}', 'not a string'],
    ]) {
      const res = await f.app.inject({ method: 'POST', url: `/e2b/sandboxes/${sb.sandboxID}/snapshots`, headers: { 'x-api-key': a, 'content-type': 'application/json' }, payload });
      assert.equal(res.statusCode, 400, `${why}: ${res.body}`);
      assert.equal(res.json().code, 400, why);
    }
    for (const q of ['?limit=0', '?limit=x', '?nextToken=garbage', `?name=${'n'.repeat(201)}`]) {
      const res = await f.call(a, 'GET', `/e2b/snapshots${q}`);
      assert.deepEqual([res.status, res.body.code], [400, 400], q);
    }

    const reader = (await f.services.keys.createKey(f.orgs.a.id, { scopes: ['sandboxes:read'] })).secret;
    assert.equal((await f.call(reader, 'GET', `/e2b/snapshots?sandboxID=${sb.sandboxID}`)).status, 200);
    const take = await f.call(reader, 'POST', `/e2b/sandboxes/${sb.sandboxID}/snapshots`, {});
    assert.deepEqual([take.status, take.body.code], [403, 403]);
    const snap = await snapshot(a, sb.sandboxID);
    assert.equal((await f.call(reader, 'DELETE', `/e2b/templates/${snap.snapshotID}`)).status, 403);
    const writer = (await f.services.keys.createKey(f.orgs.a.id, { scopes: ['templates:read'] })).secret;
    assert.equal((await f.call(writer, 'GET', '/e2b/snapshots')).status, 403, 'listing needs sandboxes:read');
    assert.ok(await f.store.snapshots.byId(snap.snapshotID));
  });
});
