// Placement prefers a node that already holds a sandbox's layers (it boots without fetching them),
// as long as it is not much more committed than the least committed node. Nodes are FakeRuntimes
// behind real node APIs (no root, no container); their layers are reported as heartbeats do.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { NodeMembership } from '../node/membership.js';
import { nodeApi } from '../node/node-api.js';
import { SqliteStore } from '../store/sqlite.js';
import type { SandboxRow } from '../store/types/index.js';
import { registeredPlacement } from '../testing/cluster.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { nodeOver } from '../testing/fake-node.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import type { Placement } from './placement.js';
import type { RegisteredNodes } from './registered-nodes.js';

const { signer, verifier } = testClusterKeys();
const L1 = 'a'.repeat(64);
const L2 = 'b'.repeat(64);
const store = SqliteStore.open(':memory:');
let dir: string;
const apps: FastifyInstance[] = [];
const members: NodeMembership[] = [];
const held: Record<string, string[]> = { 'node-a': [], 'node-b': [L1, L2] };
let cluster: Placement;
let registered: RegisteredNodes;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbd-placement-'));
  for (const id of ['node-a', 'node-b']) {
    const fake = new FakeRuntime({ socketDir: join(dir, id) });
    await fake.setupHost();
    const layerIds = async () => held[id]!;
    const app = nodeApi({ node: nodeOver(fake, id, { layerIds }), byReference: false, auth: verifier });
    await app.listen({ host: '127.0.0.1', port: 0 });
    apps.push(app);
    const m = new NodeMembership({
      store,
      node: fake,
      id,
      url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
      capacity: { vcpu: 4, memoryMb: 4096, diskGb: 100, maxSandboxes: 100 },
      leaseMs: 30_000,
      layers: layerIds,
    });
    await m.start();
    await m.beat();
    members.push(m);
  }
  ({ placement: cluster, nodes: registered } = await registeredPlacement(store, signer, { refreshMs: 50 }));
});

after(async () => {
  await cluster?.close();
  for (const m of members) m.stop();
  for (const a of apps) await a.close();
  store.close();
  await rm(dir, { recursive: true, force: true });
});

/** A sandbox of `memoryMb` recorded on `nodeId` (what commits the node). */
async function commit(id: string, nodeId: string, memoryMb: number): Promise<void> {
  const now = new Date().toISOString();
  const row: SandboxRow = {
    id, orgId: 'org_a', templateId: 't', templateName: 'base', status: 'running', region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
    vcpu: 1, memoryMb, diskGb: 1, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId, version: 0, deletedReason: null, createdAt: now, updatedAt: now,
    deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
  };
  await store.sandboxes.insert(row);
}

async function layersRead(): Promise<void> {
  // The layer sets are read in the background once a heartbeat's digest is seen. A set not read
  // yet counts as holding everything, so both nodes' sets are read once a layer neither holds goes
  // to node-a (node-b's read) and one only node-b holds goes to node-b (node-a's read).
  const res = { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 };
  for (let i = 0; i < 250; i++) {
    await registered.refresh(true);
    if ((await cluster.choose(res, [L1])) === 'node-b' && (await cluster.choose(res, ['c'.repeat(64)])) === 'node-a') return;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail("the nodes' layer sets were not read within 5 s");
}

test('a node holding all the layers is preferred while it is at most a tenth more committed; past that, the least committed', async () => {
  const res = { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 };
  await layersRead();
  // Equal commitments: the node with the layers, not the first by name.
  assert.equal(await cluster.choose(res, [L1]), 'node-b');
  assert.equal(await cluster.choose(res, [L1, L2]), 'node-b');
  // Not all of them, or none asked: the least committed (then by name).
  assert.equal(await cluster.choose(res, [L1, 'c'.repeat(64)]), 'node-a');
  assert.equal(await cluster.choose(res), 'node-a');
  // node-b 8 % more committed: still preferred for its layers.
  await commit('sb-b1', 'node-b', Math.round(4096 * 0.08));
  assert.equal(await cluster.choose(res, [L1]), 'node-b');
  // 12 % more: the other node, which then fetches the layers.
  await commit('sb-b2', 'node-b', Math.round(4096 * 0.04));
  assert.equal(await cluster.choose(res, [L1]), 'node-a');
});

test('a node whose layers change reports a new digest, and placement follows', async () => {
  const res = { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 };
  // node-a more committed (18 %) than node-b (12 %): only its layer makes it the choice.
  await commit('sb-a1', 'node-a', Math.round(4096 * 0.18));
  assert.equal(await cluster.choose(res, ['d'.repeat(64)]), 'node-b');
  held['node-a'] = [L1];
  await members[0]!.beat();
  const d = 'd'.repeat(64);
  held['node-a'] = [L1, d];
  await members[0]!.beat();
  let placed = '';
  for (let i = 0; i < 100 && placed !== 'node-a'; i++) {
    await registered.refresh(true);
    placed = await cluster.choose(res, [d]);
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(placed, 'node-a', 'the node that fetched a layer is preferred for it');
});

test("a take placed with the read its prepare() began counts what this process recorded since: a burst sharing one read is not piled on one node", async () => {
  const { placement: c } = await registeredPlacement(store, signer, { refreshMs: 50, usageReuseMs: 60_000 });
  try {
    for (const r of await store.sandboxes.live()) await store.sandboxes.remove(r.id);
    const layer = await mkdtemp(join(dir, 'layer-'));
    const spec = {
      id: '',
      hostname: '',
      lowerDirs: [layer],
      // A layer both nodes hold: whether or not their layer sets (read in the background) are in,
      // it does not break the tie.
      layerIds: [L1],
      resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 },
      internetAccess: false,
      env: {},
    };
    // The read begins with both nodes empty: a tie, which node-a wins by name.
    c.prepare();
    const first = await c.take({ spec, poolId: 'tpl', label: 'tpl', env: {}, egress: null });
    assert.equal(first.nodeId, 'node-a');
    await commit(first.id, first.nodeId, 256);
    c.recorded(first.id);
    // The read (begun before the row) does not hold it; placement counts it all the same.
    assert.equal(await c.choose(spec.resources), 'node-b');
    await c.node(first.nodeId).destroy(first.id);
    await store.sandboxes.remove(first.id);
  } finally {
    await c.close();
  }
});
