// E2B's control plane (/e2b, routes/e2b.ts) through app.inject, over a real SQLite store and the
// FakeRuntime, in the shapes E2B's clients read; e2e/src/e2b-control.test.ts drives it with the
// real client on a real daemon.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { agentGet } from '../node/agent-client.js';
import { buildFakeApp, type FakeApp } from '../testing/fake-app.js';
import { createBodyOf, egressOf, ENVD_VERSION, metadataFilter, networkBodyOf, stateFilter, templateRef } from './e2b-shapes.js';

describe('the E2B control plane over the FakeRuntime (inject)', () => {
  let f: FakeApp;
  let a: string;
  let b: string;

  before(async () => {
    f = await buildFakeApp();
    a = f.orgs.a.key;
    b = f.orgs.b.key;
  });
  after(async () => {
    await f?.close();
  });

  const create = async (key: string, body: Record<string, unknown> = {}) => {
    const res = await f.call(key, 'POST', '/e2b/v2/sandboxes', { templateID: 'base', ...body });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body as { sandboxID: string; envdAccessToken: string; [k: string]: unknown };
  };
  const raw = (method: 'GET' | 'POST', url: string, headers: Record<string, string>, payload?: string) =>
    f.app.inject({ method, url, headers, ...(payload === undefined ? {} : { payload }) });

  test('create: 201 with what the client reads; env vars reach the agent; metadata and the token are kept', async () => {
    const sb = await create(a, { timeout: 600, metadata: { team: 'x', run: '1' }, envVars: { GREETING: 'hello' }, secure: true, allow_internet_access: true });
    assert.match(sb.sandboxID, /^sb[a-z0-9]{20}$/);
    assert.equal(sb.templateID, (await f.store.templates.byName('base', f.orgs.a.id))?.id);
    assert.equal(sb.alias, 'base');
    assert.equal(sb.envdVersion, ENVD_VERSION);
    assert.equal(sb.domain, 'sandbox.test', 'host mode: the gateway domain');
    assert.equal(sb.trafficAccessToken, sb.envdAccessToken, 'the code interpreter\'s client sends this one');
    const claims = await f.services.tokens.verify(sb.envdAccessToken, sb.sandboxID);
    assert.equal(claims.orgId, f.orgs.a.id);
    assert.ok(claims.keyId, 'the token carries its key: revoking the key ends it');
    const row = await f.store.sandboxes.byId(sb.sandboxID);
    assert.equal(row?.e2bAccessToken, sb.envdAccessToken);
    assert.deepEqual(row?.metadata, { team: 'x', run: '1' });
    assert.equal(row?.timeoutSeconds, 600);
    const env = await agentGet(f.runtime.agentSocket(sb.sandboxID), '/env', 2000);
    assert.deepEqual((env.body as { env_vars: unknown }).env_vars, { GREETING: 'hello' });
    // The older path answers the same.
    const v1 = await f.call(a, 'POST', '/e2b/sandboxes', { templateID: 'base' });
    assert.equal(v1.status, 201);
    assert.equal((await f.store.sandboxes.byId(v1.body.sandboxID))?.timeoutSeconds, 300, 'no timeout: 5 minutes');
  });

  test('get: the detail shape; another organization\'s or an unknown id is a 404 in E2B\'s shape', async () => {
    const sb = await create(a, { metadata: { k: 'v' } });
    const got = await f.call(a, 'GET', `/e2b/sandboxes/${sb.sandboxID}`);
    assert.equal(got.status, 200);
    assert.equal(got.body.sandboxID, sb.sandboxID);
    assert.equal(got.body.state, 'running');
    assert.deepEqual(got.body.metadata, { k: 'v' });
    assert.equal(got.body.envdVersion, ENVD_VERSION);
    assert.equal(got.body.cpuCount > 0 && got.body.memoryMB > 0 && got.body.diskSizeMB > 0, true);
    assert.ok(!Number.isNaN(Date.parse(got.body.startedAt)) && !Number.isNaN(Date.parse(got.body.endAt)));
    assert.equal(got.body.allowInternetAccess, true);
    assert.deepEqual(got.body.lifecycle, { onTimeout: 'kill', autoResume: false });
    assert.equal(got.body.envdAccessToken, undefined, 'get hands out no token');
    for (const [key, id] of [
      [b, sb.sandboxID],
      [a, 'sb00000000000000000000'],
    ] as const) {
      const miss = await f.call(key, 'GET', `/e2b/sandboxes/${id}`);
      assert.equal(miss.status, 404);
      assert.equal(miss.body.code, 404);
      assert.equal(typeof miss.body.message, 'string');
    }
    assert.equal((await f.call(b, 'DELETE', `/e2b/sandboxes/${sb.sandboxID}`)).status, 404, 'nor can it kill it');
    assert.equal((await f.call(b, 'POST', `/e2b/v2/sandboxes/${sb.sandboxID}/connect`, {})).status, 404, 'nor connect to it');
  });

  test('keys: a bad or missing key is a 401, a malformed body or query a 400, an unknown path a 404, all as {code, message}', async () => {
    const bad = await raw('GET', '/e2b/v2/sandboxes', { 'x-api-key': 'e2b_0123456789abcdef0123456789abcdef01234567' });
    assert.equal(bad.statusCode, 401);
    assert.equal(bad.json().code, 401);
    assert.equal((await raw('GET', '/e2b/v2/sandboxes', {})).json().code, 401);
    for (const [payload, why] of [
      ['{"templateID":', 'not JSON'],
      ['{}', 'no templateID'],
      ['{"templateID":"base","metadata":{"a":1}}', 'metadata values are strings'],
      ['{"templateID":"base","timeout":-1}', 'negative timeout'],
      ['{"templateID":"base","timeout":0}', 'zero timeout'],
      ['{"templateID":"base","volumeMounts":[{"path":"/v"}]}', 'a volume mount without a name'],
      ['{"templateID":"base","volumeMounts":{"/v":"v"}}', 'volumeMounts as the client\'s option, not its wire'],
    ]) {
      const res = await raw('POST', '/e2b/v2/sandboxes', { 'x-api-key': a, 'content-type': 'application/json' }, payload);
      assert.equal(res.statusCode, 400, `${why}: ${res.body}`);
      assert.equal(res.json().code, 400, why);
      assert.equal(typeof res.json().message, 'string');
    }
    const unknownTemplate = await f.call(a, 'POST', '/e2b/v2/sandboxes', { templateID: 'no-such-template' });
    assert.equal(unknownTemplate.status, 404);
    assert.equal(unknownTemplate.body.code, 404);
    assert.equal((await f.call(a, 'GET', '/e2b/v2/sandboxes?state=sleeping')).body.code, 400);
    assert.equal((await f.call(a, 'GET', '/e2b/v2/sandboxes?nextToken=garbage')).body.code, 400);
    const none = await f.call(a, 'GET', '/e2b/templates/nope');
    assert.deepEqual([none.status, none.body.code], [404, 404]);
  });

  test('list: state and metadata filters, pagination through x-next-token', async () => {
    const tag = `list-${Date.now()}`;
    const made = [];
    for (let i = 0; i < 3; i++) made.push((await create(a, { metadata: { tag, i: String(i) } })).sandboxID);
    await create(b, { metadata: { tag } });
    const q = encodeURIComponent(new URLSearchParams({ tag }).toString());
    const seen: string[] = [];
    let next: string | undefined;
    let pages = 0;
    do {
      const res = await f.app.inject({ method: 'GET', url: `/e2b/v2/sandboxes?metadata=${q}&limit=2${next ? `&nextToken=${encodeURIComponent(next)}` : ''}`, headers: { 'x-api-key': a } });
      assert.equal(res.statusCode, 200, res.body);
      const page = res.json() as Array<{ sandboxID: string; metadata: Record<string, string>; state: string }>;
      assert.ok(page.length <= 2);
      for (const sb of page) {
        assert.equal(sb.metadata.tag, tag);
        seen.push(sb.sandboxID);
      }
      next = res.headers['x-next-token'] as string | undefined;
      pages++;
    } while (next && pages < 10);
    assert.deepEqual([...seen].sort(), [...made].sort(), 'each of the organization\'s, once; none of the other\'s');
    assert.ok(pages >= 2, 'limit 2 of 3: a second page');

    const one = encodeURIComponent(new URLSearchParams({ tag, i: '1' }).toString());
    assert.deepEqual((await f.call(a, 'GET', `/e2b/v2/sandboxes?metadata=${one}`)).body.map((s: { sandboxID: string }) => s.sandboxID), [made[1]]);

    assert.equal((await f.call(a, 'POST', `/e2b/sandboxes/${made[0]}/pause`, {})).status, 204);
    const running = await f.call(a, 'GET', `/e2b/v2/sandboxes?metadata=${q}&state=running`);
    assert.deepEqual(running.body.map((s: { sandboxID: string }) => s.sandboxID).sort(), [made[1], made[2]].sort());
    const paused = await f.call(a, 'GET', `/e2b/v2/sandboxes?metadata=${q}&state=paused`);
    assert.deepEqual(paused.body.map((s: { sandboxID: string; state: string }) => [s.sandboxID, s.state]), [[made[0], 'paused']]);
    const both = await f.call(a, 'GET', `/e2b/v2/sandboxes?metadata=${q}&state=running,paused`);
    assert.equal(both.body.length, 3);
    // The first list: running ones only.
    assert.equal((await f.call(a, 'GET', `/e2b/sandboxes?metadata=${q}`)).body.length, 2);
  });

  test('timeout, pause, connect (resumes, 201; running, 200), the kept token, kill', async () => {
    const sb = await create(a, { timeout: 60 });
    assert.equal((await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/timeout`, { timeout: 900 })).status, 204);
    const endAt = Date.parse((await f.call(a, 'GET', `/e2b/sandboxes/${sb.sandboxID}`)).body.endAt);
    assert.ok(Math.abs(endAt - Date.now() - 900_000) < 30_000);
    assert.equal((await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/timeout`, {})).body.code, 400);

    assert.equal((await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/pause`, {})).status, 204);
    assert.equal(await f.runtime.status(sb.sandboxID), 'paused');
    const again = await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/pause`, {});
    assert.deepEqual([again.status, again.body.code], [409, 409], 'already paused: the client answers false');

    const woke = await f.call(a, 'POST', `/e2b/v2/sandboxes/${sb.sandboxID}/connect`, { timeout: 60 });
    assert.equal(woke.status, 201, JSON.stringify(woke.body));
    assert.equal(await f.runtime.status(sb.sandboxID), 'running');
    assert.equal(woke.body.envdAccessToken, sb.envdAccessToken, 'the same token: file URLs signed with it still hold');
    assert.equal(woke.body.envdVersion, ENVD_VERSION);
    const endAfter = Date.parse((await f.call(a, 'GET', `/e2b/sandboxes/${sb.sandboxID}`)).body.endAt);
    assert.ok(endAfter >= endAt - 1000, 'connect never brings the deadline nearer');
    const still = await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/connect`, {});
    assert.equal(still.status, 200);
    const resumeRunning = await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/resume`, {});
    assert.deepEqual([resumeRunning.status, resumeRunning.body.code], [409, 409]);

    // Without memory: our stop; connect starts it again.
    assert.equal((await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/pause`, { memory: false })).status, 204);
    assert.equal(await f.runtime.status(sb.sandboxID), 'stopped');
    assert.equal((await f.call(a, 'GET', `/e2b/sandboxes/${sb.sandboxID}`)).body.state, 'paused');
    assert.equal((await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/resume`, { timeout: 120 })).status, 201);
    assert.equal(await f.runtime.status(sb.sandboxID), 'running');

    assert.equal((await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/refreshes`, { duration: 30 })).status, 204);

    assert.equal((await f.call(a, 'DELETE', `/e2b/sandboxes/${sb.sandboxID}`)).status, 204);
    const gone = await f.call(a, 'DELETE', `/e2b/sandboxes/${sb.sandboxID}`);
    assert.deepEqual([gone.status, gone.body.code], [404, 404], 'a killed sandbox: the client answers false');
    assert.equal((await f.call(a, 'GET', `/e2b/sandboxes/${sb.sandboxID}`)).status, 404);
    assert.equal((await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/connect`, {})).status, 404);
  });

  test('a revoked key ends the kept token; a connect with a live key makes a new one', async () => {
    const org = f.orgs.a.id;
    const first = await f.services.keys.createKey(org);
    const sb = await create(first.secret);
    await f.services.tokens.verify(sb.envdAccessToken, sb.sandboxID);
    await f.services.keys.revoke(first.key.id);
    f.services.tokens.keysRevoked([first.key.id]);
    await assert.rejects(f.services.tokens.verify(sb.envdAccessToken, sb.sandboxID), (e: unknown) => e instanceof ServiceError && e.status === 401);
    assert.equal((await f.call(first.secret, 'POST', `/e2b/sandboxes/${sb.sandboxID}/connect`, {})).status, 401);
    const fresh = await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/connect`, {});
    assert.equal(fresh.status, 200);
    assert.notEqual(fresh.body.envdAccessToken, sb.envdAccessToken);
    await f.services.tokens.verify(fresh.body.envdAccessToken, sb.sandboxID);
    assert.equal((await f.store.sandboxes.byId(sb.sandboxID))?.e2bAccessToken, fresh.body.envdAccessToken);
  });

  test('metrics: one sample in E2B\'s shape; network: E2B\'s rules as ours', async () => {
    const sb = await create(a);
    const m = await f.call(a, 'GET', `/e2b/sandboxes/${sb.sandboxID}/metrics`);
    assert.equal(m.status, 200, JSON.stringify(m.body));
    assert.equal(m.body.length, 1);
    for (const k of ['cpuCount', 'cpuUsedPct', 'memUsed', 'memTotal', 'diskUsed', 'diskTotal', 'timestampUnix']) assert.equal(typeof m.body[0][k], 'number', k);
    assert.ok(!Number.isNaN(Date.parse(m.body[0].timestamp)));
    assert.deepEqual((await f.call(a, 'GET', `/e2b/sandboxes/${sb.sandboxID}/metrics?end=1000`)).body, [], 'a range in the past: none');

    const put = await f.call(a, 'PUT', `/e2b/sandboxes/${sb.sandboxID}/network`, { allowOut: ['example.com'], denyOut: ['0.0.0.0/0'] });
    assert.equal(put.status, 204, JSON.stringify(put.body));
    assert.deepEqual((await f.call(a, 'GET', `/v1/sandboxes/${sb.sandboxID}/network`)).body.allow_out, ['example.com']);
    assert.deepEqual((await f.call(a, 'GET', `/e2b/sandboxes/${sb.sandboxID}`)).body.network, { allowOut: ['example.com'], denyOut: ['0.0.0.0/0'] });
    const partial = await f.call(a, 'PUT', `/e2b/sandboxes/${sb.sandboxID}/network`, { allowOut: ['10.1.2.3'], denyOut: ['10.0.0.0/8'] });
    assert.deepEqual([partial.status, partial.body.code], [400, 400]);
  });

  test('fork: bad counts are a 400 (forks themselves: e2e/src/e2b-control.test.ts, they need snapshots)', async () => {
    const sb = await create(a);
    for (const count of [0, 21, 'two']) assert.deepEqual((await f.call(a, 'POST', `/e2b/sandboxes/${sb.sandboxID}/fork`, { count })).body.code, 400);
  });

  test('an E2B-shaped key (format e2b) is a key like any other', async () => {
    const { secret } = await f.services.keys.createKey(f.orgs.b.id, { format: 'e2b' });
    assert.match(secret, /^e2b_[0-9a-f]{40}$/);
    const res = await f.call(secret, 'GET', '/e2b/v2/sandboxes');
    assert.equal(res.status, 200);
  });
});

test('the mapping: templates, create bodies, egress, filters', () => {
  assert.equal(templateRef('code-interpreter-v1'), 'code-interpreter');
  assert.equal(templateRef('base'), 'base');
  assert.equal(templateRef('tpl_123'), 'tpl_123');
  assert.deepEqual(createBodyOf({ templateID: 'code-interpreter-v1', timeout: 10, envVars: { A: '1' }, metadata: { m: 'n' }, autoPause: true, autoResume: { enabled: true } }), {
    template_name: 'code-interpreter',
    timeout_seconds: 10,
    internet_access: true,
    env_vars: { A: '1' },
    metadata: { m: 'n' },
    on_timeout: 'pause',
    auto_resume: true,
  });
  assert.equal(createBodyOf({ templateID: 'base', allow_internet_access: false }).internet_access, false);
  assert.equal(createBodyOf({ templateID: 'base', network: { denyOut: ['0.0.0.0/0'] } }).internet_access, false, 'deny everything, allow nothing: no network');
  assert.throws(() => createBodyOf({ templateID: 'base', autoResume: { enabled: true } }), /autoResume needs autoPause/);
  assert.throws(() => createBodyOf({ templateID: 'base', mcp: {} }), /mcp is not supported/);
  assert.deepEqual(egressOf({ allowOut: ['1.2.3.4'], denyOut: ['0.0.0.0/0'] }), { allow_out: ['1.2.3.4'], deny_out: [] });
  assert.deepEqual(egressOf({ denyOut: ['10.0.0.0/8'] }), { allow_out: [], deny_out: ['10.0.0.0/8'] });
  assert.throws(() => egressOf({ allowOut: ['10.1.2.3'], denyOut: ['10.0.0.0/8'] }), /not supported/);
  assert.throws(() => egressOf({ egressProxy: { address: 'p:1080' } }), /egressProxy/);
  assert.deepEqual(networkBodyOf({ allow_internet_access: false }), { internet_access: false });
  // What the client sends: each key and value URL-encoded, then the pairs as a query string.
  const sent = new URLSearchParams({ [encodeURIComponent('a b&c')]: encodeURIComponent('x=y'), k: 'v' }).toString();
  assert.deepEqual(metadataFilter(sent), [
    ['a b&c', 'x=y'],
    ['k', 'v'],
  ]);
  assert.deepEqual([...stateFilter(['running', 'paused'])].sort(), ['paused', 'running']);
  assert.deepEqual([...stateFilter('paused')], ['paused']);
  assert.deepEqual([...stateFilter(undefined)].sort(), ['paused', 'running']);
  assert.throws(() => stateFilter('killed'), /state must be/);
});
