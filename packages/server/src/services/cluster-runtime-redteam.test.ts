// Red team of ClusterRuntime: a compromised node claims another node's sandboxes (in its listing,
// in its OOM events). Control must keep sending each sandbox's calls, and its agent's traffic, to
// the node its row names, and take OOM reports only from the node that holds the sandbox. The
// hostile node (node-zzz) is listed after the honest one (the registry lists by id), so it speaks last.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { nodeApi } from '../node/node-api.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import type { SandboxSpec } from '../runtime/types.js';
import { SqliteStore } from '../store/sqlite.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { ClusterRuntime } from './cluster-runtime.js';

describe('ClusterRuntime: a node that claims what is not its own', { timeout: 60_000 }, () => {
  const store = SqliteStore.open(':memory:');
  const { signer, verifier } = testClusterKeys();
  const capacity = { vcpu: 8, memoryMb: 8192, diskGb: 100, maxSandboxes: 100 };
  let dir: string;
  let fake: FakeRuntime;
  let good: FastifyInstance;
  let evil: Server;
  const evilSaw: string[] = [];
  let cluster: ClusterRuntime;
  let spec: SandboxSpec;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-cluster-red-'));
    fake = new FakeRuntime({ socketDir: join(dir, 's') });
    await fake.setupHost();
    good = nodeApi({ nodeId: 'node-good', runtime: fake, auth: verifier });
    await good.listen({ host: '127.0.0.1', port: 0 });
    evil = createServer((req, res) => {
      evilSaw.push(`${req.method} ${req.url}`);
      res.setHeader('content-type', 'application/json');
      if (req.url === '/node/v1/sandboxes') return res.end(JSON.stringify({ ids: ['victim'] }));
      // Asked for a ready sandbox, it hands over the id of another node's.
      if (req.url === '/node/v1/warm') return res.end(JSON.stringify({ id: 'victim', warm: true }));
      if (req.url === '/node/v1/oom-events') {
        res.setHeader('content-type', 'text/event-stream');
        return res.write('data: {"id":"victim","kills":1}\n\n');
      }
      res.end(JSON.stringify({ status: 'missing' }));
    });
    evil.on('connect', (req, socket) => {
      evilSaw.push(`CONNECT ${req.url}`);
      socket.end('HTTP/1.1 200 Connection Established\r\n\r\n');
    });
    await new Promise<void>((r) => evil.listen(0, '127.0.0.1', r));
    await store.nodes.register({ id: 'node-good', url: `http://127.0.0.1:${(good.server.address() as AddressInfo).port}`, capacity }, 60_000);
    await store.nodes.register({ id: 'node-zzz', url: `http://127.0.0.1:${(evil.address() as AddressInfo).port}`, capacity }, 60_000);
    await store.nodes.setStatus('node-zzz', 'cordoned');
    cluster = new ClusterRuntime({ store, auth: signer, refreshMs: 0 });
    await cluster.setupHost();
    spec = { id: 'victim', lowerDirs: [dir], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 }, internetAccess: false, hostname: 'victim', env: {} };
    await cluster.create(spec);
    const now = new Date().toISOString();
    await store.sandboxes.insert({
      id: 'victim', orgId: 'org_a', templateId: 't', templateName: 'base', status: 'running', region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
      vcpu: 1, memoryMb: 256, diskGb: 1, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId: cluster.nodeOf('victim')!, version: 0, deletedReason: null, createdAt: now, updatedAt: now,
      deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
    });
    cluster.recorded('victim');
  });

  after(async () => {
    await cluster?.close();
    await fake?.destroy('victim').catch(() => undefined);
    await good?.close();
    evil?.closeAllConnections();
    await new Promise((r) => evil?.close(r));
    await fake?.dispose();
    store.close();
    await rm(dir, { recursive: true, force: true });
  });

  test("a listing that names another node's sandbox does not move it there", async () => {
    assert.equal((await store.sandboxes.byId('victim'))?.nodeId, 'node-good');
    assert.deepEqual(await cluster.list(), ['victim']);
    assert.equal(await cluster.status('victim'), 'running', 'asked of the node that holds it');
    const s = await cluster.dialAgent('victim', 2000);
    s.destroy();
    // A control that starts afresh (its first call a listing, as reconcile does) is not fooled either.
    const fresh = new ClusterRuntime({ store, auth: signer, refreshMs: 0 });
    await fresh.setupHost();
    await fresh.list();
    assert.equal(await fresh.status('victim'), 'running');
    (await fresh.dialAgent('victim', 2000)).destroy();
    await fresh.close();
    assert.deepEqual(evilSaw.filter((r) => r.includes('victim')), [], 'the hostile node saw nothing of the victim');
  });

  test("a ready sandbox answered with another node's sandbox id is refused, and the sandbox stays where it is", async () => {
    await store.nodes.setStatus('node-zzz', 'active');
    await store.nodes.setStatus('node-good', 'cordoned');
    try {
      await assert.rejects(
        cluster.takeReady({ ...spec, id: 'sb', hostname: 'sandbox-' }, { id: 't', label: 'base' }),
        (e: unknown) => e instanceof ServiceError && e.code === 'RUNTIME_ERROR',
      );
      assert.ok(evilSaw.includes('POST /node/v1/warm'), 'the hostile node was asked');
    } finally {
      await store.nodes.setStatus('node-good', 'active');
      await store.nodes.setStatus('node-zzz', 'cordoned');
    }
    assert.equal(cluster.wasWarm('victim'), false);
    assert.equal(await cluster.status('victim'), 'running', 'still asked of the node that holds it');
    (await cluster.dialAgent('victim', 2000)).destroy();
    assert.deepEqual(evilSaw.filter((r) => r.includes('victim')), [], 'the hostile node saw nothing of the victim');
  });

  test("an OOM report for another node's sandbox is not passed on", async () => {
    const got: string[] = [];
    const stop = cluster.watchOom((id) => got.push(id));
    try {
      for (let i = 0; i < 20 && !evilSaw.includes('GET /node/v1/oom-events'); i++) await sleep(50);
      assert.ok(evilSaw.includes('GET /node/v1/oom-events'));
      await sleep(300);
      assert.deepEqual(got, []);
      fake.triggerOom('victim');
      for (let i = 0; i < 40 && got.length === 0; i++) await sleep(50);
      assert.deepEqual(got, ['victim'], 'the node that holds it is heard');
    } finally {
      stop();
    }
  });
});
