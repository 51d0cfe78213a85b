import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KeyedMutex, Slots } from './locks.js';

test('slots run at most their size at once, the rest in arrival order, and free a slot on failure', async () => {
  const slots = new Slots(3);
  let now = 0;
  let most = 0;
  const started: number[] = [];
  const gates: Array<() => void> = [];
  const tasks = Array.from({ length: 10 }, (_, i) =>
    slots.run(async () => {
      started.push(i);
      now++;
      most = Math.max(most, now);
      await new Promise<void>((r) => gates.push(r));
      now--;
      if (i === 4) throw new Error('task 4 fails');
      return i;
    }),
  );
  const settled = Promise.allSettled(tasks);
  for (let round = 0; round < 20 && gates.length + started.length < 20; round++) {
    await new Promise((r) => setImmediate(r));
    // Always release the oldest running task, and let new ones start.
    gates.shift()?.();
  }
  while (gates.length) {
    gates.shift()!();
    await new Promise((r) => setImmediate(r));
  }
  const results = await settled;
  assert.equal(most, 3);
  assert.deepEqual(started, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  assert.equal(results.filter((r) => r.status === 'rejected').length, 1);
  // Every slot came back: three more run at once again.
  let again = 0;
  let peak = 0;
  await Promise.all(
    Array.from({ length: 6 }, () =>
      slots.run(async () => {
        again++;
        peak = Math.max(peak, again);
        await new Promise((r) => setTimeout(r, 5));
        again--;
      }),
    ),
  );
  assert.equal(peak, 3);
  assert.throws(() => new Slots(0), /at least 1/);
});

test('the keyed mutex runs one task per key at a time, keys in parallel', async () => {
  const m = new KeyedMutex();
  const log: string[] = [];
  const step = (k: string, n: number) =>
    m.run(k, async () => {
      log.push(`${k}${n}+`);
      await new Promise((r) => setTimeout(r, 5));
      log.push(`${k}${n}-`);
    });
  await Promise.all([step('a', 1), step('a', 2), step('b', 1)]);
  assert.deepEqual(log.filter((l) => l.startsWith('a')), ['a1+', 'a1-', 'a2+', 'a2-']);
  assert.ok(log.indexOf('b1+') < log.indexOf('a1-'), 'b ran beside a');
});
