import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiClient } from './client.js';
import { ConflictError, NotFoundError } from './errors.js';
import { Sandbox } from './sandbox.js';
import { Volume } from './volume.js';

/** A fetch answering from `routes` ("METHOD /path") that records each request. */
function fakeApi(routes: Record<string, (body: unknown, query: URLSearchParams) => { status?: number; json: unknown }>) {
  const sent: Array<{ method: string; path: string; query: Record<string, string>; body: unknown }> = [];
  const fetchStub = (async (input: string | URL | Request, init?: RequestInit) => {
    const url = new URL(String(input));
    const method = init?.method ?? 'GET';
    const body = typeof init?.body === 'string' ? (JSON.parse(init.body) as unknown) : undefined;
    sent.push({ method, path: url.pathname, query: Object.fromEntries(url.searchParams), body });
    const route = routes[`${method} ${url.pathname}`];
    const r = route ? route(body, url.searchParams) : { status: 404, json: { error: 'Not found', code: 'ROUTE_NOT_FOUND', message: 'no route' } };
    return new Response(JSON.stringify(r.json), { status: r.status ?? 200, headers: { 'content-type': 'application/json' } });
  }) as typeof fetch;
  return { client: new ApiClient({ baseUrl: 'http://api.test', apiKey: 'k', fetch: fetchStub, maxRetries: 0 }), sent };
}

const wireVolume = { object: 'volume', id: 'vol-0123456789abcdef0123', name: 'data', organization_id: 'o1', size_gb: 2, mounted_by: ['sb1'], node: 'h', created_at: '2030-01-01T00:00:00Z' };

test('Volume: create, list, get, delete (force as a query), typed errors; Sandbox.create sends volumes and reads them back', async () => {
  const { client, sent } = fakeApi({
    'POST /v1/volumes': () => ({ status: 201, json: { ...wireVolume, used_bytes: 0, mounted_by: [] } }),
    'GET /v1/volumes': () => ({ json: { object: 'list', data: [wireVolume], url: '/v1/volumes' } }),
    'GET /v1/volumes/data': () => ({ json: { ...wireVolume, used_bytes: 4096 } }),
    'GET /v1/volumes/nope': () => ({ status: 404, json: { error: 'Volume not found', code: 'VOLUME_NOT_FOUND', message: 'no volume' } }),
    'DELETE /v1/volumes/data': (_b, q) =>
      q.get('force') === 'true' ? { json: { id: wireVolume.id, status: 'deleted' } } : { status: 409, json: { error: 'Conflict', code: 'VOLUME_IN_USE', message: 'mounted' } },
    'POST /v1/sandboxes': () => ({
      status: 201,
      json: { id: 'sb2', status: 'running', public_host: 'http://h', template_name: 'base', resources: { vcpu: 1, memory_mb: 512, disk_gb: 1 }, auth_token: 't', volumes: [{ volume_id: wireVolume.id, name: 'data', path: '/data', read_only: true }] },
    }),
  });
  const made = await Volume.create('data', 2, { client });
  assert.deepEqual(sent[0]!.body, { name: 'data', size_gb: 2 });
  assert.equal(made.sizeGb, 2);
  assert.deepEqual(made.mountedBy, []);
  assert.deepEqual((await Volume.list({ client })).map((v) => v.name), ['data']);
  assert.equal((await Volume.get('data', { client })).usedBytes, 4096);
  await assert.rejects(Volume.get('nope', { client }), (e: unknown) => e instanceof NotFoundError && e.code === 'VOLUME_NOT_FOUND');
  await assert.rejects(Volume.delete('data', { client }), (e: unknown) => e instanceof ConflictError && e.code === 'VOLUME_IN_USE');
  assert.deepEqual(await Volume.delete('data', { client, force: true }), { id: wireVolume.id, status: 'deleted' });
  const sb = await Sandbox.create({ client, template: 'base', volumes: [{ volume: made, path: '/data', readOnly: true }, { volume: 'other', path: '/o' }] });
  assert.deepEqual(sent.at(-1)!.body, { template_name: 'base', volumes: [{ name: wireVolume.id, path: '/data', read_only: true }, { name: 'other', path: '/o' }] });
  assert.deepEqual(sb.info.volumes, [{ volumeId: wireVolume.id, name: 'data', path: '/data', readOnly: true }]);
});
