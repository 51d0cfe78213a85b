// A store outage shorter than a lease costs no node its lease: while the store is away no node can
// renew one (its heartbeats go to the store), so a lease that still ran when the store went away
// counts again, whole, from the store's return; a node lost before the outage stays lost.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { RemoteNode } from '../node/remote-node.js';
import { SqliteStore } from '../store/sqlite.js';
import type { Store } from '../store/types/index.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { RegisteredNodes } from './registered-nodes.js';

test("a lease that ran out while the store was away counts from the store's return; a node lost before stays lost", async () => {
  const store = SqliteStore.open(':memory:');
  const { signer } = testClusterKeys();
  const capacity = { vcpu: 2, memoryMb: 2048, diskGb: 10, maxSandboxes: 10 };
  let away = false;
  const flaky = { nodes: { ...store.nodes, list: () => (away ? Promise.reject(new Error('connection refused')) : store.nodes.list()) } } as unknown as Pick<Store, 'nodes'>;
  const logs: string[] = [];
  const nodes = new RegisteredNodes({ store: flaky, connect: (row) => new RemoteNode({ id: row.id, url: row.url, auth: signer }), refreshMs: 60_000, log: (l) => logs.push(l) });
  try {
    await store.nodes.register({ id: 'node-dead', url: 'http://127.0.0.1:9', capacity }, 1);
    await store.nodes.register({ id: 'node-x', url: 'http://127.0.0.1:9', capacity }, 1000);
    await sleep(20);
    await nodes.start();
    assert.equal(nodes.up('node-x'), true);
    assert.equal(nodes.up('node-dead'), false, 'lost before the outage');

    away = true;
    await nodes.refresh(true);
    assert.match(logs.join('\n'), /cannot be read/);
    assert.equal(nodes.up('node-x'), true, 'served as last read while the store is away');
    await sleep(1200);
    await nodes.refresh(true);

    // The store is back; node-x's lease ran out meanwhile, and it had no way to renew it.
    away = false;
    await nodes.refresh(true);
    assert.equal(nodes.up('node-x'), true, "its lease counts from the store's return");
    assert.equal(nodes.up('node-dead'), false, 'still lost');
    assert.deepEqual((await nodes.candidates()).map((c) => c.id), ['node-x']);

    // No heartbeat within a whole lease after the return: lost as any node would be.
    await sleep(1100);
    await nodes.refresh(true);
    assert.equal(nodes.up('node-x'), false, 'lost a lease after the return');
  } finally {
    await nodes.close();
    store.close();
  }
});
