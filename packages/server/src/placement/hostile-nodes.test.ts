// A compromised node claims another node's sandboxes (in its listing, in its answer to a take, in
// its OOM events). Control must keep sending each sandbox's calls, and its agent's traffic, to the
// node its row names, refuse a "new" sandbox that is another's, and take OOM reports only from the
// node that holds the sandbox. The hostile node (node-zzz) is listed after the honest one (the
// registry lists by id), so it speaks last.
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
import type { NodeSpec } from '../node/types.js';
import { EventBus } from '../services/events.js';
import { KeyedMutex } from '../services/locks.js';
import { QuotaService } from '../services/quotas.js';
import { SlidingWindowLimiter } from '../services/rate-limit.js';
import { RouteTable } from '../gateway/routes.js';
import { SandboxService } from '../services/sandboxes/index.js';
import { TemplateService } from '../services/templates.js';
import { TokenService } from '../services/tokens.js';
import { loadConfig } from '../config/index.js';
import { SqliteStore } from '../store/sqlite.js';
import { registeredPlacement } from '../testing/cluster.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { nodeOver } from '../testing/fake-node.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import type { Placement } from './placement.js';

describe('Placement: a node that claims what is not its own', { timeout: 60_000 }, () => {
  const store = SqliteStore.open(':memory:');
  const { signer, verifier } = testClusterKeys();
  const capacity = { vcpu: 8, memoryMb: 8192, diskGb: 100, maxSandboxes: 100 };
  let dir: string;
  let fake: FakeRuntime;
  let good: FastifyInstance;
  let evil: Server;
  const evilSaw: string[] = [];
  let cluster: Placement;
  let spec: NodeSpec;
  let victim = '';

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-cluster-red-'));
    fake = new FakeRuntime({ socketDir: join(dir, 's') });
    await fake.setupHost();
    good = nodeApi({ node: nodeOver(fake, 'node-good'), byReference: false, auth: verifier });
    await good.listen({ host: '127.0.0.1', port: 0 });
    evil = createServer((req, res) => {
      evilSaw.push(`${req.method} ${req.url}`);
      res.setHeader('content-type', 'application/json');
      if (req.url === '/node/v1/sandboxes') return res.end(JSON.stringify({ ids: [victim] }));
      // Asked for a ready sandbox, it hands over the id of another node's.
      if (req.url === '/node/v1/warm') return res.end(JSON.stringify({ id: victim, warm: true }));
      if (req.url === '/node/v1/oom-events') {
        res.setHeader('content-type', 'text/event-stream');
        return res.write(`data: {"id":"${victim}","kills":1}\n\n`);
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
    ({ placement: cluster } = await registeredPlacement(store, signer, { refreshMs: 0 }));
    spec = { id: '', lowerDirs: [dir], layerIds: ['l'], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 }, internetAccess: false, hostname: '', env: {} };
    const placed = await cluster.take({ spec, poolId: 't', label: 'base', env: {}, egress: null });
    victim = placed.id;
    const now = new Date().toISOString();
    await store.sandboxes.insert({
      id: victim, orgId: 'org_a', templateId: 't', templateName: 'base', status: 'running', region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
      vcpu: 1, memoryMb: 256, diskGb: 1, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId: placed.nodeId, version: 0, deletedReason: null, createdAt: now, updatedAt: now,
      deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
    });
    cluster.recorded(victim);
  });

  after(async () => {
    await cluster?.close();
    await fake?.destroy(victim).catch(() => undefined);
    await good?.close();
    evil?.closeAllConnections();
    await new Promise((r) => evil?.close(r));
    await fake?.dispose();
    store.close();
    await rm(dir, { recursive: true, force: true });
  });

  test("a listing that names another node's sandbox is that node's word only: calls go to the node the row names", async () => {
    assert.equal((await store.sandboxes.byId(victim))?.nodeId, 'node-good');
    const listed = await cluster.list();
    assert.deepEqual(listed.filter((l) => l.id === victim).map((l) => l.nodeId).sort(), ['node-good', 'node-zzz'], 'each listing says who listed it');
    assert.equal(await cluster.node('node-good').status(victim), 'running', 'asked of the node that holds it');
    (await cluster.node('node-good').dialAgent(victim, 2000)).destroy();
    assert.deepEqual(evilSaw.filter((r) => r.includes(victim)), [], 'the hostile node saw nothing of the victim');
  });

  test("a ready sandbox answered with another node's sandbox id is refused, and the sandbox stays where it is", async () => {
    await store.nodes.setStatus('node-zzz', 'active');
    await store.nodes.setStatus('node-good', 'cordoned');
    try {
      await assert.rejects(cluster.take({ spec, poolId: 't', label: 'base', env: {}, egress: null }), (e: unknown) => e instanceof ServiceError && e.code === 'RUNTIME_ERROR');
      assert.ok(evilSaw.includes('POST /node/v1/warm'), 'the hostile node was asked');
    } finally {
      await store.nodes.setStatus('node-good', 'active');
      await store.nodes.setStatus('node-zzz', 'cordoned');
    }
    assert.equal(await cluster.node('node-good').status(victim), 'running', 'still asked of the node that holds it');
    (await cluster.node('node-good').dialAgent(victim, 2000)).destroy();
    assert.deepEqual(evilSaw.filter((r) => r.includes(victim)), [], 'the hostile node saw nothing of the victim');
  });

  test("an OOM report for another node's sandbox is not passed on by the services", async () => {
    const events = new EventBus();
    const config = loadConfig({ SANDBOXD_DATA_DIR: dir }, { cpus: 2, memoryMb: 4096, diskGb: 100 });
    const services = new SandboxService({
      store,
      placement: cluster,
      tokens: new TokenService(join(dir, 'jwt.pem'), 60),
      templates: new TemplateService(store),
      layerPath: (l) => l,
      gateway: { open: async () => null, close: async () => undefined, publicHost: (id) => `http://${id}.sandbox.test` },
      routes: new RouteTable(),
      events,
      locks: new KeyedMutex(),
      createLimiter: new SlidingWindowLimiter(10, 60_000, 'creates'),
      quotas: new QuotaService(store, config.limits),
      agentReadyTimeoutMs: 1000,
      tombstoneSeconds: 60,
      log: () => undefined,
    });
    const got: string[] = [];
    const unsubscribe = events.subscribe((e) => {
      if (e.kind === 'oom_killed') got.push(String(e.data.id));
    });
    const stop = services.watchOom();
    try {
      for (let i = 0; i < 20 && !evilSaw.includes('GET /node/v1/oom-events'); i++) await sleep(50);
      assert.ok(evilSaw.includes('GET /node/v1/oom-events'));
      await sleep(300);
      assert.deepEqual(got, []);
      fake.triggerOom(victim);
      for (let i = 0; i < 40 && got.length === 0; i++) await sleep(50);
      assert.deepEqual(got, [victim], 'the node that holds it is heard');
    } finally {
      stop();
      unsubscribe();
    }
  });
});
