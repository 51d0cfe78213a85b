// A node whose lease had run out when this process last read the node list, and which is back
// (another replica may already have placed a sandbox on it): its sandboxes are served at once, not
// a refresh period later; one still away answers NODE_UNAVAILABLE. FakeRuntime behind a real node API.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import { nodeApi } from '../node/node-api.js';
import { SqliteStore } from '../store/sqlite.js';
import type { SandboxRow } from '../store/types/index.js';
import { registeredPlacement } from '../testing/cluster.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { nodeOver } from '../testing/fake-node.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import type { Placement } from './placement.js';

const { signer, verifier } = testClusterKeys();
const store = SqliteStore.open(':memory:');
const capacity = { vcpu: 2, memoryMb: 2048, diskGb: 10, maxSandboxes: 10 };
let dir: string;
let fake: FakeRuntime;
let app: FastifyInstance;
let cluster: Placement;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbd-back-'));
  fake = new FakeRuntime({ socketDir: join(dir, 's') });
  await fake.setupHost();
  app = nodeApi({ node: nodeOver(fake, 'node-z'), byReference: false, auth: verifier });
  await app.listen({ host: '127.0.0.1', port: 0 });
  // Registered with a lease that runs out at once, and no heartbeat.
  await store.nodes.register({ id: 'node-z', url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, capacity }, 1);
  // This process reads the node list once a minute of its own accord.
  await new Promise((r) => setTimeout(r, 20));
  ({ placement: cluster } = await registeredPlacement(store, signer, { refreshMs: 60_000 }));
});

after(async () => {
  await cluster?.close();
  await app?.close();
  await fake?.dispose();
  store.close();
  await rm(dir, { recursive: true, force: true });
});

test("a node back since the last read is served at once; one still away answers NODE_UNAVAILABLE", async () => {
  const id = 'sbbackagain';
  await fake.create({ id, hostname: 'h', lowerDirs: [], layerIds: [], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 }, internetAccess: false, env: {} });
  const now = new Date().toISOString();
  const row: SandboxRow = {
    id, orgId: 'org_a', templateId: 't', templateName: 'base', status: 'running', region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
    vcpu: 1, memoryMb: 256, diskGb: 1, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId: 'node-z', version: 0, deletedReason: null, createdAt: now, updatedAt: now,
    deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
  };
  await store.sandboxes.insert(row);
  await new Promise((r) => setTimeout(r, 300));
  await assert.rejects(cluster.node('node-z').status(id), (e: unknown) => e instanceof ServiceError && e.code === 'NODE_UNAVAILABLE', 'away');
  await store.nodes.heartbeat('node-z', { usage: { sandboxes: 1, vcpu: 1, memoryMb: 256, diskGb: 1 }, warm: {}, layersDigest: null }, 30_000);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await cluster.node('node-z').status(id), 'running', 'back: served without waiting for the next read of the list');
  await fake.destroy(id);
});

test('a create finds a node that registered since the last read, instead of "no node is up"', async () => {
  // A cluster just started: this process read the list before any node had registered.
  const fresh = SqliteStore.open(':memory:');
  const { placement, nodes } = await registeredPlacement(fresh, signer, { refreshMs: 60_000 });
  try {
    assert.deepEqual(await nodes.candidates(), []);
    await fresh.nodes.register({ id: 'node-y', url: 'http://127.0.0.1:9', capacity }, 30_000);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual((await nodes.candidates()).map((c) => c.id), ['node-y'], 'read again when none was up');
  } finally {
    await placement.close();
    fresh.close();
  }
});

test('a take that fails on every node it knows reads the list again: a node back since the last read takes it', async () => {
  // This process read the list while the only node up was one whose process is gone (its lease runs on).
  const fresh = SqliteStore.open(':memory:');
  await fresh.nodes.register({ id: 'node-gone', url: 'http://127.0.0.1:9', capacity }, 60_000);
  const { placement, nodes } = await registeredPlacement(fresh, signer, { refreshMs: 60_000 });
  try {
    assert.deepEqual((await nodes.candidates()).map((c) => c.id), ['node-gone']);
    // node-z comes back (registers, heartbeats) after that read.
    await fresh.nodes.register({ id: 'node-z', url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, capacity }, 30_000);
    await new Promise((r) => setTimeout(r, 300));
    const layer = join(dir, 'layer-back');
    await mkdir(layer, { recursive: true });
    const spec = { id: '', hostname: '', lowerDirs: [layer], layerIds: ['l'], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 }, internetAccess: false, env: {} };
    const placed = await placement.take({ spec, poolId: 'p', label: 'p', env: {}, egress: null });
    assert.equal(placed.nodeId, 'node-z', 'the node back took it, not an error of the gone one');
    await placement.discard(placed);
  } finally {
    await placement.close();
    fresh.close();
  }
});
