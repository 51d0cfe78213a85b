// A take fails over: the node placement chose refuses the connection (its process is gone, its
// lease not yet run out), fails the boot, or answers with an outage, and the next best node takes
// the sandbox. A take that no other node may take fails with the node's own error; an abandoned
// take or a bug is not retried elsewhere. Fake runtimes behind real node APIs, no root.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import type { LocalNode } from '../node/local-node.js';
import { nodeApi } from '../node/node-api.js';
import type { NodeSpec } from '../node/types.js';
import { SqliteStore } from '../store/sqlite.js';
import { registeredPlacement } from '../testing/cluster.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { fakeNode } from '../testing/fake-node.js';
import type { FakeRuntime } from '../testing/fake-runtime.js';
import type { Placement } from './placement.js';
import type { RegisteredNodes } from './registered-nodes.js';

const { signer, verifier } = testClusterKeys();
const store = SqliteStore.open(':memory:');
const capacity = { vcpu: 4, memoryMb: 4096, diskGb: 100, maxSandboxes: 100 };
let dir: string;
let spec: NodeSpec;
const nodes = new Map<string, { node: LocalNode; runtime: FakeRuntime; app?: FastifyInstance; port: number }>();
let placement: Placement;
let registered: RegisteredNodes;
const logs: string[] = [];

async function serve(id: string): Promise<void> {
  const n = nodes.get(id)!;
  n.app = nodeApi({ node: n.node, auth: verifier, byReference: false });
  await n.app.listen({ host: '127.0.0.1', port: n.port });
  n.port = (n.app.server.address() as AddressInfo).port;
  await store.nodes.register({ id, url: `http://127.0.0.1:${n.port}`, capacity }, 60_000);
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbd-failover-'));
  const layer = join(dir, 'layer');
  await mkdir(layer);
  spec = { id: '', hostname: '', lowerDirs: [layer], layerIds: ['l'], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 }, internetAccess: false, env: {} };
  for (const id of ['node-a', 'node-b']) {
    const { node, runtime } = fakeNode({ socketDir: join(dir, id), id });
    await runtime.setupHost();
    nodes.set(id, { node, runtime, port: 0 });
    await serve(id);
  }
  ({ placement, nodes: registered } = await registeredPlacement(store, signer, { refreshMs: 50, log: (l) => logs.push(l) }));
});

after(async () => {
  await placement?.close();
  for (const n of nodes.values()) {
    await n.app?.close();
    await n.node.close();
    await n.runtime.dispose();
  }
  store.close();
  await rm(dir, { recursive: true, force: true });
});

const take = (signal?: AbortSignal) => placement.take({ spec, poolId: 'p', label: 'p', env: {}, egress: null, signal });

test('both nodes empty: node-a first (by name); node-a refuses the connection (its process gone, its lease running): node-b takes it', async () => {
  const first = await take();
  assert.equal(first.nodeId, 'node-a');
  await placement.discard(first);
  const a = nodes.get('node-a')!;
  await a.app!.close();
  try {
    const t0 = performance.now();
    const got = await take();
    assert.equal(got.nodeId, 'node-b', 'failed over');
    assert.ok(performance.now() - t0 < 2000, 'at once, not after the lease');
    assert.ok(logs.some((l) => /node node-a could not take a sandbox/.test(l)), logs.join('\n'));
    assert.equal(await nodes.get('node-b')!.runtime.status(got.id), 'running');
    await placement.discard(got);
  } finally {
    await serve('node-a');
    await registered.refresh(true);
  }
});

test("a node whose boots fail (an outage there): the next node takes it, and the failed node's leftovers are its own to undo", async () => {
  const a = nodes.get('node-a')!;
  const heal = a.runtime.failOn('create', new Error('the disk is full'));
  try {
    const got = await take();
    assert.equal(got.nodeId, 'node-b');
    assert.deepEqual(await a.runtime.list(), [], 'node-a undid its failed boot');
    await placement.discard(got);
  } finally {
    heal();
  }
});

test('when every node fails, the take fails with the last node\'s error, not NO_CAPACITY; each node is asked once', async () => {
  const heals = [...nodes.values()].map((n) => n.runtime.failOn('create', new Error('no room on the disk')));
  logs.length = 0;
  try {
    await assert.rejects(take(), (err: unknown) => !(err instanceof ServiceError && err.code === 'NO_CAPACITY'));
    assert.equal(logs.filter((l) => /could not take a sandbox/.test(l)).length, 1, 'one failover, then no node left to ask');
  } finally {
    for (const h of heals) h();
  }
});

test('a node that takes the connection and then says nothing (its process stopped, SIGSTOP) is given up within seconds, not at its lease, and the next node takes it', async () => {
  // A listening socket whose process does not answer: the kernel takes the connection, no one reads.
  const hung = createServer(() => undefined);
  await new Promise<void>((r) => hung.listen(0, '127.0.0.1', r));
  await store.nodes.register({ id: 'node-0-hung', url: `http://127.0.0.1:${(hung.address() as AddressInfo).port}`, capacity }, 60_000);
  await registered.refresh(true);
  logs.length = 0;
  try {
    const t0 = performance.now();
    const got = await take();
    const ms = performance.now() - t0;
    assert.notEqual(got.nodeId, 'node-0-hung');
    assert.ok(ms < 6000, `failed over after ${Math.round(ms)} ms (the hung node's lease runs 60 s)`);
    assert.ok(logs.some((l) => /node node-0-hung could not take a sandbox/.test(l)), logs.join('\n'));
    await placement.discard(got);
  } finally {
    await store.nodes.remove('node-0-hung');
    await registered.refresh(true);
    hung.closeAllConnections();
    await new Promise((r) => hung.close(r));
  }
});

test('an abandoned take is not asked of another node', async () => {
  const ac = new AbortController();
  ac.abort();
  logs.length = 0;
  await assert.rejects(take(ac.signal), (err: unknown) => err instanceof ServiceError && err.code === 'INVALID_STATE');
  assert.deepEqual(logs.filter((l) => /could not take/.test(l)), []);
});
