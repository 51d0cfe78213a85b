import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { BootRate, reserveForMemory, targetsFor } from './pool-sizing.js';

// The warm pool's sizing by what the machine boots (a measured rate) and by its memory (the
// default reserve); the rest of the sizing arithmetic is tested with the pool (warm-pool.test.ts).
describe('sizing by what the machine boots and by its memory', () => {
  const p = { minPerKey: 2, horizonSeconds: 90, budgetSandboxes: 240 };

  test('the boot rate is the throughput boots ran at (in flight ÷ duration), averaged; nothing until a boot finished', () => {
    const r = new BootRate(0.5);
    assert.equal(r.perSecond(), undefined);
    r.observe(100, 2); // 2 in flight, 100 ms: 20 a second
    assert.equal(r.perSecond(), 20);
    r.observe(400, 2); // a slower one: 5 a second, averaged half-way
    assert.equal(r.perSecond(), 12.5);
    r.observe(0, 2); // no duration, or nothing in flight: not a sample
    r.observe(100, 0);
    assert.equal(r.perSecond(), 12.5);
  });

  test('the target by rate is at most the spare boot capacity × capacitySeconds; demand that takes every boot holds only the floor', () => {
    const rates = new Map([['a', 3]]);
    // Demand alone: 3/s × 90 s = 270, the budget's 240.
    assert.deepEqual(targetsFor(rates, p), new Map([['a', 240]]));
    // A slow day: the machine boots 7 a second, demand takes 3 of them: (7 − 3) × 10 s = 40 (by default).
    assert.deepEqual(targetsFor(rates, { ...p, bootsPerSecond: 7 }), new Map([['a', 40]]));
    assert.deepEqual(targetsFor(rates, { ...p, bootsPerSecond: 7, capacitySeconds: 5 }), new Map([['a', 20]]));
    // Demand at or above what the machine boots: the pool cannot get ahead; the floor only.
    assert.deepEqual(targetsFor(rates, { ...p, bootsPerSecond: 3 }), new Map([['a', 2]]));
    // The spare capacity is the machine's, shared by every key's demand: 2 + 2 of 7 leave 3 × 10 = 30 each.
    assert.deepEqual(targetsFor(new Map([['a', 2], ['b', 2]]), { ...p, bootsPerSecond: 7 }), new Map([['a', 30], ['b', 30]]));
    // A fast machine after steady demand (27 a second, 1.26/s): the rate decides, as before.
    assert.deepEqual(targetsFor(new Map([['a', 1.26]]), { ...p, bootsPerSecond: 27 }), new Map([['a', 114]]));
    // The reserve is held whatever the capacity (it fills at rest).
    assert.deepEqual(targetsFor(rates, { ...p, bootsPerSecond: 3, reserveSandboxes: 50 }, new Map([['a', 1]])), new Map([['a', 50]]));
  });

  test('the default reserve is 5 % of the memory in ready sandboxes, within the budget', () => {
    assert.equal(reserveForMemory(24 * 1024, 245), 122);
    assert.equal(reserveForMemory(8 * 1024, 81), 40);
    assert.equal(reserveForMemory(8 * 1024, 10), 10);
    assert.equal(reserveForMemory(100, 10), 0);
  });
});
