import { test, before, after, afterEach, describe } from 'node:test';
import assert from 'node:assert/strict';
import { agent, api, crunContainers, startServer, type TestServer } from './harness.js';

/**
 * The warm pool through a real daemon: a burst of concurrent creates (each followed by one command)
 * all succeed and are served in the order they arrived, the pool grows with the demand and shrinks
 * back to its floor once it stops, and a create whose client goes away while it waits leaves
 * nothing behind. Short horizon and shrink delay, so that all of it fits in well under a minute.
 */

const FLOOR = 2;
const BURST = 20;

let server: TestServer;
/** Sandboxes a test made and has not deleted yet (deleted after it, whatever happened). */
const made: string[] = [];

before(async () => {
  server = await startServer({
    templates: ['base'],
    env: {
      SANDBOXD_WARM_POOL_SIZE: String(FLOOR),
      // 20 creates in under a second: rate ≈ 2/s (time constant 10 s) → target ⌈2 × 3⌉ = 6.
      SANDBOXD_WARM_POOL_HORIZON_SECONDS: '3',
      SANDBOXD_WARM_POOL_SHRINK_AFTER_SECONDS: '2',
      SANDBOXD_BOOT_CONCURRENCY: '4',
      SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '1000',
    },
  });
});

after(async () => {
  await server?.stop();
});

function containers(): string[] {
  return crunContainers(server.dataDir);
}

async function until<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, timeoutMs = 60_000, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

async function deleteAll(ids: string[]): Promise<void> {
  for (const id of ids) {
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${id}`)).status, 200);
    const i = made.indexOf(id);
    if (i >= 0) made.splice(i, 1);
  }
}

describe('warm pool', { timeout: 180_000 }, () => {
  afterEach(async () => {
    for (const id of made.splice(0)) await api(server, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
  });

  test('a burst of 20 creates + one command each: all succeed, in arrival order; the pool grows with the demand and shrinks back to its floor', async () => {
    // The key is asked for once: the pool then holds its floor.
    const first = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false });
    assert.equal(first.status, 201, JSON.stringify(first.body));
    await deleteAll([first.body.id]);
    await until('the pool to hold its floor', () => (containers().length === FLOOR ? true : undefined));

    // Each create is sent once the one before it was admitted (the organization's count of
    // sandboxes went up), so the order they reach the pool is the order they were sent; they still
    // all wait together, for the boots take far longer than the admissions.
    const t0 = Date.now();
    const used = async () => (await api(server, 'GET', '/v1/account/limits')).body.concurrent_sandboxes.used as number;
    const pending: Array<Promise<{ i: number; id: string; createdAt: string; stdout: string; exit: number }>> = [];
    for (let i = 0; i < BURST; i++) {
      pending.push(
        (async () => {
          const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false, env_vars: { BURST_INDEX: String(i) } });
          assert.equal(res.status, 201, `create ${i}: ${JSON.stringify(res.body)}`);
          made.push(res.body.id);
          const sb = { publicHost: res.body.public_host as string, authToken: res.body.auth_token as string };
          const cmd = await agent(sb, 'POST', '/commands/run', { command: 'echo "$BURST_INDEX $(hostname)"' });
          assert.equal(cmd.status, 200, JSON.stringify(cmd.body));
          return { i, id: res.body.id as string, createdAt: res.body.created_at as string, stdout: cmd.body.stdout as string, exit: cmd.body.exit_code as number };
        })(),
      );
      await until(`create ${i} to be admitted`, async () => ((await used()) > i ? true : undefined), 30_000);
    }
    const results = await Promise.all(pending);
    const elapsedMs = Date.now() - t0;
    assert.equal(new Set(results.map((r) => r.id)).size, BURST, 'a sandbox each');
    for (const r of results) {
      assert.equal(r.exit, 0);
      // Its own env_vars, in its own sandbox (hostname sandbox-<id chars 2..10>).
      assert.equal(r.stdout.trim(), `${r.i} sandbox-${r.id.slice(2, 10)}`);
    }
    // Served in arrival order: a sandbox is a create's from the moment it is handed to it (created_at).
    const handedAt = results.map((r) => Date.parse(r.createdAt));
    for (let i = 1; i < BURST; i++) {
      assert.ok(handedAt[i]! >= handedAt[i - 1]!, `create ${i} was served at ${results[i]!.createdAt}, before create ${i - 1} (${results[i - 1]!.createdAt})`);
    }
    assert.ok(elapsedMs < 60_000, `the burst took ${elapsedMs} ms`);
    const listed = await api(server, 'GET', '/v1/sandboxes?limit=1000');
    assert.equal(listed.body.data.length, BURST);
    assert.equal((await api(server, 'GET', '/v1/account/limits')).body.concurrent_sandboxes.used, BURST, 'no placeholder left counting');

    // The pool grew past its floor for the demand it saw, then shrinks back once demand stops.
    await deleteAll(results.map((r) => r.id));
    let most = 0;
    const shrunkAfterMs = await until(
      'the pool to shrink back to its floor',
      () => {
        const n = containers().length;
        most = Math.max(most, n);
        return n === FLOOR && most > FLOOR ? Date.now() - t0 : undefined;
      },
      90_000,
    );
    // How far it grows depends on how fast boots go (target 6 here; a busy machine refills slower
    // while the demand estimate decays): past the floor is what the wait above requires.
    assert.ok(most > FLOOR, `the pool held at most ${most} ready sandboxes after the burst`);
    console.log(`# the pool held up to ${most} ready sandboxes after the burst (target 6, floor ${FLOOR})`);
    assert.ok(shrunkAfterMs < 90_000, `back to the floor after ${shrunkAfterMs} ms`);
  });

  test('a create whose client goes away while it waits is abandoned: its admission is undone, nothing is left behind', async () => {
    await until('the pool to hold its floor', () => (containers().length === FLOOR ? true : undefined), 90_000);
    const used = async () => (await api(server, 'GET', '/v1/account/limits')).body.concurrent_sandboxes.used as number;
    // Thirty creates take the two ready sandboxes and the four boot slots for seven rounds of boots;
    // the next one waits behind them (its client goes away long before its turn: boots got fast
    // enough that it was sometimes served before the abort when only ten were ahead of it).
    const BUSY = 30;
    const busy = Array.from({ length: BUSY }, () => api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false }));
    await until('the busy creates to be admitted', async () => ((await used()) === BUSY ? true : undefined), 30_000, 20);
    const gone = new AbortController();
    const abandoned = fetch(`${server.baseUrl}/v1/sandboxes`, {
      method: 'POST',
      headers: { 'x-api-key': server.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ template_name: 'base', internet_access: false }),
      signal: gone.signal,
    });
    const rejected = assert.rejects(abandoned, /abort/i);
    // Admitted (it counts for the organization) and waiting: its client goes away.
    await until('the last create to be admitted', async () => ((await used()) === BUSY + 1 ? true : undefined), 30_000, 20);
    gone.abort();
    await rejected;
    const served = await Promise.all(busy);
    made.push(...served.filter((r) => r.status === 201).map((r) => r.body.id as string));
    for (const r of served) assert.equal(r.status, 201, JSON.stringify(r.body));

    // The abandoned create holds nothing: the organization has the ones it was handed.
    const settled = await until('the abandoned create to be undone', async () => ((await used()) === BUSY ? true : undefined), 30_000);
    assert.equal(settled, true);
    const listed = (await api(server, 'GET', '/v1/sandboxes?limit=1000')).body.data as Array<{ id: string }>;
    for (const sb of listed) if (!made.includes(sb.id)) made.push(sb.id);
    assert.deepEqual(listed.map((sb) => sb.id).sort(), served.map((r) => r.body.id as string).sort());
    await deleteAll(listed.map((sb) => sb.id));
    // Every other container is the pool's (the boot the abandoned create started went to it), and it
    // goes back to its floor.
    await until('the pool to shrink back to its floor', () => (containers().length === FLOOR ? true : undefined), 90_000);
  });
});
