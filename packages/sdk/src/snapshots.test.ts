import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiClient } from './client.js';
import { ConflictError, InvalidStateError, NotFoundError, PermissionDeniedError, ValidationError } from './errors.js';
import { Sandbox } from './sandbox.js';
import { Snapshot } from './snapshot.js';
import type { SnapshotInfo } from './types.js';

interface Sent {
  method: string;
  path: string;
  query: Record<string, string>;
  body: unknown;
  headers: Record<string, string>;
}

type Route = (body: unknown, query: URLSearchParams) => { status?: number; json: unknown };

/** A fetch that answers from `routes` ("METHOD /path") and records each request, so no server is needed. */
function fakeApi(routes: Record<string, Route>): { client: ApiClient; sent: Sent[] } {
  const sent: Sent[] = [];
  const fetchStub = (async (input: string | URL | Request, init?: RequestInit) => {
    const url = new URL(String(input));
    const method = init?.method ?? 'GET';
    const body = typeof init?.body === 'string' ? (JSON.parse(init.body) as unknown) : undefined;
    sent.push({ method, path: url.pathname, query: Object.fromEntries(url.searchParams), body, headers: { ...(init?.headers as Record<string, string>) } });
    const route = routes[`${method} ${url.pathname}`];
    const r = route ? route(body, url.searchParams) : { status: 404, json: { error: 'Not found', code: 'ROUTE_NOT_FOUND', message: `no route ${method} ${url.pathname}` } };
    return new Response(JSON.stringify(r.json), { status: r.status ?? 200, headers: { 'content-type': 'application/json' } });
  }) as typeof fetch;
  return { client: new ApiClient({ baseUrl: 'http://api.test', apiKey: 'k', fetch: fetchStub, maxRetries: 0 }), sent };
}

/** What was sent, without the headers and query. */
const call = (s: Sent | undefined) => s && { method: s.method, path: s.path, body: s.body };

const resources = { vcpu: 2, memory_mb: 2048, disk_gb: 10, disk_mb: 10240 };

function wireSnapshot(id: string, over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    object: 'snapshot',
    snapshot_id: id,
    id,
    name: null,
    sandbox_id: 'sb_1',
    organization_id: 'org_1',
    template_id: 'tpl_ci',
    template_name: 'code-interpreter',
    parent_snapshot_id: null,
    size: 4096,
    created_at: '2030-01-01T00:00:00.000Z',
    resources,
    ...over,
  };
}

function wireSandbox(id: string, token?: string): Record<string, unknown> {
  return {
    object: 'sandbox',
    id,
    sandbox_id: id,
    status: 'running',
    template_name: 'code-interpreter',
    template_id: 'tpl_ci',
    public_host: `http://${id}.agent.test`,
    internet_access: true,
    resources,
    ...(token ? { auth_token: token, token_expires_at: '2030-01-01T01:00:00.000Z' } : {}),
  };
}

const problem = (status: number, code: string, message: string, extra: Record<string, unknown> = {}) => ({
  status,
  json: { error: code, code, message, request_id: 'req_e', ...extra },
});

test('sandbox.snapshot() POSTs the name only when given and parses the snapshot into camelCase', async () => {
  const { client, sent } = fakeApi({
    'POST /v1/sandboxes/sb_1/snapshots': (body) => ({
      status: 201,
      json: { ...wireSnapshot('snap_1', { name: (body as { name?: string }).name ?? null, parent_snapshot_id: 'snap_0' }), request_id: 'req_1' },
    }),
  });
  const sb = Sandbox.fromId('sb_1', { client });
  const snap = await sb.snapshot({ name: 'before upgrade' });
  assert.deepEqual(call(sent[0]), { method: 'POST', path: '/v1/sandboxes/sb_1/snapshots', body: { name: 'before upgrade' } });
  assert.equal(sent[0]!.headers['x-api-key'], 'k', 'a lifecycle call: the API key, not a sandbox token');
  assert.deepEqual(snap, {
    id: 'snap_1',
    snapshotId: 'snap_1',
    name: 'before upgrade',
    sandboxId: 'sb_1',
    organizationId: 'org_1',
    templateId: 'tpl_ci',
    templateName: 'code-interpreter',
    parentSnapshotId: 'snap_0',
    size: 4096,
    createdAt: '2030-01-01T00:00:00.000Z',
    resources: { vcpu: 2, memoryMb: 2048, diskGb: 10, diskMb: 10240 },
  });
  const unnamed = await sb.snapshot();
  assert.deepEqual(sent[1]!.body, {}, 'no name unless given');
  assert.equal(unnamed.name, null);
});

test('Sandbox.create({ snapshot }) sends snapshot_id and no template, from an id or a SnapshotInfo; the token of the answer is used', async () => {
  const { client, sent } = fakeApi({
    'POST /v1/sandboxes': () => ({ status: 201, json: wireSandbox('sb_9', 'tok_9') }),
  });
  const sb = await Sandbox.create({ client, snapshot: 'snap_1', timeoutSeconds: 60, envVars: { A: '1' }, allowOut: ['example.com'], autoResume: true });
  assert.deepEqual(sent[0]!.body, { snapshot_id: 'snap_1', timeout_seconds: 60, env_vars: { A: '1' }, allow_out: ['example.com'], auto_resume: true });
  assert.equal(sb.id, 'sb_9');
  assert.equal(sb.token?.token, 'tok_9');

  const info = await Snapshot.get('snap_2', { client: fakeApi({ 'GET /v1/snapshots/snap_2': () => ({ json: wireSnapshot('snap_2') }) }).client });
  await Sandbox.create({ client, snapshot: info });
  assert.deepEqual(sent[1]!.body, { snapshot_id: 'snap_2' });

  await assert.rejects(Sandbox.create({ client, snapshot: 'snap_1', template: 'base' }), TypeError);
  await assert.rejects(Sandbox.create({ client, snapshot: 'snap_1', templateId: 'tpl_1' }), TypeError);
  assert.equal(sent.length, 2, 'a contradictory create is not sent');
  await Sandbox.create({ client, template: 'base' });
  assert.deepEqual(sent[2]!.body, { template_name: 'base' }, 'a create without a snapshot is as before');
});

test('fork(n, opts) POSTs count and only the settings given, and returns connected Sandboxes with their own tokens', async () => {
  const { client, sent } = fakeApi({
    'POST /v1/sandboxes/sb_1/fork': (body) => {
      const n = (body as { count: number }).count;
      const data = Array.from({ length: n }, (_, i) => wireSandbox(`sb_f${i}`, `tok_f${i}`));
      return { status: 201, json: { object: 'list', data, source_id: 'sb_1', request_id: 'req_f' } };
    },
    'GET /v1/sandboxes/sb_f1/network': () => ({ json: { internet_access: true, allow_out: [], deny_out: [] } }),
  });
  const src = Sandbox.fromId('sb_1', { client });
  const forks = await src.fork(3, { timeoutSeconds: 600, internetAccess: false, onTimeout: 'pause' });
  assert.deepEqual(call(sent[0]), { method: 'POST', path: '/v1/sandboxes/sb_1/fork', body: { count: 3, timeout_seconds: 600, internet_access: false, on_timeout: 'pause' } });
  assert.deepEqual(
    forks.map((f) => [f.id, f.token?.token, f.info.publicHost, f.info.status]),
    [
      ['sb_f0', 'tok_f0', 'http://sb_f0.agent.test', 'running'],
      ['sb_f1', 'tok_f1', 'http://sb_f1.agent.test', 'running'],
      ['sb_f2', 'tok_f2', 'http://sb_f2.agent.test', 'running'],
    ],
  );
  assert.ok(forks.every((f) => f instanceof Sandbox && f.client === client), 'each fork uses the same client');
  await forks[1]!.getNetwork();
  assert.equal(sent.at(-1)!.path, '/v1/sandboxes/sb_f1/network', "a fork's calls are about the fork");

  const one = await src.fork();
  assert.deepEqual(sent.at(-1)!.body, { count: 1 }, 'the default is one fork and no settings');
  assert.equal(one.length, 1);

  const before = sent.length;
  for (const bad of [0, -1, 1.5, NaN]) await assert.rejects(src.fork(bad), RangeError, String(bad));
  assert.equal(sent.length, before, 'a bad count is not sent');
});

test('restore sends the snapshot id and takes the answer as the sandbox state', async () => {
  const { client, sent } = fakeApi({
    'POST /v1/sandboxes/sb_1/restore': () => ({ json: { ...wireSandbox('sb_1'), public_host: 'http://sb_1.new.test', request_id: 'req_r' } }),
  });
  const sb = Sandbox.fromId('sb_1', { client });
  const info = await sb.restore('snap_1');
  assert.deepEqual(call(sent[0]), { method: 'POST', path: '/v1/sandboxes/sb_1/restore', body: { snapshot_id: 'snap_1' } });
  assert.equal(info.id, 'sb_1');
  assert.equal(sb.info.publicHost, 'http://sb_1.new.test', 'agent calls go where the restored sandbox answers');
  const snap: SnapshotInfo = await Snapshot.get('snap_7', { client: fakeApi({ 'GET /v1/snapshots/snap_7': () => ({ json: wireSnapshot('snap_7') }) }).client });
  await sb.restore(snap);
  assert.deepEqual(sent[1]!.body, { snapshot_id: 'snap_7' });
});

test('Snapshot.list pages with the cursor and filters by sandbox; listPage gives one page', async () => {
  const pages: Record<string, unknown> = {
    '': { object: 'list', data: [wireSnapshot('snap_3'), wireSnapshot('snap_2')], has_more: true, next_cursor: 'c1', url: '/v1/snapshots' },
    c1: { object: 'list', data: [wireSnapshot('snap_1')], has_more: false, next_cursor: null, url: '/v1/snapshots' },
  };
  const { client, sent } = fakeApi({ 'GET /v1/snapshots': (_b, q) => ({ json: pages[q.get('cursor') ?? ''] }) });
  const all = await Snapshot.list({ client, sandboxId: 'sb_1', limit: 2 }).toArray();
  assert.deepEqual(
    all.map((s) => s.snapshotId),
    ['snap_3', 'snap_2', 'snap_1'],
  );
  assert.deepEqual(
    sent.map((s) => s.query),
    [
      { limit: '2', sandbox_id: 'sb_1' },
      { limit: '2', sandbox_id: 'sb_1', cursor: 'c1' },
    ],
  );
  const first = await Snapshot.list({ client, maxItems: 1 }).toArray();
  assert.deepEqual(
    first.map((s) => s.id),
    ['snap_3'],
  );
  assert.deepEqual(sent.at(-1)!.query, {}, 'no filter unless asked for');
  const page = await Snapshot.listPage({ client, cursor: 'c1' });
  assert.deepEqual({ ...page, data: page.data.map((s) => s.id) }, { data: ['snap_1'], hasMore: false, nextCursor: null });
});

test('Snapshot.get, delete and toTemplate: paths, bodies and parsed answers', async () => {
  const { client, sent } = fakeApi({
    'GET /v1/snapshots/snap_1': () => ({ json: wireSnapshot('snap_1', { name: 'v1' }) }),
    'DELETE /v1/snapshots/snap_1': () => ({ json: { id: 'snap_1', status: 'deleted', request_id: 'req_d' } }),
    'POST /v1/snapshots/snap_1/template': (body) => ({
      status: 201,
      json: { id: 'tpl_9', name: (body as { alias: string }).alias, status: 'active', is_active: true, is_public: false, default_resources: resources, created_at: '2030-01-01T00:00:00.000Z' },
    }),
  });
  const snap = await Snapshot.get('snap_1', { client });
  assert.equal(snap.name, 'v1');
  const tpl = await Snapshot.toTemplate(snap, 'my-app-v1', { client });
  assert.deepEqual(call(sent[1]), { method: 'POST', path: '/v1/snapshots/snap_1/template', body: { alias: 'my-app-v1' } });
  assert.equal(tpl.id, 'tpl_9');
  assert.equal(tpl.name, 'my-app-v1');
  assert.equal(tpl.isActive, true);
  assert.deepEqual(tpl.defaultResources, { vcpu: 2, memoryMb: 2048, diskGb: 10 });
  assert.deepEqual(await Snapshot.delete(snap, { client }), { id: 'snap_1', status: 'deleted' });
  assert.deepEqual(
    sent.map((s) => `${s.method} ${s.path}`),
    ['GET /v1/snapshots/snap_1', 'POST /v1/snapshots/snap_1/template', 'DELETE /v1/snapshots/snap_1'],
  );
  const odd = await Snapshot.get('snap_x', { client: fakeApi({ 'GET /v1/snapshots/snap_x': () => ({ json: { id: 'snap_x' } }) }).client });
  assert.deepEqual(
    { ...odd, resources: undefined },
    { id: 'snap_x', snapshotId: 'snap_x', name: null, sandboxId: '', organizationId: '', templateId: '', templateName: '', parentSnapshotId: null, size: 0, createdAt: '', resources: undefined },
    'a sparse answer gives neutral values, not an exception',
  );
});

test("the service's refusals are typed errors carrying code, request id and the quota's name", async () => {
  const { client } = fakeApi({
    'GET /v1/snapshots/snap_missing': () => problem(404, 'SNAPSHOT_NOT_FOUND', 'snapshot snap_missing not found'),
    'GET /v1/snapshots/snap_other': () => problem(404, 'NOT_FOUND', 'snapshot snap_other not found'),
    'DELETE /v1/snapshots/snap_theirs': () => problem(403, 'PERMISSION_DENIED', 'snapshot snap_theirs belongs to another organization'),
    'POST /v1/sandboxes/sb_1/snapshots': () => problem(409, 'ORG_QUOTA_EXCEEDED', 'snapshot storage quota exceeded', { limit: 'max_snapshot_storage_mb', max: 10240, used: 10200 }),
    'POST /v1/sandboxes/sb_1/restore': () => problem(400, 'VALIDATION_ERROR', 'snapshot snap_9 is not of the lineage of sandbox sb_1'),
    'POST /v1/sandboxes/sb_gone/fork': () => problem(409, 'INVALID_STATE', 'sandbox sb_gone is deleted'),
    'POST /v1/snapshots/snap_1/template': () => problem(409, 'TEMPLATE_EXISTS', 'template base exists'),
  });
  await assert.rejects(Snapshot.get('snap_missing', { client }), (e: unknown) => e instanceof NotFoundError && e.code === 'SNAPSHOT_NOT_FOUND' && e.status === 404 && e.requestId === 'req_e');
  await assert.rejects(Snapshot.get('snap_other', { client }), NotFoundError);
  await assert.rejects(Snapshot.delete('snap_theirs', { client }), PermissionDeniedError);
  await assert.rejects(Sandbox.fromId('sb_1', { client }).snapshot(), (e: unknown) => {
    assert.ok(e instanceof ConflictError && !(e instanceof InvalidStateError));
    assert.equal(e.code, 'ORG_QUOTA_EXCEEDED');
    assert.equal((e.body as { limit?: string }).limit, 'max_snapshot_storage_mb');
    return true;
  });
  const sb = Sandbox.fromId('sb_1', { client });
  const before = sb.info;
  await assert.rejects(sb.restore('snap_9'), (e: unknown) => e instanceof ValidationError && /lineage/.test(e.message));
  assert.equal(sb.info, before, 'a refused restore leaves info as it was');
  await assert.rejects(Sandbox.fromId('sb_gone', { client }).fork(2), InvalidStateError);
  await assert.rejects(Snapshot.toTemplate('snap_1', 'base', { client }), ConflictError);
});

test('taking, forking, restoring and promoting are never sent twice, even after a 5xx', async () => {
  let calls = 0;
  const fail = () => {
    calls++;
    return problem(503, 'RUNTIME_ERROR', 'busy');
  };
  const fetchStub = (async () => {
    const r = fail();
    return new Response(JSON.stringify(r.json), { status: r.status, headers: { 'content-type': 'application/json' } });
  }) as typeof fetch;
  const client = new ApiClient({ baseUrl: 'http://api.test', apiKey: 'k', fetch: fetchStub, maxRetries: 1 });
  const sb = Sandbox.fromId('sb_1', { client });
  for (const attempt of [() => sb.snapshot(), () => sb.fork(2), () => sb.restore('snap_1'), () => Snapshot.toTemplate('snap_1', 'x', { client }), () => Sandbox.create({ client, snapshot: 'snap_1' })]) {
    const before = calls;
    await assert.rejects(attempt());
    assert.equal(calls - before, 1);
  }
  const before = calls;
  await assert.rejects(Snapshot.get('snap_1', { client }));
  assert.equal(calls - before, 2, 'a GET is retried');
});
