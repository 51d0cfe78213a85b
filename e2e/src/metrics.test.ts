import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { agent, api, createSandbox, freePort, startServer, REPO_ROOT, type TestServer } from './harness.js';

// Issue 14, item 1: Prometheus metrics of the daemon, and each sandbox's figures on their own.

let server: TestServer;

function operator(args: string[]): any {
  return JSON.parse(execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args, '--json'], { env: server.env, encoding: 'utf8' }));
}

async function scrape(baseUrl: string, apiKey?: string): Promise<{ status: number; text: string; type: string | null }> {
  const r = await fetch(`${baseUrl}/metrics`, { headers: apiKey ? { 'x-api-key': apiKey } : {} });
  return { status: r.status, text: await r.text(), type: r.headers.get('content-type') };
}

/** The value of one series (name and exact label set), or undefined. */
function value(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

before(async () => {
  server = await startServer({ templates: ['base'] });
});
after(async () => {
  await server?.stop();
});

describe('GET /metrics', () => {
  test('needs a key with the metrics:read scope (or admin); answers the Prometheus text format', async () => {
    assert.equal((await scrape(server.baseUrl)).status, 401);
    const sandboxesOnly = operator(['keys', 'create', '--org', 'default', '--scopes', 'sandboxes:read,sandboxes:write']).api_key as string;
    assert.equal((await scrape(server.baseUrl, sandboxesOnly)).status, 403);
    const reader = operator(['keys', 'create', '--org', 'default', '--scopes', 'metrics:read']).api_key as string;
    const r = await scrape(server.baseUrl, reader);
    assert.equal(r.status, 200);
    assert.match(r.type ?? '', /^text\/plain; version=0\.0\.4/);
    for (const name of ['sandboxd_process_cpu_user_seconds_total', 'sandboxd_nodejs_heap_size_used_bytes', 'sandboxd_node_cpu_cores', 'sandboxd_node_memory_bytes', 'sandboxd_node_disk_bytes']) {
      assert.match(r.text, new RegExp(`^${name}`, 'm'), name);
    }
    assert.ok((value(r.text, 'sandboxd_node_memory_bytes{kind="total"}') ?? 0) > 0);
    assert.ok((value(r.text, 'sandboxd_node_disk_bytes{kind="total"}') ?? 0) > 0);
    assert.equal((await scrape(server.baseUrl, server.apiKey)).status, 200, 'an admin key may');
  });

  test('requests by route pattern, creates by template and source, sandboxes by state, pool, agent round trips, errors and refusals', async () => {
    const sb = await createSandbox(server, { template_name: 'base', timeout_seconds: 600 });
    assert.equal((await agent(sb, 'POST', '/commands/run', { command: 'true' })).status, 200);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).status, 200);
    assert.equal((await api(server, 'GET', '/v1/sandboxes/sbnosuchsandbox')).status, 404);
    const r = (await scrape(server.baseUrl, server.apiKey)).text;
    assert.ok((value(r, 'sandboxd_http_requests_total{route="/v1/sandboxes/:id",method="GET",status="200"}') ?? 0) >= 1, 'a route pattern, not the id');
    assert.doesNotMatch(r, new RegExp(`route="[^"]*${sb.id}`), 'no sandbox id in any label');
    assert.ok((value(r, 'sandboxd_http_requests_total{route="/v1/sandboxes",method="POST",status="201"}') ?? value(r, 'sandboxd_http_requests_total{route="/v1/sandboxes",method="POST",status="200"}') ?? 0) >= 1);
    assert.match(r, /^sandboxd_http_request_duration_seconds_bucket\{le="0\.005",route="\/v1\/sandboxes\/:id",method="GET"\} \d+/m);
    const creates = r.split('\n').filter((l) => l.startsWith('sandboxd_sandbox_creates_total{template="base"'));
    assert.equal(creates.reduce((n, l) => n + Number(l.split(' ')[1]), 0), 1, creates.join('\n'));
    assert.match(creates[0]!, /source="(warm_pool|cold)"/);
    assert.ok((value(r, 'sandboxd_sandbox_create_duration_seconds_count{source="cold"}') ?? 0) + (value(r, 'sandboxd_sandbox_create_duration_seconds_count{source="warm_pool"}') ?? 0) >= 1);
    assert.equal(value(r, 'sandboxd_sandboxes{state="running"}'), 1);
    assert.ok(value(r, 'sandboxd_warm_pool_sandboxes{state="ready"}') !== undefined);
    assert.equal((value(r, 'sandboxd_warm_pool_acquires_total{result="hit"}') ?? 0) + (value(r, 'sandboxd_warm_pool_acquires_total{result="miss"}') ?? 0), 1);
    assert.ok((value(r, 'sandboxd_agent_request_duration_seconds_count{outcome="ok"}') ?? 0) >= 1, 'the gateway round trip');
    assert.ok((value(r, 'sandboxd_errors_total{code="NOT_FOUND"}') ?? 0) >= 1);
    assert.ok((value(r, 'sandboxd_node_memory_bytes{kind="committed"}') ?? 0) > 0, 'the running sandbox holds its memory limit');

    // The series do not grow with sandboxes: a second one changes values, not the set of series.
    // The daemon's own process figures (handles by type, say) come and go with what is in flight; the
    // series that could grow with sandboxes are the service's.
    const series = (t: string) =>
      new Set(
        t
          .split('\n')
          .filter((l) => l.startsWith('sandboxd_') && !/^sandboxd_(http_|nodejs_|process_)/.test(l))
          .map((l) => l.split(' ')[0]),
      );
    const before = series((await scrape(server.baseUrl, server.apiKey)).text);
    const sb2 = await createSandbox(server, { template_name: 'base', timeout_seconds: 600 });
    await agent(sb2, 'POST', '/commands/run', { command: 'true' });
    const afterScrape = (await scrape(server.baseUrl, server.apiKey)).text;
    const grown = [...series(afterScrape)].filter((s) => !before.has(s) && !/source=|result=|outcome=|_bucket|_sum|_count|state=/.test(s));
    assert.deepEqual(grown, [], 'no new series for a new sandbox');
    assert.equal(value(afterScrape, 'sandboxd_sandboxes{state="running"}'), 2);

    // Rate limits are counted by their code.
    const limited = await startServer({ templates: ['base'], env: { SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '1' } });
    try {
      await createSandbox(limited, { template_name: 'base', timeout_seconds: 600 });
      assert.equal((await api(limited, 'POST', '/v1/sandboxes', { template_name: 'base' })).status, 429);
      assert.equal(value((await scrape(limited.baseUrl, limited.apiKey)).text, 'sandboxd_rate_limited_total{code="RATE_LIMIT_EXCEEDED"}'), 1);
    } finally {
      await limited.stop();
    }
    for (const s of [sb, sb2]) await api(server, 'DELETE', `/v1/sandboxes/${s.id}`);
  });

  test('SANDBOXD_METRICS_LISTEN serves them on an address of their own, without credentials, and not on the API', async () => {
    const port = await freePort();
    const own = await startServer({ templates: ['base'], env: { SANDBOXD_METRICS_LISTEN: `127.0.0.1:${port}` } });
    try {
      const r = await scrape(`http://127.0.0.1:${port}`);
      assert.equal(r.status, 200);
      assert.match(r.text, /^sandboxd_node_cpu_cores \d+/m);
      assert.equal((await fetch(`http://127.0.0.1:${port}/v1/sandboxes`)).status, 404, 'nothing else there');
      assert.equal((await scrape(own.baseUrl, own.apiKey)).status, 404, 'off the public API');
    } finally {
      await own.stop();
    }
  });
});

describe('GET /v1/sandboxes/{id}/metrics', () => {
  test("one sandbox's cpu, memory, disk, network, pids and OOM kills; others' sandboxes are not yours", async () => {
    const sb = await createSandbox(server, { template_name: 'base', timeout_seconds: 600, internet_access: true });
    const first = await api(server, 'GET', `/v1/sandboxes/${sb.id}/metrics`);
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const m = first.body;
    assert.equal(m.sandbox_id, sb.id);
    assert.equal(m.status, 'running');
    assert.ok(m.memory.used_bytes > 0 && m.memory.limit_bytes >= m.memory.used_bytes, JSON.stringify(m.memory));
    assert.ok(m.disk.total_bytes > 0 && m.disk.used_bytes > 0, JSON.stringify(m.disk));
    assert.ok(m.pids >= 2, 'init and the agent');
    assert.equal(m.oom_kills, 0);
    // Work and traffic show: CPU time, and bytes sent out of its veth (to a blocked address: they
    // still leave the sandbox).
    const busy = await agent(sb, 'POST', '/commands/run', { command: 'bash', args: ['-c', 'for i in $(seq 1 200000); do :; done; for i in $(seq 1 20); do echo hello > /dev/udp/192.0.2.1/9; done; true'] });
    assert.equal(busy.status, 200, JSON.stringify(busy.body));
    const later = (await api(server, 'GET', `/v1/sandboxes/${sb.id}/metrics`)).body;
    assert.ok(later.cpu.usage_seconds > m.cpu.usage_seconds, `${later.cpu.usage_seconds} > ${m.cpu.usage_seconds}`);
    assert.ok(later.network.tx_bytes >= m.network.tx_bytes + 20 * 6, `tx ${m.network.tx_bytes} → ${later.network.tx_bytes}`);

    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`)).status, 200);
    const stopped = (await api(server, 'GET', `/v1/sandboxes/${sb.id}/metrics`)).body;
    assert.equal(stopped.status, 'stopped');
    assert.ok(stopped.disk.total_bytes > 0, 'a stopped sandbox still has its disk');

    operator(['orgs', 'create', 'metrics-other']);
    const other = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', 'metrics-other']).api_key as string };
    assert.equal((await api(other, 'GET', `/v1/sandboxes/${sb.id}/metrics`)).status, 403);
    assert.equal((await api(server, 'GET', '/v1/sandboxes/sbnosuchsandbox/metrics')).status, 404);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test("a sandbox's figures as a live stream: one sample per interval while watched, an end when the sandbox goes", async () => {
    const sb = await createSandbox(server, { template_name: 'base', timeout_seconds: 600 });
    const token = (await api(server, 'POST', '/v1/events/token', { sandbox_id: sb.id })).body.token as string;
    const url = (q: string) => `${server.baseUrl}/v1/sandboxes/${sb.id}/metrics/stream?${q}`;
    const res = await fetch(url(`interval=1&token=${encodeURIComponent(token)}`));
    assert.equal(res.status, 200);
    assert.match(String(res.headers.get('content-type')), /text\/event-stream/);
    const reader = res.body!.getReader();
    const events: Array<{ event: string; data: any }> = [];
    let text = '';
    const readUntil = async (done: () => boolean, ms: number) => {
      const deadline = Date.now() + ms;
      while (!done() && Date.now() < deadline) {
        const chunk = await Promise.race([reader.read(), new Promise<{ done: true; value: undefined }>((r) => setTimeout(() => r({ done: true, value: undefined }), deadline - Date.now()))]);
        if (chunk.done) break;
        text += Buffer.from(chunk.value).toString();
        for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
          const block = text.slice(0, end);
          text = text.slice(end + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (event && data) events.push({ event, data: JSON.parse(data) });
        }
      }
    };
    const started = Date.now();
    await readUntil(() => events.length >= 3, 10_000);
    assert.equal(events.length, 3, JSON.stringify(events));
    assert.ok(Date.now() - started >= 1800, 'one sample per interval (1 s), not a burst');
    for (const e of events) {
      assert.equal(e.event, 'metrics');
      assert.equal(e.data.sandbox_id, sb.id);
      assert.ok(e.data.memory.used_bytes > 0);
    }
    assert.ok(Date.parse(events[2]!.data.timestamp) > Date.parse(events[0]!.data.timestamp));

    // Who may open it: the sandbox's token or the org's; not another sandbox's, not an API key in the URL.
    const other = await createSandbox(server, { template_name: 'base', timeout_seconds: 600 });
    const otherToken = (await api(server, 'POST', '/v1/events/token', { sandbox_id: other.id })).body.token as string;
    const denied = await fetch(url(`token=${encodeURIComponent(otherToken)}`));
    assert.equal(denied.status, 403);
    await denied.body?.cancel();
    const keyInUrl = await fetch(url(`token=${encodeURIComponent(server.apiKey)}`));
    assert.equal(keyInUrl.status, 401);
    await keyInUrl.body?.cancel();
    const tooFast = await fetch(url(`interval=0&token=${encodeURIComponent(token)}`));
    assert.equal(tooFast.status, 400);
    await tooFast.body?.cancel();
    const missing = await fetch(`${server.baseUrl}/v1/sandboxes/sbnosuchsandbox/metrics/stream`, { headers: { 'x-api-key': server.apiKey } });
    assert.equal(missing.status, 404);
    await missing.body?.cancel();

    // The sandbox goes: the stream says so and ends.
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    await readUntil(() => events.some((e) => e.event === 'end'), 10_000);
    const end = events.find((e) => e.event === 'end');
    assert.ok(end, JSON.stringify(events.slice(-2)));
    assert.equal(end.data.id, sb.id);
    assert.equal((await reader.read()).done, true, 'the stream is closed');
    await api(server, 'DELETE', `/v1/sandboxes/${other.id}`);
  });
});

describe('GET /v1/sandboxes/{id}/ports', () => {
  test("what listens inside, on loopback or every address, from the kernel's tables; nothing when stopped; not another organization's", async () => {
    const sb = await createSandbox(server, { template_name: 'base', timeout_seconds: 600 });
    assert.deepEqual((await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports`)).body.data.filter((p: { port: number }) => p.port === 3000 || p.port === 8000), []);
    const listen = await agent(sb, 'POST', '/execute', {
      language: 'javascript',
      code: "const net = require('net'); globalThis.inside = net.createServer().listen(3000, '127.0.0.1'); globalThis.open = net.createServer().listen(8000); 'listening'",
    });
    assert.equal(listen.status, 200, JSON.stringify(listen.body));
    let ports: Array<{ port: number; addresses: string[]; loopback_only: boolean }> = [];
    for (let i = 0; i < 50 && ports.filter((p) => p.port === 3000 || p.port === 8000).length < 2; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const r = await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      ports = r.body.data;
    }
    assert.deepEqual(ports.find((p) => p.port === 3000), { port: 3000, addresses: ['127.0.0.1'], loopback_only: true });
    assert.deepEqual(ports.find((p) => p.port === 8000), { port: 8000, addresses: ['::'], loopback_only: false });
    operator(['orgs', 'create', 'ports-other']);
    const other = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', 'ports-other']).api_key as string };
    assert.equal((await api(other, 'GET', `/v1/sandboxes/${sb.id}/ports`)).status, 403);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`)).status, 200);
    assert.deepEqual((await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports`)).body.data, []);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });
});

describe('streams end when the key that opened them is revoked', () => {
  test('the metrics stream at its next sample, the events stream at its next ping (15 s)', { timeout: 60_000 }, async () => {
    const key = operator(['keys', 'create', '--org', 'default', '--scopes', 'sandboxes:read,sandboxes:write']);
    const holder = { baseUrl: server.baseUrl, apiKey: key.api_key as string };
    const sb = await createSandbox(holder, { template_name: 'base', timeout_seconds: 600 });
    const open = async (path: string) => {
      const res = await fetch(`${server.baseUrl}${path}`, { headers: { 'x-api-key': holder.apiKey } });
      assert.equal(res.status, 200, path);
      let text = '';
      const done = (async () => {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) text += Buffer.from(chunk).toString();
        return text;
      })();
      return { done, seen: () => text };
    };
    const metrics = await open(`/v1/sandboxes/${sb.id}/metrics/stream?interval=1`);
    const events = await open('/v1/events');
    await new Promise((r) => setTimeout(r, 1500));
    assert.match(metrics.seen(), /event: metrics/);
    assert.equal((await api(server, 'DELETE', `/v1/admin/keys/${key.id}`)).status, 200);
    const revokedAt = Date.now();
    assert.match(await metrics.done, /event: end\ndata: \{[^}]*"reason":"AUTHENTICATION_ERROR"/);
    assert.ok(Date.now() - revokedAt < 5000, 'the metrics stream ended at its next sample');
    assert.match(await events.done, /event: end\ndata: \{"reason":"AUTHENTICATION_ERROR"\}/);
    assert.ok(Date.now() - revokedAt < 20_000, 'the events stream ended at its next ping');
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });
});

describe('GET /v1/account', () => {
  test('says who the key is, and whether it may use the admin API', async () => {
    const me = await api(server, 'GET', '/v1/account');
    assert.equal(me.status, 200, JSON.stringify(me.body));
    assert.equal(me.body.organization.name, 'default');
    assert.equal(me.body.operator, true);
    assert.ok(me.body.key.scopes.includes('admin'));
    operator(['orgs', 'create', 'account-other']);
    const created = operator(['keys', 'create', '--org', 'account-other', '--scopes', 'templates:read']);
    const other = await api({ baseUrl: server.baseUrl, apiKey: created.api_key as string }, 'GET', '/v1/account');
    assert.equal(other.status, 200, 'any valid key may ask, whatever its scopes');
    assert.equal(other.body.organization.name, 'account-other');
    assert.deepEqual(other.body.key.scopes, ['templates:read']);
    assert.equal(other.body.operator, false);
    assert.equal((await api({ baseUrl: server.baseUrl, apiKey: 'sbd_nope' }, 'GET', '/v1/account')).status, 401);
  });
});
