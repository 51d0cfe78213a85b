import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RouteTable } from './routes.js';
import type { RouteEntry } from '../services/routes.js';

function entry(status: RouteEntry['status'], orgId = 'org-a'): RouteEntry {
  return { sandboxId: 'sb1', orgId, status, dial: () => Promise.reject(new Error('no agent here')), port: null };
}

/** A loader whose reads the test answers one at a time, as the store had the row when each began. */
function slowStore(initial: RouteEntry | undefined) {
  let row = initial;
  const pending: Array<() => void> = [];
  let reads = 0;
  return {
    set: (r: RouteEntry | undefined) => (row = r),
    reads: () => reads,
    /** Answers the oldest read still open (with what the store held when it began). */
    answer: () => pending.shift()?.(),
    /** Answers the newest read still open. */
    answerNewest: () => pending.pop()?.(),
    open: () => pending.length,
    loader: (): Promise<RouteEntry | undefined> => {
      reads++;
      const seen = row;
      return new Promise((resolve) => pending.push(() => resolve(seen && { ...seen })));
    },
  };
}

const tick = () => new Promise((r) => setImmediate(r));

test('a change heard while the store is being read is not lost: the read from before it is not trusted (a deleted or paused sandbox is not served for 30 s)', async () => {
  const store = slowStore(entry('running'));
  const routes = new RouteTable({ loader: store.loader, hearing: () => true });
  // A request begins reading the route; meanwhile another replica pauses the sandbox and says so.
  const first = routes.ensure('sb1');
  await tick();
  store.set(entry('paused'));
  routes.forget('sb1');
  store.answer();
  // The answer of the read begun before the change may serve the request already under way...
  assert.equal((await first)?.status, 'running');
  // ...but the next one reads the store again, and sees the pause.
  const second = routes.ensure('sb1');
  await tick();
  assert.equal(store.reads(), 2, 'the store is read again');
  store.answer();
  assert.equal((await second)?.status, 'paused');

  // The same with a delete: the route goes.
  const third = routes.ensure('sb1');
  await tick();
  assert.equal(store.reads(), 2, 'a route read after the change is trusted');
  assert.equal((await third)?.status, 'paused');
  routes.forget('sb1');
  const fourth = routes.ensure('sb1');
  await tick();
  store.set(undefined);
  routes.forget('sb1');
  store.answer();
  await fourth;
  const fifth = routes.ensure('sb1');
  await tick();
  assert.equal(store.reads(), 4, 'a read begun before the delete was heard is read again');
  store.answer();
  assert.equal(await fifth, undefined);
  assert.equal(routes.get('sb1'), undefined);
});

test('forgetAll while a read is under way: that read is not trusted either', async () => {
  const store = slowStore(entry('running'));
  const routes = new RouteTable({ loader: store.loader, hearing: () => true });
  const first = routes.ensure('sb1');
  await tick();
  store.set(entry('stopped'));
  routes.forgetAll();
  store.answer();
  await first;
  const second = routes.ensure('sb1');
  await tick();
  assert.equal(store.reads(), 2);
  store.answer();
  assert.equal((await second)?.status, 'stopped');
});

test('a request that starts after the change heard does not share the read begun before it', async () => {
  const store = slowStore(entry('running'));
  const routes = new RouteTable({ loader: store.loader, hearing: () => true });
  const before = routes.ensure('sb1');
  await tick();
  store.set(entry('paused'));
  routes.forget('sb1');
  const after = routes.ensure('sb1');
  await tick();
  assert.equal(store.reads(), 2, 'a read of its own');
  // The newer read answers first, the older one last: the older must not replace it.
  store.answerNewest();
  assert.equal((await after)?.status, 'paused');
  store.answer();
  assert.equal((await before)?.status, 'running');
  assert.equal(routes.get('sb1')?.status, 'paused', 'the older answer, coming last, does not replace the newer');
  const again = routes.ensure('sb1');
  await tick();
  assert.equal(store.reads(), 2, 'the newer read is trusted');
  assert.equal((await again)?.status, 'paused');
});

test("this process's own change (a pause here) is not undone by a read begun before it", async () => {
  const store = slowStore(entry('running'));
  const routes = new RouteTable({ loader: store.loader, hearing: () => true });
  routes.set(entry('running'));
  routes.forgetAll();
  const read = routes.ensure('sb1');
  await tick();
  routes.setStatus('sb1', 'paused');
  store.answer();
  assert.equal((await read)?.status, 'running');
  assert.equal(routes.get('sb1')?.status, 'paused');
});

test("the loader is told when a change was heard during its read (so it applies nothing of it: a preview's public state)", async () => {
  const seen: boolean[] = [];
  let finish!: () => void;
  const routes = new RouteTable({
    loader: async (_id, current) => {
      seen.push(current());
      await new Promise<void>((r) => (finish = r));
      seen.push(current());
      return entry('running');
    },
    hearing: () => true,
  });
  const read = routes.ensure('sb1');
  await tick();
  routes.forget('sb1');
  finish();
  await read;
  assert.deepEqual(seen, [true, false]);
});

test('a route another replica changed just before the store went away is still served while it is away; read again once it is back', async () => {
  let down = false;
  let stored: RouteEntry | undefined = entry('running');
  const routes = new RouteTable({
    loader: async () => {
      if (down) throw new Error('the store is away');
      return stored && { ...stored };
    },
    hearing: () => true,
  });
  assert.equal((await routes.ensure('sb1'))?.status, 'running');
  // A message says it changed; then PostgreSQL goes away before any request reads it again.
  routes.forget('sb1');
  down = true;
  assert.equal((await routes.ensure('sb1'))?.status, 'running', 'served as known');
  // Back: the next request reads the store (it was forgotten), and sees what changed.
  down = false;
  stored = entry('paused');
  assert.equal((await routes.ensure('sb1'))?.status, 'paused');
  // Deleted meanwhile: the route goes at the next read.
  routes.forget('sb1');
  stored = undefined;
  assert.equal(await routes.ensure('sb1'), undefined);
  assert.equal(routes.get('sb1'), undefined);
  // Never known: with the store away, an error (the gateway answers 503), not a made-up route.
  down = true;
  await assert.rejects(routes.ensure('sb2'), /away/);
});
