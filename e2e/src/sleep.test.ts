import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { agent, api, createSandbox, startServer, type CreatedSandbox, type TestServer } from './harness.js';

// Issue 12, item 3: sandboxes that sleep. Paused when unused for their idle timeout, or by their
// deadline (on_timeout "pause", then kept for the retention time and deleted); woken by a request
// when they have auto_resume, once for all the requests that arrive together; each transition an
// event with its cause.

let server: TestServer;

/** The organization's event stream, read for the whole file. */
class Events {
  readonly seen: Array<{ kind: string; id: string; reason?: string; at: string }> = [];
  private abort = new AbortController();
  async open(): Promise<void> {
    this.abort = new AbortController();
    const res = await fetch(`${server.baseUrl}/v1/events`, { headers: { 'x-api-key': server.apiKey }, signal: this.abort.signal });
    assert.equal(res.status, 200);
    void (async () => {
      let text = '';
      const decoder = new TextDecoder();
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          text += decoder.decode(chunk, { stream: true });
          for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
            const block = text.slice(0, end);
            text = text.slice(end + 2);
            const kind = /^event: (.*)$/m.exec(block)?.[1];
            const data = /^data: (.*)$/m.exec(block)?.[1];
            if (kind && data) this.seen.push({ kind, ...(JSON.parse(data) as { id: string; reason?: string; at: string }) });
          }
        }
      } catch {
        // closed at the end
      }
    })();
  }
  of(id: string): Array<{ kind: string; reason?: string }> {
    return this.seen.filter((e) => e.id === id).map((e) => ({ kind: e.kind, ...(e.reason ? { reason: e.reason } : {}) }));
  }
  close(): void {
    this.abort.abort();
  }
}
const events = new Events();

async function until(what: string, check: () => Promise<boolean> | boolean, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const statusOf = async (id: string) => (await api(server, 'GET', `/v1/sandboxes/${id}`)).body.status as string;
/** Status without a lifecycle call about it (a GET of the sandbox is a use): from the list. */
const listedStatus = async (id: string) => ((await api(server, 'GET', '/v1/sandboxes?limit=1000')).body.data as Array<{ id: string; status: string }>).find((s) => s.id === id)?.status;

before(async () => {
  server = await startServer({ templates: ['base'], env: { SANDBOXD_SWEEP_INTERVAL_MS: '200', SANDBOXD_PAUSED_RETENTION_SECONDS: '5' } });
  await events.open();
});
after(async () => {
  events.close();
  await server?.stop();
});

describe('sandboxes that sleep', { timeout: 180_000 }, () => {
  test('the create options are checked, shown, and kept across a restart of the daemon', async () => {
    for (const bad of [{ on_timeout: 'sleep' }, { idle_timeout_seconds: 0 }, { idle_timeout_seconds: 'soon' }, { auto_resume: 'yes' }]) {
      const r = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', ...bad });
      assert.equal(r.status, 400, JSON.stringify(bad));
      assert.equal(r.body.code, 'VALIDATION_ERROR');
    }
    const plain = await createSandbox(server);
    assert.deepEqual([plain.body.on_timeout, plain.body.idle_timeout_seconds, plain.body.auto_resume], ['delete', null, false]);
    const sleepy = await createSandbox(server, { on_timeout: 'pause', idle_timeout_seconds: 3600, auto_resume: true });
    assert.deepEqual([sleepy.body.on_timeout, sleepy.body.idle_timeout_seconds, sleepy.body.auto_resume], ['pause', 3600, true]);
    events.close();
    await server.shutdown();
    await server.restart();
    const again = (await api(server, 'GET', `/v1/sandboxes/${sleepy.id}`)).body;
    assert.deepEqual([again.on_timeout, again.idle_timeout_seconds, again.auto_resume, again.status], ['pause', 3600, true, 'running']);
    await events.open();
    for (const s of [plain, sleepy]) await api(server, 'DELETE', `/v1/sandboxes/${s.id}`);
  });

  test('unused for its idle timeout, it is paused; calls, a request in flight and an open WebSocket keep it awake', async () => {
    const sb = await createSandbox(server, { idle_timeout_seconds: 2 });
    // Used every half second for 4 s: awake throughout.
    for (let i = 0; i < 8; i++) {
      assert.equal((await agent(sb, 'GET', '/health')).status, 200);
      await new Promise((r) => setTimeout(r, 500));
    }
    assert.equal(await listedStatus(sb.id), 'running');
    // One request that takes 4 s: still awake when it ends.
    const long = await agent(sb, 'POST', '/commands/run', { command: 'sleep', args: ['4'] });
    assert.equal(long.status, 200, JSON.stringify(long.body));
    assert.equal(await listedStatus(sb.id), 'running');
    // Then left alone: paused, with the cause.
    const left = Date.now();
    await until('the idle pause', async () => (await listedStatus(sb.id)) === 'paused');
    const slept = Date.now() - left;
    assert.ok(slept >= 1500 && slept < 6000, `paused ${slept} ms after the last use (idle timeout 2 s)`);
    assert.deepEqual(events.of(sb.id).filter((e) => e.kind === 'paused'), [{ kind: 'paused', reason: 'idle' }]);
    // Without auto_resume it stays asleep: a request is refused as before.
    const refused = await agent(sb, 'GET', '/health');
    assert.equal(refused.status, 409);
    assert.equal(refused.body.code, 'SANDBOX_PAUSED');
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test('auto_resume: a request to a sleeping sandbox wakes it and is served; its processes are still there', async () => {
    const sb = await createSandbox(server, { idle_timeout_seconds: 2, auto_resume: true });
    const started = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', 'sleep 600 > /dev/null 2>&1 & echo $! > /tmp/sleeper'] });
    assert.equal(started.status, 200, JSON.stringify(started.body));
    await until('the idle pause', async () => (await listedStatus(sb.id)) === 'paused');
    const woke = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', 'kill -0 "$(cat /tmp/sleeper)" && echo alive'] });
    assert.equal(woke.status, 200, JSON.stringify(woke.body));
    assert.equal(woke.body.stdout.trim(), 'alive');
    assert.equal(await listedStatus(sb.id), 'running');
    await until('the resumed event', () => events.of(sb.id).some((e) => e.kind === 'resumed'));
    assert.deepEqual(events.of(sb.id).filter((e) => e.kind !== 'created'), [
      { kind: 'paused', reason: 'idle' },
      { kind: 'resumed', reason: 'traffic' },
    ]);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test('concurrent requests to a sleeping sandbox wake it once, and all are served', async () => {
    const sb: CreatedSandbox = await createSandbox(server, { auto_resume: true });
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/pause`)).status, 200);
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => agent(sb, 'POST', '/commands/run', { command: 'echo', args: [`n${i}`] })));
    assert.deepEqual(
      answers.map((a) => [a.status, String(a.body.stdout).trim()]),
      answers.map((_, i) => [200, `n${i}`]),
    );
    await until('the resumed event', () => events.of(sb.id).some((e) => e.kind === 'resumed'));
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(events.of(sb.id).filter((e) => e.kind !== 'created'), [
      { kind: 'paused', reason: 'api' },
      { kind: 'resumed', reason: 'traffic' },
    ]);
    // A WebSocket to it wakes it too.
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/pause`)).status, 200);
    const { WebSocket } = await import('ws');
    const ws = new WebSocket(`${sb.publicHost.replace(/^http/, 'ws')}/terminal`, { headers: { authorization: `Bearer ${sb.authToken}` } });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    assert.equal(await statusOf(sb.id), 'running');
    ws.close();
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test('on_timeout "pause": the deadline pauses it; paused past the retention time, it is deleted with an event saying so', async () => {
    const sb = await createSandbox(server, { timeout_seconds: 2, on_timeout: 'pause' });
    await until('the timeout pause', async () => (await listedStatus(sb.id)) === 'paused');
    const paused = (await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).body;
    const keptFor = (Date.parse(paused.expires_at) - Date.now()) / 1000;
    assert.ok(keptFor > 3 && keptFor <= 5.5, `kept paused until ${paused.expires_at} (${keptFor} s; retention 5 s)`);
    // A new timeout while it sleeps is for after its wake-up: its retention stays.
    const set = await api(server, 'PUT', `/v1/sandboxes/${sb.id}/timeout`, { timeout_seconds: 600 });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.deepEqual([set.body.timeout_seconds, set.body.expires_at], [600, paused.expires_at]);
    await until('the retention delete', async () => (await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).status === 410, 15_000);
    const gone = await api(server, 'GET', `/v1/sandboxes/${sb.id}`);
    assert.equal(gone.body.code, 'SANDBOX_EXPIRED');
    assert.match(gone.body.message, /kept paused/);
    assert.deepEqual(events.of(sb.id).filter((e) => e.kind !== 'created'), [
      { kind: 'paused', reason: 'timeout' },
      { kind: 'deleted', reason: 'retention' },
    ]);

    // Woken before the retention ends (auto_resume), it runs with its timeout again. A request in
    // flight when its time is up is cut, not frozen until someone wakes it.
    const again = await createSandbox(server, { timeout_seconds: 3, on_timeout: 'pause', auto_resume: true });
    const t0 = Date.now();
    const cut = await agent(again, 'POST', '/commands/run', { command: 'sleep', args: ['30'] }).then(
      (r) => `answered ${r.status}`,
      (err: Error) => `cut: ${err.message}`,
    );
    const waited = Date.now() - t0;
    // Its time is up at 3 s (the sweep looks every 0.2 s); frozen, it would have lasted until the
    // retention delete (5 s later) cut it.
    assert.ok(waited < 5500, `the request in flight ended ${waited} ms after it began (${cut}), not when the sandbox woke or went`);
    await until('the timeout pause', async () => (await listedStatus(again.id)) === 'paused');
    // A key that may only read sandboxes does not wake one.
    const reader = await api(server, 'POST', '/v1/admin/keys', { org: 'default', name: 'sleep-reader', scopes: ['sandboxes:read'] });
    assert.equal(reader.status, 201, JSON.stringify(reader.body));
    const readOnly = await fetch(`${again.publicHost}/health`, { headers: { 'x-api-key': reader.body.secret } });
    assert.equal(readOnly.status, 409);
    await readOnly.body?.cancel();
    assert.equal(await listedStatus(again.id), 'paused');
    assert.equal((await agent(again, 'GET', '/health')).status, 200);
    const woke = (await api(server, 'GET', `/v1/sandboxes/${again.id}`)).body;
    assert.equal(woke.status, 'running');
    assert.ok(Date.parse(woke.expires_at) - Date.now() > 500, 'a new deadline from the wake-up');
    await api(server, 'DELETE', `/v1/sandboxes/${again.id}`);

    // The default is as ever: the deadline deletes.
    const plain = await createSandbox(server, { timeout_seconds: 1 });
    await until('the timeout delete', async () => (await api(server, 'GET', `/v1/sandboxes/${plain.id}`)).status === 410);
  });
});
