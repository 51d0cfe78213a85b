import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { api, createSandbox, startServer, REPO_ROOT, type CreatedSandbox, type TestServer } from './harness.js';

// Issue 8, item 13 (first bullet): API keys were accepted in ?token= on the events endpoints, so
// they ended up in proxy and access logs. Now ?token= takes only a short-lived events token, which
// is not a sandbox token (and the reverse), and a key in the URL is refused with a 401.

const TTL_S = 4;
let server: TestServer;
let orgB: { baseUrl: string; apiKey: string };
let sbA: CreatedSandbox;

function operator(args: string[]): any {
  return JSON.parse(execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args, '--json'], { env: server.env, encoding: 'utf8' }));
}

before(async () => {
  server = await startServer({ templates: ['base'], env: { SANDBOXD_EVENTS_TOKEN_TTL_SECONDS: String(TTL_S), SANDBOXD_WARM_POOL_SIZE: '0' } });
  orgB = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', 'events-b']).api_key };
  sbA = await createSandbox(server, { timeout_seconds: 600 });
});
after(async () => {
  // stop() deletes the default organization's sandboxes; B's are B's to delete.
  if (orgB) for (const s of (await api(orgB, 'GET', '/v1/sandboxes')).body?.data ?? []) await api(orgB, 'DELETE', `/v1/sandboxes/${s.id}`);
  await server?.stop();
});

/** An open SSE stream, collecting events. */
interface Stream {
  status: number;
  body: any;
  events: Array<{ event: string; data: any }>;
  waitFor(pred: (e: { event: string; data: any }) => boolean, timeoutMs?: number): Promise<void>;
  close(): void;
}

async function open(path: string, headers: Record<string, string> = {}): Promise<Stream> {
  const ctl = new AbortController();
  const res = await fetch(`${server.baseUrl}${path}`, { signal: ctl.signal, headers });
  const events: Stream['events'] = [];
  if (!res.headers.get('content-type')?.includes('text/event-stream')) {
    const body = await res.json();
    return { status: res.status, body, events, waitFor: async () => assert.fail('not a stream'), close: () => {} };
  }
  const waiters: Array<() => void> = [];
  void (async () => {
    let buf = '';
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += Buffer.from(chunk).toString('utf8');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const m = /^event: (\S+)\ndata: (.*)$/m.exec(block);
          if (m) events.push({ event: m[1]!, data: JSON.parse(m[2]!) });
          for (const w of waiters.splice(0)) w();
        }
      }
    } catch {
      /* closed */
    }
  })();
  return {
    status: res.status,
    body: undefined,
    events,
    async waitFor(pred, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      while (!events.some(pred)) {
        if (Date.now() > deadline) throw new Error(`no such event; got ${JSON.stringify(events)}`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 200);
        });
      }
    },
    close: () => ctl.abort(),
  };
}

async function eventsToken(org: { baseUrl: string; apiKey: string }, body?: Record<string, unknown>): Promise<string> {
  const res = await api(org, 'POST', '/v1/events/token', body);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.token;
}

function assert401(s: { status: number; body: any }, message: RegExp, what: string): void {
  assert.equal(s.status, 401, `${what}: ${JSON.stringify(s.body)}`);
  assert.match(s.body.code, /^(AUTHENTICATION_ERROR|TOKEN_EXPIRED)$/, what);
  assert.match(s.body.message, message, what);
}

describe('events endpoints: no API key in the URL, an events token instead', () => {
  test('an API key in ?token= is refused with a 401 saying what to send; in a header it still works', async () => {
    for (const path of ['/v1/events', `/v1/sandboxes/${sbA.id}/events`]) {
      const s = await open(`${path}?token=${server.apiKey}`);
      assert401(s, /not accepted in the URL.*X-API-Key.*POST \/v1\/events\/token/, path);
    }
    // Build logs took ?token= too: same rule.
    const logs = await api({ baseUrl: server.baseUrl, apiKey: '' }, 'GET', `/v1/templates/build/tpl_none/logs?token=${server.apiKey}`);
    assert401(logs, /not accepted in the URL.*X-API-Key/, 'build logs');
    const header = await open(`/v1/sandboxes/${sbA.id}/events`, { 'x-api-key': server.apiKey });
    assert.equal(header.status, 200);
    header.close();
  });

  test("an events token opens the organization's streams for a few minutes, and nothing else", async () => {
    const res = await fetch(`${server.baseUrl}/v1/events/token`, { method: 'POST', headers: { 'x-api-key': server.apiKey, 'content-type': 'application/json' } });
    const minted = (await res.json()) as any;
    assert.equal(res.status, 200, `a bodyless POST is accepted: ${JSON.stringify(minted)}`);
    assert.equal(minted.sandbox_id, null);
    assert.ok(Math.abs(Date.parse(minted.expires_at) - Date.now() - TTL_S * 1000) < 3000, minted.expires_at);
    const s = await open(`/v1/events?token=${minted.token}`);
    assert.equal(s.status, 200);
    try {
      await api(server, 'POST', `/v1/sandboxes/${sbA.id}/pause`);
      await s.waitFor((e) => e.event === 'paused' && e.data.id === sbA.id);
      await api(server, 'POST', `/v1/sandboxes/${sbA.id}/resume`);
      await s.waitFor((e) => e.event === 'resumed' && e.data.id === sbA.id);
    } finally {
      s.close();
    }
    // Not an API key, anywhere.
    assert401(await api({ baseUrl: server.baseUrl, apiKey: minted.token }, 'GET', '/v1/sandboxes'), /invalid or revoked API key/, 'as X-API-Key');
    assert401(await api({ baseUrl: server.baseUrl, apiKey: '' }, 'GET', '/v1/sandboxes', undefined, { authorization: `Bearer ${minted.token}` }), /API key/, 'as Bearer');
    assert401(await api({ baseUrl: server.baseUrl, apiKey: '' }, 'POST', '/v1/events/token', {}, { authorization: `Bearer ${minted.token}` }), /API key/, 'minting more');
    // Not a sandbox token: the gateway refuses it.
    for (const headers of [{ authorization: `Bearer ${minted.token}` }, { 'x-api-key': minted.token as string }] as Array<Record<string, string>>) {
      const r = await api({ baseUrl: sbA.publicHost, apiKey: '' }, 'POST', '/commands/run', { command: 'id' }, { 'x-api-key': '', ...headers });
      assert.equal(r.status, 401, `gateway with ${Object.keys(headers)[0]}: ${JSON.stringify(r.body)}`);
    }
  });

  test('a sandbox auth_token does not open the events streams', async () => {
    for (const path of ['/v1/events', `/v1/sandboxes/${sbA.id}/events`]) {
      assert401(await open(`${path}?token=${sbA.authToken}`), /sandbox auth_token does not open the events streams/, path);
    }
  });

  test("a token limited to one sandbox opens that sandbox's stream only; another organization gets nothing of A's", async () => {
    const other = await createSandbox(server, { timeout_seconds: 600 });
    const only = await eventsToken(server, { sandbox_id: sbA.id });
    const ok = await open(`/v1/sandboxes/${sbA.id}/events?token=${only}`);
    assert.equal(ok.status, 200);
    ok.close();
    for (const path of [`/v1/sandboxes/${other.id}/events`, '/v1/events']) {
      const s = await open(`${path}?token=${only}`);
      assert.equal(s.status, 403, `${path}: ${JSON.stringify(s.body)}`);
      assert.match(s.body.message, new RegExp(`for sandbox ${sbA.id} only`), path);
    }
    // Organization B: no token for A's sandbox, no A's sandbox stream, and none of A's events.
    const denied = await api(orgB, 'POST', '/v1/events/token', { sandbox_id: sbA.id });
    assert.equal(denied.status, 403, JSON.stringify(denied.body));
    const bToken = await eventsToken(orgB);
    const bOnA = await open(`/v1/sandboxes/${sbA.id}/events?token=${bToken}`);
    assert.equal(bOnA.status, 403);
    const bAll = await open(`/v1/events?token=${bToken}`);
    try {
      await api(server, 'POST', `/v1/sandboxes/${other.id}/pause`);
      const mine = await createSandbox(orgB, { timeout_seconds: 600 });
      await bAll.waitFor((e) => e.data.id === mine.id);
      assert.deepEqual(
        bAll.events.filter((e) => e.data.id !== mine.id),
        [],
        "B's stream shows only B's sandboxes",
      );
    } finally {
      bAll.close();
    }
  });

  test('an expired, a tampered, or a revoked key\'s events token is refused', async () => {
    const key = operator(['keys', 'create', '--org', 'default']);
    const t = await eventsToken({ baseUrl: server.baseUrl, apiKey: key.api_key });
    const [h, p, sig] = t.split('.');
    const claims = JSON.parse(Buffer.from(p!, 'base64url').toString());
    const widened = Buffer.from(JSON.stringify({ ...claims, exp: claims.exp + 86_400 })).toString('base64url');
    assert401(await open(`/v1/events?token=${h}.${widened}.${sig}`), /invalid events token/, 'tampered');
    const s = await open(`/v1/events?token=${t}`);
    assert.equal(s.status, 200);
    s.close();
    operator(['keys', 'revoke', key.id]);
    assert401(await open(`/v1/events?token=${t}`), /revoked/, 'revoked key');
    const fresh = await eventsToken(server);
    await new Promise((r) => setTimeout(r, (TTL_S + 1.5) * 1000));
    const expired = await open(`/v1/events?token=${fresh}`);
    assert401(expired, /events token expired/, 'expired');
    assert.equal(expired.body.code, 'TOKEN_EXPIRED');
    assert.equal((await fetch(`${server.baseUrl}/health`)).status, 200);
  });
});
