// Placement of a create that asks the nodes' warm pools: among nodes about as committed, a node that
// reported a ready sandbox of the key comes first, for as many as it reported; one well ahead in
// commitment does not, nor one without room or cordoned. Nodes
// are FakeRuntimes behind real node APIs, each with its warm pool, reporting as heartbeats do.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { LocalNode } from '../node/local-node.js';
import { NodeMembership } from '../node/membership.js';
import { nodeApi } from '../node/node-api.js';
import { RemoteNode } from '../node/remote-node.js';
import { warmKeyOf } from '../node/warm-key.js';
import type { SandboxSpec } from '../runtime/types.js';
import { SqliteStore } from '../store/sqlite.js';
import type { SandboxRow } from '../store/types/index.js';
import { registeredPlacement } from '../testing/cluster.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { nodeOver } from '../testing/fake-node.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import type { Placed, Placement } from './placement.js';
import type { RegisteredNodes } from './registered-nodes.js';

const { signer, verifier } = testClusterKeys();
const L1 = 'a'.repeat(64);
const store = SqliteStore.open(':memory:');
let dir: string;
let layerDir: string;
const apps: FastifyInstance[] = [];
const pools = new Map<string, LocalNode>();
const members = new Map<string, NodeMembership>();
const fakes = new Map<string, FakeRuntime>();
/** Both hold the layer (their layer sets say so). */
const held: Record<string, string[]> = { 'node-a': [L1], 'node-b': [L1] };
let cluster: Placement;
let registered: RegisteredNodes;
const POOL = { id: 'tpl-base', label: 'base' };

function spec(): SandboxSpec {
  return {
    id: '',
    hostname: '',
    lowerDirs: [layerDir],
    layerIds: [L1],
    resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 512 },
    internetAccess: false,
    env: { PATH: '/usr/bin:/bin' },
  };
}
const KEY = () => warmKeyOf(spec(), POOL.id).key;
/** A create's take of a sandbox of `s`. */
const take = (s = spec()) => cluster.take({ spec: s, poolId: POOL.id, label: POOL.label, env: {}, egress: null });

async function until(what: string, check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  for (const t0 = Date.now(); !(await check()); ) {
    if (Date.now() - t0 > ms) assert.fail(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbd-wplace-'));
  layerDir = join(dir, 'layer');
  await mkdir(layerDir);
  for (const id of ['node-a', 'node-b']) {
    const fake = new FakeRuntime({ socketDir: join(dir, id) });
    await fake.setupHost();
    fakes.set(id, fake);
    // node-b keeps one ready per key asked; node-a keeps none (every ask boots).
    const layerIds = async () => held[id]!;
    const pool = nodeOver(fake, id, { pool: { minPerKey: id === 'node-b' ? 1 : 0, maxMemoryMb: 1000, horizonSeconds: 0, shrinkAfterMs: 60_000, bootConcurrency: 2, refillDelayMs: 0, tickMs: 0 }, layerIds });
    pools.set(id, pool);
    const app = nodeApi({ node: pool, byReference: false, auth: verifier });
    await app.listen({ host: '127.0.0.1', port: 0 });
    apps.push(app);
    const m = new NodeMembership({
      store,
      node: pool,
      id,
      url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
      capacity: { vcpu: 4, memoryMb: 4096, diskGb: 100, maxSandboxes: 100 },
      leaseMs: 30_000,
      layers: layerIds,
      warm: () => pool.readyByKey(),
    });
    await m.start();
    await m.beat();
    members.set(id, m);
  }
  ({ placement: cluster, nodes: registered } = await registeredPlacement(store, signer, { refreshMs: 50 }));
  // node-b's pool has been asked once for the key, so it keeps one ready from now on.
  const url = `http://127.0.0.1:${(apps[1]!.server.address() as AddressInfo).port}`;
  const primed = await new RemoteNode({ id: 'node-b', url, auth: signer }).take({ spec: spec(), poolId: POOL.id, label: POOL.label, env: {}, egress: null });
  await fakes.get('node-b')!.destroy(primed.id);
});

after(async () => {
  await cluster?.close();
  for (const m of members.values()) m.stop();
  for (const p of pools.values()) await p.close();
  for (const a of apps) await a.close();
  for (const f of fakes.values()) await f.dispose();
  store.close();
  await rm(dir, { recursive: true, force: true });
});

/** A sandbox of `memoryMb` (and `diskGb`) recorded on `nodeId` (what commits the node). */
async function commit(id: string, nodeId: string, memoryMb: number, diskGb = 1): Promise<void> {
  const now = new Date().toISOString();
  const row: SandboxRow = {
    id, orgId: 'org_a', templateId: 't', templateName: 'base', status: 'running', region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
    vcpu: 1, memoryMb, diskGb, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId, version: 0, deletedReason: null, createdAt: now, updatedAt: now,
    deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
  };
  await store.sandboxes.insert(row);
}

/** node-b's pool holds one ready, and the cluster has read its report of it. */
async function readyOnB(): Promise<void> {
  await until("node-b's pool refilled", () => pools.get('node-b')!.readyByKey()[KEY()] === 1);
  await members.get('node-b')!.beat();
  await registered.refresh(true);
  assert.equal(registered.known().find((n) => n.id === 'node-b')?.warm[KEY()], 1);
}

const res = () => spec().resources;

test('a node with a ready sandbox of the key comes first among nodes about as committed, for as many as it reported', async () => {
  // node-b: 100 MB more committed (2.4 %): by commitment, node-a.
  await commit('sb-b1', 'node-b', 100);
  assert.equal(await cluster.choose(res(), [L1]), 'node-a', 'by commitment: node-a');
  await readyOnB();
  assert.equal(await cluster.choose(res(), [L1], KEY()), 'node-b', 'its ready sandbox first');
  assert.equal(await cluster.choose(res(), [L1], warmKeyOf({ ...spec(), internetAccess: true }, POOL.id).key), 'node-a', 'not for another key');

  assert.ok(cluster.warmStats().ready >= 1, "the metrics' gauge counts the nodes' ready sandboxes");
  const { hits, misses } = cluster.warmStats();
  const first = await take();
  assert.equal(first.warm, true, 'served from the pool');
  assert.deepEqual([cluster.warmStats().hits, cluster.warmStats().misses], [hits + 1, misses], 'a hit for the metrics');
  assert.equal(first.nodeId, 'node-b');
  assert.equal(await fakes.get('node-b')!.status(first.id), 'running');
  // node-b reported one and this process took it: the next goes by commitment, until
  // node-b reports again (a burst does not pile onto one node's pool).
  const next = await take();
  assert.equal(next.warm, false, "node-a's pool keeps none: booted for the ask");
  assert.deepEqual([cluster.warmStats().hits, cluster.warmStats().misses], [hits + 1, misses + 1], 'a miss for the metrics');
  assert.equal(next.nodeId, 'node-a');
  assert.equal(await fakes.get('node-a')!.status(next.id), 'running');
  for (const x of [first, next]) await cluster.discard(x);

  // Well ahead in commitment (100 + 300 MB, 10 %), a ready sandbox no longer draws the create.
  await readyOnB();
  await commit('sb-b2', 'node-b', 300);
  assert.equal(await cluster.choose(res(), [L1], KEY()), 'node-a', 'the preference is bounded');
  await store.sandboxes.remove('sb-b2');
  assert.equal(await cluster.choose(res(), [L1], KEY()), 'node-b');
});

test('a node with a ready sandbox but no room for the sandbox, or cordoned, is not picked for it', async () => {
  await readyOnB();
  // node-b's disk full (100 GB): no room, whatever it holds ready.
  await commit('sb-b3', 'node-b', 16, 99);
  assert.equal(await cluster.choose(res(), [L1], KEY()), 'node-a', 'no room on node-b');
  await store.sandboxes.remove('sb-b3');
  assert.equal(await cluster.choose(res(), [L1], KEY()), 'node-b', 'room again');
  await store.nodes.setStatus('node-b', 'cordoned');
  await registered.refresh(true);
  assert.equal(await cluster.choose(res(), [L1], KEY()), 'node-a', 'cordoned');
  await store.nodes.setStatus('node-b', 'active');
  await registered.refresh(true);
});

test('a burst of asks at once spreads over the nodes: each placement counts the ones before it', async () => {
  const placed: Placed[] = await Promise.all(Array.from({ length: 8 }, () => take({ ...spec(), internetAccess: true })));
  const on = (n: string) => placed.filter((p) => p.nodeId === n).length;
  const [a, b] = [on('node-a'), on('node-b')];
  assert.equal(a + b, 8);
  assert.ok(a >= 3 && b >= 3, `node-a ${a}, node-b ${b}`);
  for (const p of placed) await cluster.discard(p);
});

test('a template dropped through placement (deleted) leaves no ready sandbox of it on any node', async () => {
  await readyOnB();
  const before = pools.get('node-b')!.held();
  assert.ok(before.length >= 1);
  await cluster.dropWarm(POOL.id);
  assert.deepEqual(pools.get('node-b')!.readyByKey(), {}, 'every key of the template');
  for (const id of before) assert.equal(await fakes.get('node-b')!.status(id), 'missing');
});
