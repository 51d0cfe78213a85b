import assert from 'node:assert/strict';
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import { nodeApi } from '../node/node-api.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import type { Runtime } from '../runtime/types.js';
import { SqliteStore } from '../store/sqlite.js';
import { baseLayer } from '../testing/fixtures.js';
import { assertNoLeaks, createTestRuntime, testSpec, type TestRuntime } from '../testing/runtime-fixtures.js';
import { ClusterRuntime } from './cluster-runtime.js';
import { NodeMembership } from './node-membership.js';

const { signer, verifier } = testClusterKeys();
const LEASE_MS = 1500;

interface TestNode {
  id: string;
  t: TestRuntime;
  app?: FastifyInstance;
  port: number;
  membership: NodeMembership;
}

/** /health of a sandbox's agent through the cluster's dialer. */
async function health(rt: Runtime, id: string): Promise<number> {
  const sock = await rt.dialAgent(id, 5000);
  return new Promise((resolve, reject) => {
    const req = request({ createConnection: () => sock, path: '/health', headers: { host: 'agent' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('ClusterRuntime: placement over registered nodes, and nodes that go away', { timeout: 300_000 }, () => {
  const store = SqliteStore.open(':memory:');
  const nodes: TestNode[] = [];
  let lower: string;
  let cluster: ClusterRuntime;

  const serveNode = async (n: TestNode) => {
    n.app = nodeApi({ nodeId: n.id, runtime: n.t.rt, auth: verifier });
    await n.app.listen({ host: '127.0.0.1', port: n.port });
    n.port = (n.app.server.address() as AddressInfo).port;
  };

  before(async () => {
    lower = (await baseLayer()).path;
    for (const id of ['node-a', 'node-b']) {
      const t = await createTestRuntime();
      const n: TestNode = { id, t, port: 0, membership: undefined as unknown as NodeMembership };
      await serveNode(n);
      n.membership = new NodeMembership({ store, runtime: t.rt, id, url: `http://127.0.0.1:${n.port}`, capacity: { vcpu: 2, memoryMb: 1024, diskGb: 20, maxSandboxes: 3 }, leaseMs: LEASE_MS });
      await n.membership.start();
      nodes.push(n);
    }
    cluster = new ClusterRuntime({ store, auth: signer, refreshMs: 100 });
    await cluster.setupHost();
  });

  after(async () => {
    await cluster?.close();
    for (const n of nodes) {
      n.membership.stop();
      await n.app?.close();
      for (const id of await n.t.rt.list()) await n.t.rt.destroy(id);
      await assertNoLeaks(n.t.rt);
      await n.t.teardown();
    }
    store.close();
  });

  const spec = (id: string) => testSpec(id, [lower], { resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 128 } });
  /** What the services do once a sandbox is handed out: its row, on its node. */
  const record = async (id: string) => {
    const nodeId = cluster.nodeOf(id)!;
    const now = new Date().toISOString();
    await store.sandboxes.insert({
      id, orgId: 'org_a', templateId: 't', templateName: 'base', status: 'running', region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
      vcpu: 1, memoryMb: 256, diskGb: 1, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId, version: 0, deletedReason: null, createdAt: now, updatedAt: now,
      deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
    });
    cluster.recorded(id);
    return nodeId;
  };

  test('creates spread over the nodes by what they hold; each sandbox is reached on its node', async () => {
    const placed: string[] = [];
    for (const id of ['cl1', 'cl2', 'cl3', 'cl4']) {
      await cluster.create(spec(id));
      placed.push(await record(id));
      assert.equal(await health(cluster, id), 200);
    }
    assert.deepEqual(placed.slice().sort(), ['node-a', 'node-a', 'node-b', 'node-b'], 'two on each: the least committed node first');
    for (const n of nodes) assert.deepEqual((await n.t.rt.list()).length, 2, `${n.id} holds what placement says`);
    assert.deepEqual(await cluster.list(), ['cl1', 'cl2', 'cl3', 'cl4']);
    const st = await cluster.statuses(['cl1', 'cl4', 'nosuch']);
    assert.deepEqual([...st], [['cl1', 'running'], ['cl4', 'running'], ['nosuch', 'missing']]);
  });

  test('a cordoned node takes nothing new; with no room anywhere a create is 503 NO_CAPACITY', async () => {
    await store.nodes.setStatus('node-b', 'cordoned');
    await cluster.refresh(true);
    await cluster.create(spec('cl5'));
    assert.equal(await record('cl5'), 'node-a', 'node-b is cordoned');
    // node-a now holds 3 of its 3; node-b is cordoned.
    await assert.rejects(cluster.create(spec('cl6')), (err: unknown) => err instanceof ServiceError && err.code === 'NO_CAPACITY' && err.status === 503);
    assert.equal(cluster.nodeOf('cl6'), undefined, 'a refused create leaves no placement');
    await store.nodes.setStatus('node-b', 'active');
    await cluster.refresh(true);
    await cluster.create(spec('cl6'));
    assert.equal(await record('cl6'), 'node-b');
  });

  test('a node whose lease ran out: its sandboxes answer NODE_UNAVAILABLE, the others go on; back, it serves them again', async () => {
    const b = nodes.find((n) => n.id === 'node-b')!;
    const onB = (await store.sandboxes.live('node-b')).map((r) => r.id);
    const onA = (await store.sandboxes.live('node-a')).map((r) => r.id);
    b.membership.stop();
    await b.app!.close();
    const t0 = Date.now();
    let lostAfterMs = 0;
    for (;;) {
      try {
        await cluster.status(onB[0]!);
      } catch (err) {
        if (err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE') {
          lostAfterMs = Date.now() - t0;
          break;
        }
      }
      assert.ok(Date.now() - t0 < 4 * LEASE_MS, 'reported unavailable within a few lease periods');
      await sleep(50);
    }
    assert.ok(lostAfterMs <= 2 * LEASE_MS + 500, `unavailable after ${lostAfterMs} ms (lease ${LEASE_MS} ms)`);
    await assert.rejects(cluster.dialAgent(onB[0]!), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE');
    assert.equal(await health(cluster, onA[0]!), 200, "node-a's sandboxes are served as before");
    // The sandboxes on node-b kept running; a new node process serves them again.
    assert.equal(await b.t.rt.status(onB[0]!), 'running');
    await serveNode(b);
    b.membership = new NodeMembership({ store, runtime: b.t.rt, id: 'node-b', url: `http://127.0.0.1:${b.port}`, capacity: { vcpu: 2, memoryMb: 1024, diskGb: 20, maxSandboxes: 3 }, leaseMs: LEASE_MS });
    await b.membership.start();
    await cluster.refresh(true);
    for (const id of onB) assert.equal(await health(cluster, id), 200, `${id} is served again`);
  });

  test('destroy goes to the node that holds the sandbox; an unknown id is already gone', async () => {
    for (const id of await cluster.list()) {
      await cluster.destroy(id);
      await store.sandboxes.remove(id);
    }
    await cluster.destroy('nosuch');
    assert.deepEqual(await cluster.list(), []);
    for (const n of nodes) assert.deepEqual(await n.t.rt.list(), []);
  });
});
