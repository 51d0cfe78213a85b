import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IdleCollector } from './memory.js';

test('the idle collection waits for a burst of requests and for the burst to end', async () => {
  const c = new IdleCollector(30, 3) as unknown as { activity(): void; timer: NodeJS.Timeout | null; requests: number };
  c.activity();
  c.activity();
  assert.equal(c.timer, null, 'two requests are not a burst');
  c.activity();
  assert.notEqual(c.timer, null);
  await new Promise((r) => setTimeout(r, 60));
  assert.equal(c.timer, null, 'collected once the agent went idle');
  assert.equal(c.requests, 0);
});
