import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SqliteStore } from '../store/sqlite.js';
import { NodeMembership, storeRegistry, type NodeRegistry } from './membership.js';

const capacity = { vcpu: 2, memoryMb: 2048, diskGb: 20, maxSandboxes: 10 };

test('a heartbeat reports the orphans the collector counts, once it counts them', async () => {
  const store = SqliteStore.open(':memory:');
  let orphans: number | undefined = undefined;
  const m = new NodeMembership({ store, node: { list: async () => ['a', 'b', 'c'] }, id: 'node-o', url: 'http://10.0.0.1:7070', capacity, leaseMs: 60_000, orphans: () => orphans });
  await m.start();
  await m.beat();
  assert.equal((await store.nodes.byId('node-o'))!.orphans, undefined, 'not counted yet: not said');
  orphans = 2;
  await m.beat();
  assert.deepEqual([(await store.nodes.byId('node-o'))!.orphans, (await store.nodes.byId('node-o'))!.usage.sandboxes], [2, 3]);
  m.stop();
  store.close();
});

test('heartbeats that keep failing are said when they begin to, not at every beat; their return is said too', async () => {
  const store = SqliteStore.open(':memory:');
  const real = storeRegistry(store);
  let away = false;
  const registry: NodeRegistry = {
    ...real,
    heartbeat: async (id, report, leaseMs) => {
      if (away) throw new Error('the store is away');
      return real.heartbeat(id, report, leaseMs);
    },
  };
  const lines: string[] = [];
  const m = new NodeMembership({ registry, node: { list: async () => [] }, id: 'node-f', url: 'http://10.0.0.1:7070', capacity, leaseMs: 60_000, log: (msg) => lines.push(msg) });
  await m.start();
  lines.length = 0;
  away = true;
  for (let i = 0; i < 5; i++) assert.equal(await m.beat(), undefined);
  assert.deepEqual(lines, ['node node-f: heartbeat failed: Error: the store is away']);
  away = false;
  assert.ok(await m.beat());
  await m.beat();
  assert.deepEqual(lines.slice(1), ['node node-f: heartbeats go through again (5 missed)']);
  m.stop();
  store.close();
});
