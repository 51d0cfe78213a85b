import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ServiceError } from '@sandboxd/protocol';
import { ApiShare } from './api-share.js';

test('ApiShare: a burst at once, then turns at the rate in order, a refusal with Retry-After past the longest wait, per organization', async () => {
  let now = 0;
  const share = new ApiShare({ rate: 100, burst: 2, maxWaitMs: 50, now: () => now });
  assert.equal(share.admit('a'), undefined);
  assert.equal(share.admit('a'), undefined);
  const waits: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    const turn = share.admit('a');
    assert.ok(turn instanceof Promise, `request ${i + 3} waits`);
    void turn.then(() => waits.push(performance.now() - t));
  }
  // 10 ms a turn: the sixth would wait 60 ms, past 50.
  assert.throws(() => share.admit('a'), (err: unknown) => err instanceof ServiceError && err.code === 'RATE_LIMIT_EXCEEDED' && err.headers?.['retry-after'] === '1');
  assert.equal(share.admit('b'), undefined, 'another organization has its own bucket');
  await new Promise((r) => setTimeout(r, 120));
  assert.equal(waits.length, 5);
  for (let i = 1; i < waits.length; i++) assert.ok(waits[i]! >= waits[i - 1]!, `in order: ${waits.join(',')}`);
  now += 1000;
  assert.equal(share.admit('a'), undefined, 'refilled after a pause');
  assert.equal(new ApiShare({ rate: 0, burst: 1, maxWaitMs: 0 }).admit('a'), undefined, 'rate 0: no limit');
});
