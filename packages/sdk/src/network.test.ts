import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiClient } from './client.js';
import { InvalidStateError, ValidationError } from './errors.js';
import { Sandbox } from './sandbox.js';
import { toSandboxInfo } from './wire.js';

interface Sent {
  method: string;
  path: string;
  body: unknown;
}

type Route = (body: unknown) => { status?: number; json: unknown };

/** A fetch that answers from `routes` ("METHOD /path") and records each request, so no server is needed. */
function fakeApi(routes: Record<string, Route>): { client: ApiClient; sent: Sent[] } {
  const sent: Sent[] = [];
  const fetchStub = (async (input: string | URL | Request, init?: RequestInit) => {
    const url = new URL(String(input));
    const method = init?.method ?? 'GET';
    const body = typeof init?.body === 'string' ? (JSON.parse(init.body) as unknown) : undefined;
    sent.push({ method, path: url.pathname, body });
    const route = routes[`${method} ${url.pathname}`];
    const r = route ? route(body) : { status: 404, json: { error: 'Not found', code: 'NOT_FOUND', message: `no route ${method} ${url.pathname}` } };
    return new Response(JSON.stringify(r.json), { status: r.status ?? 200, headers: { 'content-type': 'application/json' } });
  }) as typeof fetch;
  return { client: new ApiClient({ baseUrl: 'http://api.test', apiKey: 'k', fetch: fetchStub, maxRetries: 0 }), sent };
}

const wirePolicy = { internet_access: true, allow_out: ['example.com', '10.0.0.0/8'], deny_out: ['10.1.0.0/16'] };

test('create sends allow_out and deny_out only when given; info.network comes from the answer', async () => {
  const { client, sent } = fakeApi({
    'POST /v1/sandboxes': () => ({ status: 201, json: { id: 'sb_1', status: 'running', internet_access: true, network: wirePolicy } }),
  });
  const sb = await Sandbox.create({ client, template: 'base', allowOut: ['Example.com', '10.0.0.1/8'], denyOut: ['10.1.0.0/16'] });
  assert.deepEqual(sent[0]!.body, { template_name: 'base', allow_out: ['Example.com', '10.0.0.1/8'], deny_out: ['10.1.0.0/16'] });
  assert.deepEqual(sb.info.network, { internetAccess: true, allowOut: ['example.com', '10.0.0.0/8'], denyOut: ['10.1.0.0/16'] });
  await Sandbox.create({ client, template: 'base', internetAccess: false });
  assert.deepEqual(sent[1]!.body, { template_name: 'base', internet_access: false }, 'no lists unless asked for');
});

test('getNetwork reads the policy; setNetwork PUTs only the fields given and both update info', async () => {
  let stored: Record<string, unknown> = wirePolicy;
  const { client, sent } = fakeApi({
    'GET /v1/sandboxes/sb_1/network': () => ({ json: { ...stored, request_id: 'req_1' } }),
    'PUT /v1/sandboxes/sb_1/network': (body) => {
      const b = body as Record<string, unknown>;
      stored = { internet_access: b.internet_access ?? true, allow_out: b.allow_out ?? [], deny_out: b.deny_out ?? [] };
      return { json: { ...stored, request_id: 'req_2' } };
    },
  });
  const sb = Sandbox.fromId('sb_1', { client });
  assert.deepEqual(await sb.getNetwork(), { internetAccess: true, allowOut: ['example.com', '10.0.0.0/8'], denyOut: ['10.1.0.0/16'] });
  assert.deepEqual(sb.info.network.allowOut, ['example.com', '10.0.0.0/8']);

  const set = await sb.setNetwork({ denyOut: ['*.example.org'] });
  assert.deepEqual(sent.at(-1), { method: 'PUT', path: '/v1/sandboxes/sb_1/network', body: { deny_out: ['*.example.org'] } });
  assert.deepEqual(set, { internetAccess: true, allowOut: [], denyOut: ['*.example.org'] }, 'what is left out takes its default');
  assert.deepEqual(sb.info.network, set);

  const off = await sb.setNetwork({ internetAccess: false, allowOut: [], denyOut: [] });
  assert.deepEqual(sent.at(-1)!.body, { internet_access: false, allow_out: [], deny_out: [] });
  assert.equal(off.internetAccess, false);
  assert.equal(sb.info.internetAccess, false, 'info.internetAccess follows the policy');
});

test("the service's refusals are typed: a bad entry is a ValidationError, internet for a sandbox made without it an InvalidStateError", async () => {
  const { client } = fakeApi({
    'PUT /v1/sandboxes/sb_1/network': (body) =>
      (body as { internet_access?: boolean }).internet_access === false
        ? { status: 400, json: { error: 'Validation error', code: 'VALIDATION_ERROR', message: 'allow_out[0]: "not a host!" is not an IPv4 address, CIDR or domain' } }
        : { status: 409, json: { error: 'Invalid state', code: 'INVALID_STATE', message: 'sandbox sb_1 was created without internet access' } },
  });
  const sb = Sandbox.fromId('sb_1', { client });
  await assert.rejects(sb.setNetwork({ internetAccess: false, allowOut: ['not a host!'] }), (e: unknown) => e instanceof ValidationError && /not a host!/.test(e.message));
  await assert.rejects(sb.setNetwork({ allowOut: ['example.com'] }), InvalidStateError);
  assert.deepEqual(sb.info.network, { internetAccess: true, allowOut: [], denyOut: [] }, 'a refused change leaves info as it was');
});

test('a sandbox answer without `network` (an older service) gets it from internet_access; metrics carry egressDenied', async () => {
  assert.deepEqual(toSandboxInfo({ id: 'a', internet_access: false }).network, { internetAccess: false, allowOut: [], denyOut: [] });
  assert.deepEqual(toSandboxInfo({ id: 'b' }).network, { internetAccess: true, allowOut: [], denyOut: [] });
  const { client } = fakeApi({
    'GET /v1/sandboxes/sb_1/metrics': () => ({ json: { sandbox_id: 'sb_1', status: 'running', pids: 3, oom_kills: 0, egress_denied: 4 } }),
    'GET /v1/sandboxes/sb_2/metrics': () => ({ json: { sandbox_id: 'sb_2', status: 'running' } }),
  });
  assert.equal((await Sandbox.fromId('sb_1', { client }).resources()).egressDenied, 4);
  assert.equal((await Sandbox.fromId('sb_2', { client }).resources()).egressDenied, 0);
});
