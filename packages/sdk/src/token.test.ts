import { test } from 'node:test';
import assert from 'node:assert/strict';
import { REFRESH_MARGIN_MS, TokenManager } from './token.js';

test('refreshes when missing, when under a minute is left, and after invalidate()', async () => {
  let now = 1_000_000;
  let n = 0;
  const tm = new TokenManager(async () => ({ token: `t${++n}`, expiresAt: now + 10 * 60_000 }), () => now);
  assert.equal(await tm.get(), 't1');
  assert.equal(await tm.get(), 't1');
  now += 10 * 60_000 - REFRESH_MARGIN_MS - 1;
  assert.equal(await tm.get(), 't1', 'just over a minute left: keep');
  now += 2;
  assert.equal(await tm.get(), 't2', 'under a minute left: refresh');
  tm.invalidate();
  assert.equal(await tm.get(), 't3');
});

test('a token from create is used until close to expiry; no expiry means refresh only on invalidate', async () => {
  let n = 0;
  let now = Date.parse('2030-01-01T00:00:00Z');
  const tm = new TokenManager(async () => ({ token: `r${++n}`, expiresAt: NaN }), () => now);
  tm.set('created', '2030-01-01T01:00:00Z');
  assert.equal(await tm.get(), 'created');
  now += 3600_000 - REFRESH_MARGIN_MS + 1;
  assert.equal(await tm.get(), 'r1');
  assert.equal(await tm.get(), 'r1', 'unknown expiry is not refreshed on every call');
  tm.invalidate();
  assert.equal(await tm.get(), 'r2');
});

test('concurrent callers share one refresh; a failed refresh is not cached', async () => {
  let calls = 0;
  let fail = true;
  const tm = new TokenManager(async () => {
    calls++;
    await new Promise((r) => setTimeout(r, 10));
    if (fail) throw new Error('boom');
    return { token: 'ok', expiresAt: Date.now() + 3_600_000 };
  });
  const results = await Promise.allSettled([tm.get(), tm.get(), tm.get()]);
  assert.equal(calls, 1);
  assert.ok(results.every((r) => r.status === 'rejected'));
  fail = false;
  assert.deepEqual(await Promise.all([tm.get(), tm.get()]), ['ok', 'ok']);
  assert.equal(calls, 2);
});

test('a short-lived token is refreshed when half its lifetime is left, not before every call', async () => {
  let now = 0;
  let n = 0;
  const tm = new TokenManager(async () => ({ token: `s${++n}`, expiresAt: now + 10_000 }), () => now);
  assert.equal(await tm.get(), 's1');
  now += 4_000;
  assert.equal(await tm.get(), 's1');
  now += 1_001;
  assert.equal(await tm.get(), 's2');
});
