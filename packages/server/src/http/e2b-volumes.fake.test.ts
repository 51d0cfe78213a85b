// E2B's volume calls (routes/e2b-volumes.ts) and `volumeMounts` on create, through app.inject, over
// a real SQLite store, the real volume service (its images a map: mounting needs root) and the
// FakeRuntime, in the shapes E2B's clients read; e2e/src/e2b-clients.test.ts drives them with the
// real client on a real daemon, where a volume's files are shared between sandboxes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { buildFakeApp, type FakeApp } from '../testing/fake-app.js';
import { createBodyOf, E2B_VOLUME_SIZE_GB, listedOf, volumeAndTokenOf, volumeInfoOf } from './e2b-shapes.js';

describe('E2B volumes over the FakeRuntime (inject)', () => {
  let f: FakeApp;
  let a: string;
  let b: string;

  before(async () => {
    f = await buildFakeApp({}, { volumes: true });
    a = f.orgs.a.key;
    b = f.orgs.b.key;
  });
  after(async () => {
    await f?.close();
  });

  const made = async (key: string, name: string) => {
    const res = await f.call(key, 'POST', '/e2b/volumes', { name });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body as { volumeID: string; name: string; token: string };
  };
  const sandbox = async (key: string, volumeMounts: unknown) => f.call(key, 'POST', '/e2b/v2/sandboxes', { templateID: 'base', volumeMounts });

  test('shapes: a create body with volumeMounts, what the client reads', () => {
    const body = createBodyOf({ templateID: 'base', volumeMounts: [{ name: 'data', path: '/data' }] });
    assert.deepEqual(body.volumes, [{ name: 'data', path: '/data' }]);
    assert.equal(createBodyOf({ templateID: 'base', volumeMounts: [] }).volumes, undefined);
    assert.equal(createBodyOf({ templateID: 'base', volumeMounts: null }).volumes, undefined);
    assert.deepEqual(volumeInfoOf({ id: 'vol-1', name: 'n' }), { volumeID: 'vol-1', name: 'n' });
    assert.deepEqual(volumeAndTokenOf({ id: 'vol-1', name: 'n' }), { volumeID: 'vol-1', name: 'n', token: '' });
  });

  test('create, list, get (by id and by name), delete: 204 then 404; our size, our ids', async () => {
    const v = await made(a, 'e2b-data');
    assert.match(v.volumeID, /^vol-[a-z0-9]{20}$/);
    assert.deepEqual(v, { volumeID: v.volumeID, name: 'e2b-data', token: '' }, 'no domain: the client keeps its own');
    const ours = await f.call(a, 'GET', `/v1/volumes/${v.volumeID}`);
    assert.deepEqual([ours.status, ours.body.name, ours.body.size_gb], [200, 'e2b-data', E2B_VOLUME_SIZE_GB]);

    const again = await f.call(a, 'POST', '/e2b/volumes', { name: 'e2b-data' });
    assert.deepEqual([again.status, again.body.code], [409, 409]);
    assert.equal(typeof again.body.message, 'string');

    const listed = await f.call(a, 'GET', '/e2b/volumes');
    assert.equal(listed.status, 200);
    assert.deepEqual(listed.body, [{ volumeID: v.volumeID, name: 'e2b-data' }]);
    for (const ref of [v.volumeID, 'e2b-data']) {
      const got = await f.call(a, 'GET', `/e2b/volumes/${ref}`);
      assert.equal(got.status, 200, ref);
      assert.deepEqual(got.body, v, ref);
    }

    const del = await f.call(a, 'DELETE', `/e2b/volumes/${v.volumeID}`);
    assert.equal(del.status, 204, JSON.stringify(del.body));
    for (const [method, url] of [['DELETE', `/e2b/volumes/${v.volumeID}`], ['GET', `/e2b/volumes/${v.volumeID}`]] as const) {
      const gone = await f.call(a, method, url);
      assert.deepEqual([gone.status, gone.body.code], [404, 404], `${method} after delete`);
    }
    assert.deepEqual((await f.call(a, 'GET', '/e2b/volumes')).body, []);
  });

  test('another organization: its list has none of ours, get and delete of ours are a 404, and it cannot mount ours', async () => {
    const v = await made(a, 'private');
    assert.deepEqual((await f.call(b, 'GET', '/e2b/volumes')).body, []);
    for (const method of ['GET', 'DELETE'] as const) {
      const res = await f.call(b, method, `/e2b/volumes/${v.volumeID}`);
      assert.deepEqual([res.status, res.body.code], [404, 404], method);
      assert.doesNotMatch(res.body.message, /org-a/);
    }
    const mount = await sandbox(b, [{ name: v.volumeID, path: '/data' }]);
    assert.deepEqual([mount.status, mount.body.code], [404, 404], JSON.stringify(mount.body));
    // Names are per organization: theirs of the same name is theirs.
    const theirs = await made(b, 'private');
    assert.notEqual(theirs.volumeID, v.volumeID);
    assert.equal((await f.call(a, 'GET', '/e2b/volumes/private')).body.volumeID, v.volumeID);
    assert.equal((await f.call(a, 'DELETE', `/e2b/volumes/${v.volumeID}`)).status, 204);
    assert.equal((await f.call(b, 'DELETE', `/e2b/volumes/${theirs.volumeID}`)).status, 204);
  });

  test('volumeMounts: by name (what the client sends) or id; the sandbox lists them; delete refused while mounted', async () => {
    const v = await made(a, 'shared');
    const one = await sandbox(a, [{ name: 'shared', path: '/mnt/shared' }]);
    assert.equal(one.status, 201, JSON.stringify(one.body));
    const two = await sandbox(a, [{ name: v.volumeID, path: '/data' }]);
    assert.equal(two.status, 201, JSON.stringify(two.body));
    const info = await f.call(a, 'GET', `/e2b/sandboxes/${one.body.sandboxID}`);
    assert.deepEqual(info.body.volumeMounts, [{ name: 'shared', path: '/mnt/shared' }]);
    const ours = await f.call(a, 'GET', `/v1/sandboxes/${two.body.sandboxID}`);
    assert.deepEqual(ours.body.volumes, [{ volume_id: v.volumeID, name: 'shared', path: '/data', read_only: false }]);
    const listed = (await f.call(a, 'GET', '/e2b/v2/sandboxes')).body as ReturnType<typeof listedOf>[];
    assert.deepEqual(listed.find((s) => s.sandboxID === two.body.sandboxID)?.volumeMounts, [{ name: 'shared', path: '/data' }]);

    const busy = await f.call(a, 'DELETE', `/e2b/volumes/${v.volumeID}`);
    assert.deepEqual([busy.status, busy.body.code], [409, 409]);
    assert.match(busy.body.message, /mounted by 2 sandbox/);
    for (const sb of [one, two]) assert.equal((await f.call(a, 'DELETE', `/e2b/sandboxes/${sb.body.sandboxID}`)).status, 204);
    assert.equal((await f.call(a, 'DELETE', `/e2b/volumes/${v.volumeID}`)).status, 204);
  });

  test('bad bodies are a 400, unknown volumes a 404, all as {code, message}', async () => {
    for (const body of [{}, { name: '' }, { name: 'Bad Name' }, { name: 'x'.repeat(64) }, { name: 7 }]) {
      const res = await f.call(a, 'POST', '/e2b/volumes', body);
      assert.deepEqual([res.status, res.body.code], [400, 400], JSON.stringify(body));
      assert.equal(typeof res.body.message, 'string');
    }
    const notJson = await f.app.inject({ method: 'POST', url: '/e2b/volumes', headers: { 'x-api-key': a, 'content-type': 'application/json' }, payload: '{"name":' });
    assert.equal(notJson.statusCode, 400);
    for (const ref of ['vol-00000000000000000000', 'no-such-volume', 'Not_A_Name!']) {
      const res = await f.call(a, 'GET', `/e2b/volumes/${encodeURIComponent(ref)}`);
      assert.deepEqual([res.status, res.body.code], [404, 404], ref);
    }
    const v = await made(a, 'paths');
    for (const [mounts, status] of [
      [[{ name: 'no-such-volume', path: '/data' }], 404],
      [[{ name: 'paths', path: '/proc/x' }], 400],
      [[{ name: 'paths', path: 'relative' }], 400],
      [[{ name: 'paths', path: '/a' }, { name: 'paths', path: '/a/b' }], 400],
      [[{ name: 'paths' }], 400],
    ] as const) {
      const res = await sandbox(a, mounts);
      assert.deepEqual([res.status, res.body.code], [status, status], JSON.stringify(mounts));
    }
    assert.deepEqual((await f.call(a, 'GET', `/e2b/volumes/${v.volumeID}`)).status, 200);
    assert.equal((await f.call(a, 'DELETE', `/e2b/volumes/${v.volumeID}`)).status, 204, 'no sandbox was left mounting it');
  });

  test('scopes as /v1: reading needs sandboxes:read, creating and deleting sandboxes:write', async () => {
    const v = await made(a, 'scoped');
    const reader = (await f.services.keys.createKey(f.orgs.a.id, { scopes: ['sandboxes:read'] })).secret;
    assert.equal((await f.call(reader, 'GET', '/e2b/volumes')).status, 200);
    assert.equal((await f.call(reader, 'GET', `/e2b/volumes/${v.volumeID}`)).status, 200);
    for (const [method, url, body] of [['POST', '/e2b/volumes', { name: 'nope' }], ['DELETE', `/e2b/volumes/${v.volumeID}`, undefined]] as const) {
      const res = await f.call(reader, method, url, body);
      assert.deepEqual([res.status, res.body.code], [403, 403], method);
    }
    const other = (await f.services.keys.createKey(f.orgs.a.id, { scopes: ['templates:read'] })).secret;
    assert.equal((await f.call(other, 'GET', '/e2b/volumes')).status, 403);
    assert.equal((await f.call('e2b_0123456789abcdef0123456789abcdef01234567', 'GET', '/e2b/volumes')).body.code, 401);
    assert.equal((await f.call(a, 'DELETE', `/e2b/volumes/${v.volumeID}`)).status, 204);
  });

  test("the volume content API is not served: a 405 saying so, not a 404 (which the client reads as no such file)", async () => {
    for (const [method, url] of [['GET', '/e2b/volumecontent/vol-x/dir?path=/'], ['PUT', '/e2b/volumecontent/vol-x/file?path=/a'], ['DELETE', '/e2b/volumecontent/vol-x/path?path=/a']] as const) {
      const res = await f.app.inject({ method, url });
      assert.equal(res.statusCode, 405, `${method} ${url}`);
      assert.equal(res.json().code, 405);
      assert.match(res.json().message, /not served/);
    }
  });

  test("a cluster (no volume host): what /v1 answers there (409 naming docs/cluster.md), in E2B's shape", async () => {
    const g = await buildFakeApp({}, { volumes: 'cluster' });
    try {
      const key = g.orgs.a.key;
      const v1 = await g.call(key, 'POST', '/v1/volumes', { name: 'x', size_gb: 1 });
      const e2b = await g.call(key, 'POST', '/e2b/volumes', { name: 'x' });
      assert.deepEqual([e2b.status, e2b.body.code], [v1.status, 409]);
      assert.match(e2b.body.message, /cluster\.md/);
      assert.equal(e2b.body.message, v1.body.message);
      const res = await g.call(key, 'POST', '/e2b/v2/sandboxes', { templateID: 'base', volumeMounts: [{ name: 'x', path: '/x' }] });
      assert.deepEqual([res.status, res.body.code], [409, 409], JSON.stringify(res.body));
      assert.match(res.body.message, /cluster\.md/);
      assert.deepEqual((await g.call(key, 'GET', '/e2b/volumes')).body, []);
      assert.deepEqual((await g.call(key, 'GET', '/e2b/volumes/x')).status, 404);
    } finally {
      await g.close();
    }
  });

  test('a service without volumes says so (409), as /v1', async () => {
    const g = await buildFakeApp();
    try {
      const none = await g.call(g.orgs.a.key, 'POST', '/e2b/volumes', { name: 'x' });
      assert.deepEqual([none.status, none.body.code], [409, 409]);
      assert.match(none.body.message, /no volumes/);
    } finally {
      await g.close();
    }
  });
});
