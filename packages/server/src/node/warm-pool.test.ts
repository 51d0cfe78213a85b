import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { ServiceError } from '@sandboxd/protocol';
import { apportion, budgetSandboxes, RateEstimate, targetsFor } from './pool-sizing.js';
import type { WarmKey } from './warm-key.js';
import { WarmPool, type WarmPoolOptions } from './warm-pool.js';
import type { PoolBoot } from './warm-keys.js';

const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};

const key = (name: string, generation = 'g1', templateId = `tpl_${name}`): WarmKey => ({ key: `${name}-${generation}`, generation, templateId, label: name });

/** Boots that finish when the test says so, in any order; tracks how many run at once. */
class Boots {
  private n = 0;
  readonly pending: Array<{ id: string; resolve: (id: string) => void; reject: (err: Error) => void }> = [];
  running = 0;
  maxRunning = 0;
  started: string[] = [];
  /** How the pool started each boot (background: a refill), and the refills it promoted. */
  readonly tickets = new Map<string, PoolBoot>();
  readonly promoted: string[] = [];

  make = (prefix = 'sb') => (boot?: PoolBoot): Promise<string> => {
    const id = `${prefix}${++this.n}`;
    this.started.push(id);
    if (boot) {
      this.tickets.set(id, boot);
      boot.onForeground(() => this.promoted.push(id));
    }
    this.running++;
    this.maxRunning = Math.max(this.maxRunning, this.running);
    return new Promise<string>((resolve, reject) => this.pending.push({ id, resolve, reject })).finally(() => this.running--);
  };

  /** Finishes the boot that made `id` (or the i-th pending one). */
  async finish(which: string | number): Promise<string> {
    const i = typeof which === 'number' ? which : this.pending.findIndex((p) => p.id === which);
    const [p] = this.pending.splice(i, 1);
    p!.resolve(p!.id);
    await flush();
    return p!.id;
  }

  async fail(i: number, message: string): Promise<void> {
    const [p] = this.pending.splice(i, 1);
    p!.reject(new Error(message));
    await flush();
  }

  /** Finishes every pending boot (and those they lead to) until none is left. */
  async finishAll(): Promise<void> {
    while (this.pending.length) await this.finish(0);
  }
}

/** Closes the pool while the boots in flight finish (close waits for them). */
async function shut(p: WarmPool, boots: Boots): Promise<void> {
  const closing = p.close();
  await boots.finishAll();
  await closing;
}

function pool(o: Partial<WarmPoolOptions> & { clock: { t: number } }) {
  const destroyed: string[] = [];
  const p = new WarmPool({
    runtime: { destroy: async (id: string) => void destroyed.push(id) },
    log: () => undefined,
    minPerKey: 2,
    maxMemoryMb: 1000,
    horizonSeconds: 10,
    shrinkAfterMs: 5000,
    bootConcurrency: 2,
    refillDelayMs: 0,
    rateTauMs: 10_000,
    tickMs: 0,
    now: () => o.clock.t,
    ...o,
  });
  return { p, destroyed };
}

describe('sizing arithmetic', () => {
  test('the rate average reads a steady rate, and a silence of one time constant divides it by e', () => {
    const r = new RateEstimate(10_000);
    assert.equal(r.perSecond(0), 0);
    for (let t = 0; t <= 60_000; t += 500) r.observe(t); // 2 per second for a minute
    const steady = r.perSecond(60_000);
    assert.ok(steady > 1.9 && steady < 2.15, `steady ${steady}`);
    assert.ok(Math.abs(r.perSecond(70_000) - steady / Math.E) < 1e-9);
    // After 10 s at 2/s from nothing: 2 × (1 − e^-1) ≈ 1.26 (read half a second after the last
    // of the discrete events: 1.23).
    const fresh = new RateEstimate(10_000);
    for (let t = 0; t < 10_000; t += 500) fresh.observe(t);
    assert.ok(Math.abs(fresh.perSecond(10_000) - 1.233) < 0.001, `after 10 s: ${fresh.perSecond(10_000)}`);
  });

  test('the target is the floor, then rate × horizon, and never more than the budget', () => {
    const p = { minPerKey: 2, horizonSeconds: 30, budgetSandboxes: 240 };
    assert.deepEqual(targetsFor(new Map([['a', 0]]), p), new Map([['a', 2]]));
    assert.deepEqual(targetsFor(new Map([['a', 0.05]]), p), new Map([['a', 2]]));
    assert.deepEqual(targetsFor(new Map([['a', 0.5]]), p), new Map([['a', 15]]));
    assert.deepEqual(targetsFor(new Map([['a', 2]]), p), new Map([['a', 60]]));
    assert.deepEqual(targetsFor(new Map([['a', 100]]), p), new Map([['a', 240]]));
    assert.equal(budgetSandboxes(2410), 241);
    assert.equal(budgetSandboxes(9), 0);
  });

  test('keys that want more than the budget share it in proportion to what they want; the total is the budget', () => {
    // They want 40, 10 and 2 (the floor): 52, twice what the budget pays for.
    const half = targetsFor(new Map([['busy', 4], ['quiet', 1], ['idle', 0]]), { minPerKey: 2, horizonSeconds: 10, budgetSandboxes: 26 });
    assert.deepEqual(half, new Map([['busy', 20], ['quiet', 5], ['idle', 1]]));
    // 40, 10, 2 of 50: 38.46, 9.62, 1.92; the largest remainders get the last two.
    const t = targetsFor(new Map([['busy', 4], ['quiet', 1], ['idle', 0]]), { minPerKey: 2, horizonSeconds: 10, budgetSandboxes: 50 });
    assert.deepEqual(t, new Map([['busy', 38], ['quiet', 10], ['idle', 2]]));
    assert.equal([...t.values()].reduce((a, b) => a + b), 50);
  });
});

describe('the reserve', () => {
  test('at rest the reserve is shared by long-term demand, within the budget; recent demand above it wins', () => {
    const p = { minPerKey: 2, horizonSeconds: 90, budgetSandboxes: 240, reserveSandboxes: 48 };
    // One key asked for once (no recent rate to speak of): it holds the whole reserve.
    assert.deepEqual(targetsFor(new Map([['a', 0]]), p, new Map([['a', 0.0003]])), new Map([['a', 48]]));
    // Three keys: 3:1:0 of the long-term demand; a key with none still has its floor.
    const three = targetsFor(new Map([['a', 0], ['b', 0], ['c', 0]]), p, new Map([['a', 0.003], ['b', 0.001], ['c', 0]]));
    assert.deepEqual(three, new Map([['a', 36], ['b', 12], ['c', 2]]));
    // No long-term figures: an equal share each.
    assert.deepEqual(targetsFor(new Map([['a', 0], ['b', 0]]), p, new Map()), new Map([['a', 24], ['b', 24]]));
    // Demand now above the reserve's share: the rate decides.
    assert.deepEqual(targetsFor(new Map([['a', 1]]), p, new Map([['a', 0.5]])), new Map([['a', 90]]));
    // A reserve above the budget is the budget; no reserve is the floor.
    assert.deepEqual(targetsFor(new Map([['a', 0]]), { ...p, reserveSandboxes: 500 }, new Map([['a', 1]])), new Map([['a', 240]]));
    assert.deepEqual(targetsFor(new Map([['a', 0]]), { ...p, reserveSandboxes: 0 }, new Map([['a', 1]])), new Map([['a', 2]]));
  });

  test('apportion shares whole sandboxes, largest remainders first, and gives out exactly the total', () => {
    assert.deepEqual(apportion(10, new Map([['a', 1], ['b', 1], ['c', 1]])), new Map([['a', 4], ['b', 3], ['c', 3]]));
    assert.deepEqual(apportion(0, new Map([['a', 1]])), new Map([['a', 0]]));
    assert.deepEqual(apportion(5, new Map()), new Map());
    const out = apportion(7, new Map([['x', 0.2], ['y', 0.7], ['z', 0.1]]));
    assert.equal([...out.values()].reduce((a, b) => a + b), 7);
    assert.deepEqual(out, new Map([['x', 1], ['y', 5], ['z', 1]]));
  });
});

describe('the pool with an injected clock', () => {
  test('the target rises with the creation rate and the pool fills up to it', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    const { p } = pool({ clock, horizonSeconds: 10 });
    const k = key('base');
    const got: string[] = [];
    // 2 creates per second for 10 s; every boot finishes at once.
    for (let i = 0; i < 20; i++) {
      const c = p.acquire(k, boots.make());
      await boots.finishAll();
      got.push(await c);
      p.tick();
      await boots.finishAll();
      clock.t += 500;
    }
    assert.equal(new Set(got).size, 20, 'every create got a sandbox of its own');
    const s = p.stats()[0]!;
    // The target was set at the last create (rate 1.30/s there): ⌈13.0⌉ = 13 ready, all booted
    // ahead of the next create; read now, half a second later, the rate is 1.23/s.
    assert.ok(Math.abs(s.ratePerSecond - 1.233) < 0.001, `rate ${s.ratePerSecond}`);
    assert.equal(s.target, 13);
    assert.equal(s.ready, 13);
    assert.equal(s.booting, 0);
    // A create now is served from the pool: no boot has to finish first.
    const booted = [...boots.started];
    const id = await p.acquire(k, boots.make());
    assert.ok(got.every((g) => g !== id));
    assert.ok(booted.includes(id), 'booted before the create arrived');
    await shut(p, boots);
  });

  test('at rest the reserve is held for the keys in use, shared by their long-term demand, and kept', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    // 1000 MB: 100 ready in all; a reserve of 12.
    const { p, destroyed } = pool({ clock, reserveSandboxes: 12, bootConcurrency: 4 });
    for (const [name, n] of [['a', 3], ['b', 1]] as const) {
      for (let i = 0; i < n; i++) {
        const c = p.acquire(key(name), boots.make(name));
        await boots.finishAll();
        await c;
      }
    }
    // Ten minutes later the recent rates are gone; the long-term ones (3:1) share the reserve.
    clock.t += 600_000;
    p.tick();
    await boots.finishAll();
    p.tick();
    await boots.finishAll();
    // While a was the only key it held the whole reserve (12); its share is 9 now.
    assert.deepEqual(
      p.stats().map((s) => [s.label, s.target, s.ready]),
      [
        ['a', 9, 12],
        ['b', 3, 3],
      ],
    );
    clock.t += 60_000;
    p.tick();
    await flush();
    assert.equal(destroyed.length, 3, 'what is beyond its share goes after shrinkAfterMs');
    clock.t += 3_600_000;
    p.tick();
    p.tick();
    await boots.finishAll();
    await flush();
    assert.deepEqual(
      p.stats().map((s) => [s.label, s.target, s.ready]),
      [
        ['a', 9, 9],
        ['b', 3, 3],
      ],
      'an hour later, with no demand since, the reserve is still held',
    );
    assert.equal(destroyed.length, 3);
    await shut(p, boots);
  });

  test('the budget caps the ready sandboxes of all keys together', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    // 100 MB: 10 ready sandboxes in all.
    const { p } = pool({ clock, maxMemoryMb: 100, horizonSeconds: 30, bootConcurrency: 4 });
    for (let i = 0; i < 40; i++) {
      for (const name of ['a', 'b']) {
        const c = p.acquire(key(name), boots.make(name));
        await boots.finishAll();
        await c;
      }
      clock.t += 100;
    }
    p.tick();
    await boots.finishAll();
    const stats = p.stats();
    assert.deepEqual(
      stats.map((s) => [s.label, s.target, s.ready]),
      [
        ['a', 5, 5],
        ['b', 5, 5],
      ],
    );
    assert.ok(stats.every((s) => s.ratePerSecond * 30 > 10), 'each key alone would want more than the whole budget');
    await shut(p, boots);
  });

  test('it shrinks back to the floor once demand stops: excess ready sandboxes are destroyed after shrinkAfterMs', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    const { p, destroyed } = pool({ clock, horizonSeconds: 10, shrinkAfterMs: 5000 });
    const k = key('base');
    // A burst of 20 creates at once.
    const burst = Array.from({ length: 20 }, () => p.acquire(k, boots.make()));
    await boots.finishAll();
    await Promise.all(burst);
    p.tick();
    await boots.finishAll();
    assert.deepEqual([p.stats()[0]!.target, p.stats()[0]!.ready], [20, 20], 'rate 2/s (20 in one tau) × 10 s');
    // Demand stops. The target decays with the rate; excess survives shrinkAfterMs, then goes.
    clock.t += 10_000;
    p.tick(); // rate 0.74/s → target 8: 12 in excess from now
    assert.deepEqual([p.stats()[0]!.target, p.stats()[0]!.ready], [8, 20]);
    clock.t += 4_999;
    p.tick();
    assert.equal(p.stats()[0]!.ready, 20 - 0, 'not yet: in excess for less than shrinkAfterMs');
    clock.t += 1;
    p.tick(); // target now 5 (rate 0.45/s): 15 go, the oldest first
    await flush();
    assert.deepEqual([p.stats()[0]!.target, p.stats()[0]!.ready], [5, 5]);
    assert.equal(destroyed.length, 15);
    clock.t += 60_000;
    p.tick();
    clock.t += 5_000;
    p.tick();
    await flush();
    assert.deepEqual([p.stats()[0]!.target, p.stats()[0]!.ready], [2, 2], 'back to the floor');
    assert.equal(destroyed.length, 18);
    await shut(p, boots);
    assert.equal(destroyed.length, 20, 'closing destroys what it held');
  });

  test('waiting creates are served in arrival order, each by the first sandbox ready for its key, whoever booted it', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    const { p } = pool({ clock, minPerKey: 1, horizonSeconds: 0, bootConcurrency: 3, refillConcurrency: 1 });
    const k = key('base');
    const order: Array<[number, string]> = [];
    const waiting = Array.from({ length: 5 }, (_, i) => p.acquire(k, boots.make()).then((id) => void order.push([i, id])));
    await flush();
    // Three boots run (the limit); creates 0–2 are covered, 3–4 wait for a slot.
    assert.deepEqual(boots.started, ['sb1', 'sb2', 'sb3']);
    // The third boot finishes first: it goes to create 0, not to create 2 that started it.
    await boots.finish('sb3');
    assert.deepEqual(order, [[0, 'sb3']]);
    // Its slot went to create 3's boot; then sb1 and sb4 finish, in that order.
    assert.deepEqual(boots.started, ['sb1', 'sb2', 'sb3', 'sb4']);
    await boots.finish('sb4');
    await boots.finish('sb1');
    assert.deepEqual(order, [
      [0, 'sb3'],
      [1, 'sb4'],
      [2, 'sb1'],
    ]);
    await boots.finishAll();
    await Promise.all(waiting);
    assert.deepEqual(
      order.map(([i]) => i),
      [0, 1, 2, 3, 4],
    );
    // Now the pool refills to its floor (1); a ready one goes to the next create at once.
    await boots.finishAll();
    assert.equal(p.stats()[0]!.ready, 1);
    const refilled = boots.started.at(-1);
    const fromPool = await p.acquire(k, boots.make());
    assert.equal(fromPool, refilled);
    await boots.finishAll();
    await shut(p, boots);
  });

  test('a refill a create comes to wait on is promoted and serves it; no refill starts while a create waits; waiting creates of another key come before refills', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    const { p } = pool({ clock, minPerKey: 3, bootConcurrency: 2, refillConcurrency: 1 });
    const a = key('a');
    const b = key('b');
    const first = p.acquire(a, boots.make('a'));
    await flush();
    // One boot for the create, and no refill while it waits (it would take the CPU from it).
    assert.deepEqual(boots.started, ['a1']);
    assert.equal(boots.tickets.get('a1')?.background, false);
    await boots.finish('a1');
    assert.equal(await first, 'a1');
    // Nothing waits now: refills start (one slot), in the background.
    assert.deepEqual(boots.started, ['a1', 'a2']);
    assert.equal(boots.tickets.get('a2')?.background, true);
    // A create comes to wait on that refill: it is promoted (normal CPU weight), nothing else starts for a.
    const second = p.acquire(a, boots.make('a'));
    await flush();
    assert.equal(boots.tickets.get('a2')?.background, false);
    assert.deepEqual(boots.promoted, ['a2']);
    assert.deepEqual(boots.started, ['a1', 'a2']);
    // A create for b boots at once in the free slot.
    const forB = p.acquire(b, boots.make('b'));
    await flush();
    assert.deepEqual(boots.started, ['a1', 'a2', 'b3']);
    await boots.finish('a2');
    assert.equal(await second, 'a2');
    // b still waits: no refill yet.
    assert.deepEqual(boots.started, ['a1', 'a2', 'b3']);
    await boots.finish('b3');
    assert.equal(await forB, 'b3');
    assert.deepEqual(boots.started, ['a1', 'a2', 'b3', 'a4']);
    await boots.finishAll();
    assert.equal(boots.maxRunning, 2);
    assert.deepEqual(
      p.stats().map((s) => [s.label, s.ready]),
      [
        ['a', 3],
        ['b', 3],
      ],
    );
    await shut(p, boots);
  });

  test('a create abandoned while it waits leaves the queue; its boot serves the next create, or is destroyed when nothing is held', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    const { p, destroyed } = pool({ clock, minPerKey: 0, bootConcurrency: 2 });
    const k = key('base');
    const gone = new AbortController();
    const abandoned = p.acquire(k, boots.make(), { signal: gone.signal });
    const next = p.acquire(k, boots.make());
    await flush();
    gone.abort();
    await assert.rejects(abandoned, (err: unknown) => err instanceof ServiceError && /abandoned/.test(err.message));
    await boots.finish('sb2');
    assert.equal(await next, 'sb2', 'the one left waiting takes the first sandbox ready');
    await boots.finish('sb1');
    assert.deepEqual(destroyed, ['sb1'], 'nobody waits and the pool holds none: destroyed, not leaked');
    assert.deepEqual(p.ids(), []);
    await shut(p, boots);
  });

  test('a failed boot fails only a create left without a boot in flight, and refills back off', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    const { p } = pool({ clock, minPerKey: 0, bootConcurrency: 2 });
    const k = key('base');
    const one = p.acquire(k, boots.make());
    const two = p.acquire(k, boots.make());
    await flush();
    const failed = assert.rejects(one, /agent not ready/);
    await boots.fail(0, 'agent not ready');
    await failed;
    await boots.finish(0);
    assert.equal(await two, 'sb2');
    await shut(p, boots);
  });

  test('after a failed refill the key backs off (1 s, doubling) before refilling again; creates still boot, and a success ends it', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    const { p } = pool({ clock, minPerKey: 2, bootConcurrency: 2, refillConcurrency: 1 });
    const k = key('base');
    const create = p.acquire(k, boots.make());
    await flush();
    assert.deepEqual(boots.started, ['sb1'], 'one boot for the create, no refill while it waits');
    await boots.finish('sb1');
    assert.equal(await create, 'sb1');
    assert.deepEqual(boots.started, ['sb1', 'sb2'], 'then one refill');
    await boots.fail(0, 'crun failed');
    assert.deepEqual(boots.started, ['sb1', 'sb2'], 'no refill right after a failure');
    clock.t = 999;
    p.tick();
    assert.equal(boots.started.length, 2);
    clock.t = 1000;
    p.tick();
    assert.deepEqual(boots.started, ['sb1', 'sb2', 'sb3']);
    await boots.fail(0, 'crun failed again');
    clock.t = 2999;
    p.tick();
    assert.equal(boots.started.length, 3, 'second failure in a row: 2 s');
    // A create during the back-off gets its boot at once; its success ends the back-off.
    const during = p.acquire(k, boots.make());
    await flush();
    assert.deepEqual(boots.started, ['sb1', 'sb2', 'sb3', 'sb4']);
    await boots.finish('sb4');
    assert.equal(await during, 'sb4');
    assert.deepEqual(boots.started, ['sb1', 'sb2', 'sb3', 'sb4', 'sb5'], 'refilling again');
    await shut(p, boots);
  });

  test('no refill starts while a create is under way (foreground); it starts once the create is done', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    const { p } = pool({ clock, minPerKey: 2, bootConcurrency: 2, refillConcurrency: 1 });
    const k = key('base');
    const done = p.foreground();
    const create = p.acquire(k, boots.make());
    await flush();
    await boots.finish('sb1');
    assert.equal(await create, 'sb1');
    // The create has its sandbox but is still under way (its env, its policy): no refill yet.
    await flush();
    assert.deepEqual(boots.started, ['sb1']);
    done();
    done(); // twice is once
    await flush();
    assert.deepEqual(boots.started, ['sb1', 'sb2']);
    assert.equal(boots.tickets.get('sb2')?.background, true);
    await shut(p, boots);
  });

  test('targets follow the measured boot rate: a sequential fill on a slow machine does not raise the target it cannot reach', async () => {
    // Each create waits for its own boot of 400 ms (the machine boots 2.5 a second, one at a time),
    // arriving as the previous one ends: the rate of demand reaches ~2.5/s.
    const fill = async (capacitySeconds: number) => {
      const clock = { t: 0 };
      const boots = new Boots();
      const { p } = pool({ clock, minPerKey: 2, maxMemoryMb: 2400, horizonSeconds: 90, bootConcurrency: 1, refillConcurrency: 1, capacitySeconds, bootClock: () => clock.t });
      const k = key('base');
      for (let i = 0; i < 30; i++) {
        const done = p.foreground();
        const got = p.acquire(k, boots.make());
        await flush();
        clock.t += 400;
        while (boots.pending.length) await boots.finish(0);
        await got;
        done();
        await flush();
      }
      const target = p.stats()[0]!.target;
      p.tick();
      await shut(p, boots);
      return target;
    };
    const byDemand = await fill(0);
    const byCapacity = await fill(10);
    assert.ok(byDemand >= 100, `by demand alone: ${byDemand}`);
    assert.ok(byCapacity <= 10, `following what the machine boots: ${byCapacity}`);
  });

  test('a rebuilt template (another generation) drops the old ready sandboxes; the other network setting of the same generation stays', async () => {
    const clock = { t: 0 };
    const boots = new Boots();
    const { p, destroyed } = pool({ clock, minPerKey: 2 });
    const net = { key: 'tpl-g1-net', generation: 'g1', templateId: 'tpl', label: 'net' };
    const lo = { key: 'tpl-g1-lo', generation: 'g1', templateId: 'tpl', label: 'lo' };
    const rebuilt = { key: 'tpl-g2-lo', generation: 'g2', templateId: 'tpl', label: 'rebuilt' };
    for (const k of [net, lo]) {
      const c = p.acquire(k, boots.make(k.label));
      await boots.finishAll();
      await c;
    }
    assert.deepEqual(
      p.stats().map((s) => [s.label, s.ready]),
      [
        ['net', 2],
        ['lo', 2],
      ],
    );
    const c = p.acquire(rebuilt, boots.make('r'));
    await boots.finishAll();
    await c;
    await flush();
    assert.deepEqual(
      p.stats().map((s) => [s.label, s.ready]),
      [['rebuilt', 2]],
    );
    assert.equal(destroyed.length, 4);
    await shut(p, boots);
  });
});

test("sandboxes kept ready with volumes (pool id `<source>+<volume>...`) are dropped with their source and with each of their volumes, no others", async () => {
  const clock = { t: 0 };
  const boots = new Boots();
  const { p, destroyed } = pool({ clock, minPerKey: 1 });
  const plain = key('plain', 'g1', 'tpl');
  const withA = key('a', 'g1', 'tpl+vol-a');
  const withAB = key('ab', 'g1', 'tpl+vol-a+vol-b');
  const withB = key('b', 'g1', 'other+vol-b');
  for (const k of [plain, withA, withAB, withB]) {
    const c = p.acquire(k, boots.make(k.label));
    await boots.finishAll();
    await c;
  }
  await flush();
  const ready = () => p.stats().filter((s) => s.ready > 0).map((s) => s.label).sort();
  assert.deepEqual(ready(), ['a', 'ab', 'b', 'plain']);
  await p.dropTemplate('vol-a');
  assert.deepEqual(ready(), ['b', 'plain']);
  await p.dropTemplate('tpl');
  assert.deepEqual(ready(), ['b']);
  await p.dropTemplate('vol-b');
  assert.deepEqual(ready(), []);
  assert.equal(destroyed.length, 4);
  await shut(p, boots);
});

test('a pool not stocked (its node drains) destroys its ready sandboxes at once, refills nothing, and boots only for the asks that come; stocked again, it refills', async () => {
  const clock = { t: 0 };
  const boots = new Boots();
  const { p, destroyed } = pool({ clock });
  const k = key('base');
  await Promise.all([p.acquire(k, boots.make()), boots.finishAll()]);
  p.tick();
  await boots.finishAll();
  assert.equal(p.stats()[0]!.ready, 2, 'the floor is held');
  assert.equal(p.stock(false), true);
  assert.equal(p.stock(false), false, 'already so');
  await flush();
  assert.deepEqual([p.stats()[0]!.ready, destroyed.length], [0, 2], 'every ready one destroyed at once, not after shrinkAfterMs');
  const started = boots.started.length;
  clock.t += 60_000;
  p.tick();
  await flush();
  assert.equal(boots.started.length, started, 'no refill');
  const asked = p.acquire(k, boots.make());
  await boots.finishAll();
  await asked;
  await flush();
  assert.deepEqual([boots.started.length, p.stats()[0]!.ready], [started + 1, 0], 'one boot for the ask, nothing kept');
  assert.equal(p.stock(true), true);
  await boots.finishAll();
  assert.equal(p.stats()[0]!.ready, 2, 'refilled to the floor');
  await shut(p, boots);
});

test('waiting: how many creates wait for a boot of a key (what a boot asks before it primes its agent)', async () => {
  const clock = { t: 0 };
  const boots = new Boots();
  const { p } = pool({ clock, minPerKey: 0 });
  const k = key('a');
  assert.equal(p.waiting(k.key), 0, 'an unknown key: none');
  const first = p.acquire(k, boots.make());
  const second = p.acquire(k, boots.make());
  await flush();
  assert.equal(p.waiting(k.key), 2, 'nothing ready: both wait');
  await boots.finish(0);
  assert.equal(p.waiting(k.key), 1, 'the first boot went to the first create');
  await boots.finishAll();
  await Promise.all([first, second]);
  assert.equal(p.waiting(k.key), 0);
  await shut(p, boots);
});
