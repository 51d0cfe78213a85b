import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { connect } from 'node:net';
import WebSocket from 'ws';
import { api, agent, createSandbox, startServer, REPO_ROOT, type TestServer } from './harness.js';

let server: TestServer;

before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

function operator(args: string[]): string {
  return execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args], {
    env: server.env,
    encoding: 'utf8',
  });
}

/** Declares a `size`-byte JSON body and reads the answer. */
function hugePost(baseUrl: string, path: string, size: number): Promise<{ status: number; body: any }> {
  const url = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const sock = connect(Number(url.port), url.hostname);
    let data = '';
    sock.on('data', (c) => (data += c.toString('latin1')));
    sock.on('error', () => {});
    sock.on('close', () => {
      const m = /^HTTP\/1\.1 (\d+)/.exec(data);
      if (!m) return reject(new Error(`no HTTP answer: ${data.slice(0, 200)}`));
      const body = data.slice(data.indexOf('\r\n\r\n') + 4);
      resolve({ status: Number(m[1]), body: JSON.parse(body) });
    });
    sock.on('connect', () => {
      sock.write(`POST ${path} HTTP/1.1\r\nhost: x\r\nx-api-key: ${server.apiKey}\r\ncontent-type: application/json\r\ncontent-length: ${size}\r\nconnection: close\r\n\r\n`);
      // Only the start of the body: the server must refuse on the declared length alone, before
      // reading it (sending it all would race the server's close against our reading its answer).
      sock.write(Buffer.alloc(1024, 0x20));
    });
  });
}

function assertErrorShape(body: any, code: string): void {
  assert.equal(body.code, code, JSON.stringify(body));
  assert.equal(typeof body.error, 'string');
  assert.equal(typeof body.message, 'string');
  assert.equal(typeof body.request_id, 'string');
}

describe('authentication and authorization', () => {
  test('health needs no key; every response has X-Request-ID', async () => {
    const res = await api(server, 'GET', '/health', undefined, { 'x-api-key': '' });
    assert.equal(res.status, 200);
    assert.equal(res.body.status, 'ok');
    assert.ok(res.headers.get('x-request-id'));
  });

  test('missing, wrong and revoked keys are 401 AUTHENTICATION_ERROR', async () => {
    const missing = await api(server, 'GET', '/v1/sandboxes', undefined, { 'x-api-key': '' });
    assert.equal(missing.status, 401);
    assertErrorShape(missing.body, 'AUTHENTICATION_ERROR');
    assert.equal(missing.body.error, 'Unauthorized');
    const wrong = await api(server, 'GET', '/v1/sandboxes', undefined, { 'x-api-key': 'sbd_nope' });
    assert.equal(wrong.status, 401);
    const created = JSON.parse(operator(['keys', 'create', '--org', 'default', '--json']));
    const ok = await api({ baseUrl: server.baseUrl, apiKey: created.api_key }, 'GET', '/v1/sandboxes');
    assert.equal(ok.status, 200);
    operator(['keys', 'revoke', created.id]);
    const revoked = await api({ baseUrl: server.baseUrl, apiKey: created.api_key }, 'GET', '/v1/sandboxes');
    assert.equal(revoked.status, 401);
  });

  test('both header forms are accepted', async () => {
    const bearer = await api(server, 'GET', '/v1/templates', undefined, { 'x-api-key': '', authorization: `Bearer ${server.apiKey}` });
    assert.equal(bearer.status, 200);
    assert.ok(bearer.body.data.some((t: any) => t.name === 'base'));
  });

  test('a key without the scope gets 403 PERMISSION_DENIED', async () => {
    const ro = JSON.parse(operator(['keys', 'create', '--org', 'default', '--scopes', 'sandboxes:read', '--json']));
    const res = await api({ baseUrl: server.baseUrl, apiKey: ro.api_key }, 'POST', '/v1/sandboxes', { template_name: 'base' });
    assert.equal(res.status, 403);
    assertErrorShape(res.body, 'PERMISSION_DENIED');
    assert.equal(res.body.error, 'Forbidden');
    assert.equal((await api({ baseUrl: server.baseUrl, apiKey: ro.api_key }, 'GET', '/v1/sandboxes')).status, 200);
  });

  test("another organization's sandbox is 403 and never visible", async () => {
    const sb = await createSandbox(server, { timeout_seconds: 600 });
    const other = JSON.parse(operator(['keys', 'create', '--org', 'other-org', '--json']));
    const them = { baseUrl: server.baseUrl, apiKey: other.api_key };
    for (const [method, path] of [
      ['GET', `/v1/sandboxes/${sb.id}`],
      ['DELETE', `/v1/sandboxes/${sb.id}`],
      ['POST', `/v1/sandboxes/${sb.id}/pause`],
      ['POST', `/v1/sandboxes/${sb.id}/token/refresh`],
    ] as const) {
      const res = await api(them, method, path);
      assert.equal(res.status, 403, `${method} ${path}`);
      assert.ok(!JSON.stringify(res.body).includes(sb.authToken));
    }
    const list = await api(them, 'GET', '/v1/sandboxes');
    assert.equal(list.body.data.length, 0);
    // Their API key does not open our agent either.
    const viaKey = await api({ baseUrl: sb.publicHost, apiKey: other.api_key }, 'GET', '/health');
    assert.equal(viaKey.status, 403);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });
});

describe('bad input', () => {
  test('create without a template is 400 naming template_id/template_name', async () => {
    const res = await api(server, 'POST', '/v1/sandboxes', {});
    assert.equal(res.status, 400);
    assertErrorShape(res.body, 'VALIDATION_ERROR');
    assert.match(res.body.error, /template_id or template_name/);
  });
  test('env_vars the agent could never apply (a name with = or empty, a NUL in a value) are 400 at create', async () => {
    for (const [env_vars, named] of [
      [{ 'A=B': 'x' }, /"A=B"/],
      [{ '': 'x' }, /""/],
      [{ A: 'x\u0000y' }, /env_vars\/A/],
    ] as const) {
      const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', env_vars });
      assert.equal(res.status, 400, JSON.stringify(env_vars));
      assertErrorShape(res.body, 'VALIDATION_ERROR');
      assert.match(res.body.message, named);
    }
  });
  test('unknown template is 404 TEMPLATE_NOT_FOUND without the words "sandbox not found"', async () => {
    const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'no-such-template' });
    assert.equal(res.status, 404);
    assertErrorShape(res.body, 'TEMPLATE_NOT_FOUND');
    assert.ok(!/sandbox/i.test(res.body.message) || !/not found/i.test(res.body.message));
  });
  test('wrong types and out-of-range values are 400 naming the field', async () => {
    for (const [body, field] of [
      [{ template_name: 'base', timeout_seconds: 'soon' }, 'timeout_seconds'],
      [{ template_name: 'base', timeout_seconds: -5 }, 'timeout_seconds'],
      [{ template_name: 'base', internet_access: 'yes' }, 'internet_access'],
      [{ template_name: 'base', env_vars: { A: 1 } }, 'env_vars'],
      [{ template_name: 42 }, 'template_name'],
    ] as const) {
      const res = await api(server, 'POST', '/v1/sandboxes', body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.match(res.body.message, new RegExp(field), JSON.stringify(res.body));
    }
  });
  test('malformed JSON, huge bodies and a wrong content type are clear 4xx', async () => {
    const bad = await api(server, 'POST', '/v1/sandboxes', '{"template_name": ', { 'content-type': 'application/json' });
    assert.equal(bad.status, 400);
    assertErrorShape(bad.body, 'VALIDATION_ERROR');
    const huge = await hugePost(server.baseUrl, '/v1/sandboxes', 11 * 1024 * 1024);
    assert.equal(huge.status, 413);
    assert.equal(huge.body.code, 'PAYLOAD_TOO_LARGE');
    const xml = await api(server, 'POST', '/v1/sandboxes', '<x/>', { 'content-type': 'application/xml' });
    assert.equal(xml.status, 415);
  });
  test('unknown sandbox ids are 404 NOT_FOUND with the spec text; unknown routes 404', async () => {
    for (const [m, p] of [
      ['GET', '/v1/sandboxes/sbnope'],
      ['DELETE', '/v1/sandboxes/sbnope'],
      ['POST', '/v1/sandboxes/sbnope/pause'],
      ['PUT', '/v1/sandboxes/sbnope/timeout'],
    ] as const) {
      const res = await api(server, m, p, m === 'PUT' ? { timeout_seconds: 5 } : undefined);
      assert.equal(res.status, 404, `${m} ${p}`);
      assert.deepEqual([res.body.error, res.body.code], ['Sandbox not found', 'NOT_FOUND']);
    }
    const route = await api(server, 'GET', '/v1/nothing-here');
    assert.equal(route.status, 404);
    assert.equal(route.body.code, 'ROUTE_NOT_FOUND');
  });
  test('list rejects a forged cursor and a bad limit', async () => {
    assert.equal((await api(server, 'GET', '/v1/sandboxes?cursor=garbage')).status, 400);
    assert.equal((await api(server, 'GET', '/v1/sandboxes?limit=0')).status, 400);
    assert.equal((await api(server, 'GET', '/v1/sandboxes?limit=5000')).status, 400);
  });
});

describe('lifecycle', () => {
  test('create → get → agent → pause → resume → stop → start → delete', async () => {
    const sb = await createSandbox(server, { template_name: 'base', env_vars: { GREETING: 'hi' }, timeout_seconds: 600 });
    const c = sb.body;
    assert.equal(c.object, 'sandbox');
    assert.equal(c.status, 'running');
    assert.match(c.public_host, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(c.direct_url, c.public_host);
    assert.equal(c.template_name, 'base');
    assert.ok(c.auth_token && c.token_expires_at);
    assert.ok(Date.parse(c.token_expires_at) - Date.now() > 3600_000, 'long-lived token');
    assert.deepEqual(Object.keys(c.resources).sort(), ['disk_gb', 'disk_mb', 'memory_mb', 'vcpu']);
    assert.match(c.created_at, /Z$/);
    assert.ok(c.expires_at);

    const got = await api(server, 'GET', `/v1/sandboxes/${sb.id}`);
    assert.equal(got.status, 200);
    assert.equal(got.body.public_host, c.public_host);
    assert.equal(got.body.auth_token, undefined);
    assert.equal(got.body.token_expires_at, undefined);

    // The agent is answering by the time create returned.
    const health = await agent(sb, 'GET', '/health');
    assert.equal(health.status, 200);
    assert.equal(health.body.status, 'healthy');
    const info = await agent(sb, 'GET', '/info');
    assert.equal(info.body.sandbox_id, sb.id);

    const paused = await api(server, 'POST', `/v1/sandboxes/${sb.id}/pause`, undefined, { 'content-type': 'application/json' });
    assert.equal(paused.status, 200);
    assert.deepEqual([paused.body.id, paused.body.status], [sb.id, 'paused']);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).body.status, 'paused');
    const blocked = await agent(sb, 'GET', '/health');
    assert.equal(blocked.status, 409);
    assert.equal(blocked.body.code, 'SANDBOX_PAUSED');
    const again = await api(server, 'POST', `/v1/sandboxes/${sb.id}/pause`);
    assert.equal(again.status, 409);
    assert.equal(again.body.code, 'INVALID_STATE');
    assert.match(again.body.error, /paused/);

    const resumed = await api(server, 'POST', `/v1/sandboxes/${sb.id}/resume`);
    assert.deepEqual([resumed.status, resumed.body.status], [200, 'running']);
    assert.equal((await agent(sb, 'GET', '/health')).status, 200);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/resume`)).status, 409);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/start`)).status, 409);

    const stopped = await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`);
    assert.deepEqual([stopped.status, stopped.body.status], [200, 'stopped']);
    assert.equal((await agent(sb, 'GET', '/health')).body.code, 'SANDBOX_STOPPED');
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/pause`)).status, 409);
    const started = await api(server, 'POST', `/v1/sandboxes/${sb.id}/start`);
    assert.deepEqual([started.status, started.body.status], [200, 'running']);
    assert.equal((await agent(sb, 'GET', '/health')).status, 200);

    const del = await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    assert.deepEqual([del.status, del.body.status, del.body.id], [200, 'deleted', sb.id]);
    assert.ok(del.body.request_id);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).status, 404);
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 404);
    // Its public_host is gone with it.
    await assert.rejects(fetch(`${sb.publicHost}/health`, { headers: { authorization: `Bearer ${sb.authToken}` } }));
  });

  test('delete and stop end open WebSocket sessions instead of waiting for them', async () => {
    for (const action of ['DELETE', 'stop'] as const) {
      const sb = await createSandbox(server);
      const ws = new WebSocket(`${sb.publicHost.replace('http', 'ws')}/terminal`, { headers: { authorization: `Bearer ${sb.authToken}` } });
      await new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
      });
      const closed = new Promise((resolve) => ws.once('close', resolve));
      const t0 = Date.now();
      const res = action === 'DELETE' ? await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`) : await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`);
      assert.equal(res.status, 200);
      assert.ok(Date.now() - t0 < 5000, `${action} took ${Date.now() - t0} ms`);
      await closed;
      if (action === 'stop') await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });

  test('a paused sandbox can be stopped, and a stopped one deleted', async () => {
    const sb = await createSandbox(server);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/pause`)).status, 200);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`)).body.status, 'stopped');
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  });

  test('agent tokens: another sandbox, tampered, alg none, missing → 401; refresh keeps old ones valid', async () => {
    const a = await createSandbox(server);
    const b = await createSandbox(server);
    const cross = await agent({ publicHost: a.publicHost, authToken: b.authToken }, 'GET', '/health');
    assert.equal(cross.status, 401);
    const [h, p, s] = a.authToken.split('.');
    const claims = JSON.parse(Buffer.from(p!, 'base64url').toString());
    const forged = Buffer.from(JSON.stringify({ ...claims, sub: b.id })).toString('base64url');
    assert.equal((await agent({ publicHost: b.publicHost, authToken: `${h}.${forged}.${s}` }, 'GET', '/health')).status, 401);
    const none = Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url');
    assert.equal((await agent({ publicHost: a.publicHost, authToken: `${none}.${p}.` }, 'GET', '/health')).status, 401);
    const missing = await fetch(`${a.publicHost}/health`);
    assert.equal(missing.status, 401);
    assert.equal(((await missing.json()) as any).code, 'AUTHENTICATION_ERROR');

    const refreshed = await api(server, 'POST', `/v1/sandboxes/${a.id}/token/refresh`, undefined, { 'content-type': 'application/json' });
    assert.equal(refreshed.status, 200);
    assert.ok(refreshed.body.auth_token && refreshed.body.token_expires_at);
    assert.notEqual(refreshed.body.auth_token, a.authToken);
    assert.equal((await agent({ publicHost: a.publicHost, authToken: refreshed.body.auth_token }, 'GET', '/health')).status, 200);
    assert.equal((await agent(a, 'GET', '/health')).status, 200, 'earlier token still valid');
    await api(server, 'DELETE', `/v1/sandboxes/${a.id}`);
    await api(server, 'DELETE', `/v1/sandboxes/${b.id}`);
  });

  test('list: pagination with a cursor and filters', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await createSandbox(server)).id);
    await api(server, 'POST', `/v1/sandboxes/${ids[0]}/pause`);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await api(server, 'GET', `/v1/sandboxes?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      assert.equal(page.status, 200);
      assert.equal(page.body.object, 'list');
      assert.equal(page.body.url, '/v1/sandboxes');
      if (page.body.has_more) assert.ok(page.body.next_cursor);
      else assert.equal(page.body.next_cursor, null);
      seen.push(...page.body.data.map((s: any) => s.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    for (const id of ids) assert.ok(seen.includes(id));
    assert.equal(new Set(seen).size, seen.length, 'no duplicates across pages');
    const paused = await api(server, 'GET', '/v1/sandboxes?status=paused');
    assert.deepEqual(paused.body.data.map((s: any) => s.id), [ids[0]]);
    const byTemplate = await api(server, 'GET', '/v1/sandboxes?template=code-interpreter');
    assert.equal(byTemplate.body.data.length, 0);
    for (const id of ids) await api(server, 'DELETE', `/v1/sandboxes/${id}`);
  });

  test('timeout: PUT timeout, expiry deletes, GET answers 410 SANDBOX_EXPIRED', async () => {
    const sb = await createSandbox(server);
    const bad = await api(server, 'PUT', `/v1/sandboxes/${sb.id}/timeout`, { timeout_seconds: 0 });
    assert.equal(bad.status, 400);
    const set = await api(server, 'PUT', `/v1/sandboxes/${sb.id}/timeout`, { timeout_seconds: 1 });
    assert.equal(set.status, 200);
    assert.equal(set.body.timeout_seconds, 1);
    assert.ok(Date.parse(set.body.expires_at) <= Date.now() + 1500);
    const deadline = Date.now() + 10_000;
    let res;
    do {
      await new Promise((r) => setTimeout(r, 250));
      res = await api(server, 'GET', `/v1/sandboxes/${sb.id}`);
    } while (res.status === 200 && Date.now() < deadline);
    assert.equal(res.status, 410);
    assert.equal(res.body.code, 'SANDBOX_EXPIRED');
    assert.equal(res.body.id, sb.id);
    assert.ok(res.body.expires_at);
    const list = await api(server, 'GET', '/v1/sandboxes');
    assert.ok(!list.body.data.some((s: any) => s.id === sb.id));
    await assert.rejects(fetch(`${sb.publicHost}/health`));
  });

  test('templates: list with filters and get by name or id', async () => {
    const all = await api(server, 'GET', '/v1/templates');
    assert.equal(all.status, 200);
    const base = all.body.data.find((t: any) => t.name === 'base');
    for (const f of ['id', 'name', 'display_name', 'description', 'category', 'language', 'default_resources']) assert.ok(f in base, f);
    assert.equal(base.is_active, true);
    const py = await api(server, 'GET', '/v1/templates?language=python');
    assert.ok(py.body.data.every((t: any) => t.language === 'python'));
    assert.ok(py.body.data.some((t: any) => t.name === 'code-interpreter'));
    const cat = await api(server, 'GET', '/v1/templates?category=general');
    assert.deepEqual(cat.body.data.map((t: any) => t.name), ['base']);
    const byName = await api(server, 'GET', '/v1/templates/base');
    const byId = await api(server, 'GET', `/v1/templates/${base.id}`);
    assert.equal(byName.body.id, base.id);
    assert.equal(byId.body.name, 'base');
    assert.equal((await api(server, 'GET', '/v1/templates/nope')).status, 404);
  });
});

describe('events', () => {
  /** Reads SSE events from `url` until `want` has been seen (or the deadline passes). */
  async function collect(url: string, want: string[], act: () => Promise<void>, timeoutMs = 15_000): Promise<string[]> {
    const ctl = new AbortController();
    const res = await fetch(url, { signal: ctl.signal });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    const seen: string[] = [];
    const timer = setTimeout(() => ctl.abort(), timeoutMs);
    const reader = res.body!.getReader();
    let buf = '';
    await act();
    try {
      while (!want.every((w) => seen.includes(w))) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += Buffer.from(value).toString('utf8');
        for (const m of buf.matchAll(/event: (\w+)\ndata: (.*)\n\n/g)) if (!seen.includes(m[1]!)) seen.push(m[1]!);
      }
    } catch {
      /* aborted at the deadline */
    } finally {
      clearTimeout(timer);
      ctl.abort();
    }
    return seen;
  }

  test('lifecycle events stream over SSE (events token as ?token=)', async () => {
    const sb = await createSandbox(server);
    const token = (await api(server, 'POST', '/v1/events/token', {})).body.token;
    const url = `${server.baseUrl}/v1/sandboxes/${sb.id}/events?token=${token}`;
    const seen = await collect(url, ['paused', 'resumed', 'deleted'], async () => {
      await api(server, 'POST', `/v1/sandboxes/${sb.id}/pause`);
      await api(server, 'POST', `/v1/sandboxes/${sb.id}/resume`);
      await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    });
    assert.deepEqual(seen, ['paused', 'resumed', 'deleted']);
    assert.equal((await fetch(`${server.baseUrl}/v1/events?token=wrong`)).status, 401);
  });

  test('an out-of-memory kill inside a sandbox is reported as oom_killed, and only the sandbox suffers', async () => {
    const sb = await createSandbox(server);
    const token = (await api(server, 'POST', '/v1/events/token', {})).body.token;
    const seen = await collect(`${server.baseUrl}/v1/events?token=${token}`, ['oom_killed'], async () => {
      // tail must hold the whole stream in memory: far past the template's 512 MB.
      const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', 'head -c 2000000000 /dev/zero | tail -n 1 >/dev/null; echo rc=$?'], timeout: 60 });
      assert.equal(r.status, 200);
    });
    assert.ok(seen.includes('oom_killed'), `events: ${seen.join(',')}`);
    assert.equal((await agent(sb, 'GET', '/health')).status, 200, 'the sandbox and its agent survive');
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });
});

describe('rate limiting', () => {
  test('creates past the per-organization limit get 429 with retry_after and Retry-After', async () => {
    const limited = await startServer({ env: { SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '2' }, templates: ['base'] });
    try {
      assert.equal((await api(limited, 'POST', '/v1/sandboxes', { template_name: 'base' })).status, 201);
      assert.equal((await api(limited, 'POST', '/v1/sandboxes', { template_name: 'base' })).status, 201);
      const res = await api(limited, 'POST', '/v1/sandboxes', { template_name: 'base' });
      assert.equal(res.status, 429);
      assert.deepEqual([res.body.error, res.body.code], ['Rate limit exceeded', 'RATE_LIMIT_EXCEEDED']);
      assert.ok(Number.isInteger(res.body.retry_after) && res.body.retry_after > 0);
      assert.equal(res.headers.get('retry-after'), String(res.body.retry_after));
    } finally {
      await limited.stop();
    }
  });
});
