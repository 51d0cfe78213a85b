import assert from 'node:assert/strict';
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import { NodeMembership } from '../node/membership.js';
import { nodeApi } from '../node/node-api.js';
import type { Node } from '../node/types.js';
import { SqliteStore } from '../store/sqlite.js';
import { registeredPlacement } from '../testing/cluster.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { nodeOver } from '../testing/fake-node.js';
import { baseLayer } from '../testing/fixtures.js';
import { assertNoLeaks, createTestRuntime, testSpec, type TestRuntime } from '../testing/runtime-fixtures.js';
import type { Placement } from './placement.js';
import type { RegisteredNodes } from './registered-nodes.js';

const { signer, verifier } = testClusterKeys();
const LEASE_MS = 1500;

interface TestNode {
  id: string;
  t: TestRuntime;
  app?: FastifyInstance;
  port: number;
  membership: NodeMembership;
}

/** /health of a sandbox's agent through its node. */
async function health(node: Node, id: string): Promise<number> {
  const sock = await node.dialAgent(id, 5000);
  return new Promise((resolve, reject) => {
    const req = request({ createConnection: () => sock, path: '/health', headers: { host: 'agent' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('Placement over registered nodes (CrunRuntime behind real node APIs), and nodes that go away', { timeout: 300_000 }, () => {
  const store = SqliteStore.open(':memory:');
  const nodes: TestNode[] = [];
  let lower: string;
  let cluster: Placement;
  let nodes_: RegisteredNodes;

  const serveNode = async (n: TestNode) => {
    n.app = nodeApi({ node: nodeOver(n.t.rt, n.id), byReference: false, auth: verifier });
    await n.app.listen({ host: '127.0.0.1', port: n.port });
    n.port = (n.app.server.address() as AddressInfo).port;
  };

  before(async () => {
    lower = (await baseLayer()).path;
    for (const id of ['node-a', 'node-b']) {
      const t = await createTestRuntime();
      const n: TestNode = { id, t, port: 0, membership: undefined as unknown as NodeMembership };
      await serveNode(n);
      n.membership = new NodeMembership({ store, node: t.rt, id, url: `http://127.0.0.1:${n.port}`, capacity: { vcpu: 2, memoryMb: 1024, diskGb: 20, maxSandboxes: 3 }, leaseMs: LEASE_MS });
      await n.membership.start();
      nodes.push(n);
    }
    ({ placement: cluster, nodes: nodes_ } = await registeredPlacement(store, signer, { refreshMs: 100 }));
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

  const spec = () => ({ ...testSpec('', [lower], { resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 128 }, layerIds: ['base'] }), env: {} });
  /** A sandbox as a create takes it. */
  const take = () => cluster.take({ spec: spec(), poolId: 'base', label: 'base', env: {}, egress: null });
  /** Where each sandbox is, as its row says. */
  const on = new Map<string, string>();
  const nodeOf = (id: string) => cluster.node(on.get(id)!);
  /** What the services do once a sandbox is handed out: its row, on its node. */
  const record = async ({ id, nodeId }: { id: string; nodeId: string }) => {
    on.set(id, nodeId);
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
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const t = await take();
      ids.push(t.id);
      placed.push(await record(t));
      assert.equal(await health(nodeOf(t.id), t.id), 200);
    }
    assert.deepEqual(placed.slice().sort(), ['node-a', 'node-a', 'node-b', 'node-b'], 'two on each: the least committed node first');
    for (const n of nodes) assert.deepEqual((await n.t.rt.list()).length, 2, `${n.id} holds what placement says`);
    assert.deepEqual((await cluster.list()).map((l) => l.id).sort(), ids.slice().sort());
    const st = await nodeOf(ids[0]!).statuses([ids[0]!, 'nosuch']);
    assert.deepEqual([...st], [[ids[0], 'running'], ['nosuch', 'missing']]);
  });

  test('a cordoned node takes nothing new; with no room anywhere a create is 503 NO_CAPACITY', async () => {
    await store.nodes.setStatus('node-b', 'cordoned');
    await nodes_.refresh(true);
    assert.equal(await record(await take()), 'node-a', 'node-b is cordoned');
    // node-a now holds 3 of its 3; node-b is cordoned.
    const before = (await cluster.list()).length;
    await assert.rejects(take(), (err: unknown) => err instanceof ServiceError && err.code === 'NO_CAPACITY' && err.status === 503);
    assert.equal((await cluster.list()).length, before, 'a refused take makes nothing');
    await store.nodes.setStatus('node-b', 'active');
    await nodes_.refresh(true);
    assert.equal(await record(await take()), 'node-b');
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
        await cluster.node('node-b').status(onB[0]!);
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
    await assert.rejects(cluster.node('node-b').dialAgent(onB[0]!), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE');
    assert.equal(await health(cluster.node('node-a'), onA[0]!), 200, "node-a's sandboxes are served as before");
    // The sandboxes on node-b kept running; a new node process serves them again.
    assert.equal(await b.t.rt.status(onB[0]!), 'running');
    await serveNode(b);
    b.membership = new NodeMembership({ store, node: b.t.rt, id: 'node-b', url: `http://127.0.0.1:${b.port}`, capacity: { vcpu: 2, memoryMb: 1024, diskGb: 20, maxSandboxes: 3 }, leaseMs: LEASE_MS });
    await b.membership.start();
    await nodes_.refresh(true);
    for (const id of onB) assert.equal(await health(cluster.node('node-b'), id), 200, `${id} is served again`);
  });

  test('destroy goes to the node that holds the sandbox; an unknown id is already gone', async () => {
    for (const { id, nodeId } of await cluster.list()) {
      await cluster.node(nodeId).destroy(id);
      await store.sandboxes.remove(id);
    }
    await cluster.node('node-a').destroy('nosuch');
    assert.deepEqual(await cluster.list(), []);
    for (const n of nodes) assert.deepEqual(await n.t.rt.list(), []);
  });
});
