import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SqliteStore } from '../store/sqlite.js';
import { insertSandboxRow as sandboxRow } from '../testing/store-rows.js';
import { NodeViews, registryNodeViews, renderNodeView } from './node-views.js';

const capacity = { vcpu: 8, memoryMb: 16384, diskGb: 200, maxSandboxes: 50 };

test("a cluster's nodes: lease against the store's clock, what the rows hold, what each reported", async () => {
  const store = SqliteStore.open(':memory:');
  const t0 = '2030-01-01T00:00:00.000Z';
  await store.nodes.register({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 15_000, t0);
  await store.nodes.register({ id: 'node-b', url: 'http://10.0.0.2:7070', capacity }, 15_000, t0);
  await store.nodes.heartbeat('node-a', { usage: { sandboxes: 4, vcpu: 0, memoryMb: 0, diskGb: 0 }, warm: { k1: 2, k2: 1 }, layersDigest: null, orphans: 1 }, 15_000, '2030-01-01T00:00:10.000Z');
  await sandboxRow(store, 'a1', 'node-a');
  await sandboxRow(store, 'a2', 'node-a', 'stopped');
  await sandboxRow(store, 'b1', 'node-b');
  await sandboxRow(store, 'gone', 'node-a', 'deleted');
  const views = await registryNodeViews(store, Date.parse('2030-01-01T00:00:20.000Z'));
  assert.deepEqual(views.map(renderNodeView), [
    {
      id: 'node-a',
      status: 'active',
      up: true,
      in_process: false,
      url: 'http://10.0.0.1:7070',
      lease_expires_at: '2030-01-01T00:00:25.000Z',
      heartbeat_at: '2030-01-01T00:00:10.000Z',
      heartbeat_age_seconds: 10,
      registered_at: t0,
      capacity: { vcpu: 8, memory_mb: 16384, disk_gb: 200, max_sandboxes: 50 },
      committed: { sandboxes: 2, active: 1, stopped: 1, vcpu: 2, memory_mb: 1024, disk_gb: 10 },
      reported: { sandboxes: 4, warm_ready: 3, orphans: 1 },
    },
    {
      id: 'node-b',
      status: 'active',
      up: false,
      in_process: false,
      url: 'http://10.0.0.2:7070',
      lease_expires_at: '2030-01-01T00:00:15.000Z',
      heartbeat_at: t0,
      heartbeat_age_seconds: 20,
      registered_at: t0,
      capacity: { vcpu: 8, memory_mb: 16384, disk_gb: 200, max_sandboxes: 50 },
      committed: { sandboxes: 1, active: 1, stopped: 0, vcpu: 2, memory_mb: 1024, disk_gb: 5 },
      reported: { sandboxes: 0, warm_ready: 0, orphans: null },
    },
  ]);
  store.close();
});

test("the all-in-one's one machine: every row is on it, whatever host name it was made under; read live", async () => {
  const store = SqliteStore.open(':memory:');
  await sandboxRow(store, 'x1', 'this-host');
  await sandboxRow(store, 'x2', 'old-host-name', 'stopped');
  let held = ['x1', 'x2', 'warm1'];
  const views = new NodeViews(store, { id: 'this-host', capacity: { vcpu: 4, memoryMb: 8000, diskGb: 100 }, list: async () => held, readyByKey: () => ({ k: 1 }) });
  assert.equal(views.mode, 'all-in-one');
  const [one] = (await views.list()).map(renderNodeView);
  assert.deepEqual(one, {
    id: 'this-host',
    status: 'active',
    up: true,
    in_process: true,
    url: null,
    lease_expires_at: null,
    heartbeat_at: null,
    heartbeat_age_seconds: null,
    registered_at: null,
    capacity: { vcpu: 4, memory_mb: 8000, disk_gb: 100, max_sandboxes: null },
    committed: { sandboxes: 2, active: 1, stopped: 1, vcpu: 2, memory_mb: 1024, disk_gb: 10 },
    reported: { sandboxes: 3, warm_ready: 1, orphans: null },
  });
  held = ['x1'];
  assert.equal((await views.list())[0]!.reported.sandboxes, 1, 'read when asked');
  // Without its machine, the registry's nodes (control's): none registered here.
  assert.equal(new NodeViews(store).mode, 'cluster');
  assert.deepEqual(await new NodeViews(store).list(), []);
  store.close();
});
