import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IdleCollector, TransferGc } from './memory.js';

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

test('a transfer through a slow queue keeps dead buffers bounded', async () => {
  // 200 MiB in 64 KiB buffers, 2 MiB of them queued at any time (a disk slower than the socket).
  const { getHeapStatistics } = await import('node:v8');
  const run = async () => {
    const gc = new TransferGc();
    const base = getHeapStatistics().external_memory;
    const queue: Buffer[] = [];
    let peak = 0;
    for (let i = 0; i < 3200; i++) {
      queue.push(Buffer.alloc(65536, i));
      if (queue.length > 32) queue.shift();
      gc.count(65536);
      if (i % 16 === 0) await new Promise((r) => setImmediate(r));
      peak = Math.max(peak, getHeapStatistics().external_memory - base);
    }
    gc.done();
    return peak / 1048576;
  };
  const bounded = await run();
  // Without the collector V8 lets this reach ~57 MiB (its external-memory limit is 64 MiB).
  console.log(`# dead buffers peak ${bounded.toFixed(1)} MiB`);
  assert.ok(bounded < 24, `external memory grew by ${bounded.toFixed(1)} MiB`);
});
