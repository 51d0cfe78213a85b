import assert from 'node:assert/strict';
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SignJWT } from 'jose';
import { ServiceError } from '@sandboxd/protocol';
import type { FastifyInstance } from 'fastify';
import { signingKeyFromPem } from '../runtime/cluster-auth.js';
import { LocalNode } from './local-node.js';
import { RemoteNode } from './remote-node.js';
import { withSandboxId } from '../runtime/sandbox-identity.js';
import { unpackLayer } from '../images/layer-tar.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { baseLayer } from '../testing/fixtures.js';
import { assertNoLeaks, createTestRuntime, sh, testSpec, type TestRuntime } from '../testing/runtime-fixtures.js';
import { nodeApi } from './node-api.js';

/** Control signs with the private key; the node holds the public one only. */
const { signer, verifier, signingPem } = testClusterKeys();

/** One HTTP GET over an already open connection to an agent. */
function getOver(stream: Duplex, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ createConnection: () => stream, path, headers: { host: 'agent' } }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('node API + RemoteNode: a LocalNode on CrunRuntime driven across the network', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let lower: string;
  let app: FastifyInstance;
  let url: string;
  let remote: RemoteNode;
  let local: LocalNode;

  before(async () => {
    lower = (await baseLayer()).path;
    t = await createTestRuntime();
    local = new LocalNode({ id: 'node-a', runtime: t.rt, pool: { minPerKey: 0, maxMemoryMb: 0, horizonSeconds: 0, shrinkAfterMs: 0, bootConcurrency: 2, tickMs: 0 }, agentReadyTimeoutMs: 10_000, log: () => undefined });
    app = nodeApi({ node: local, auth: verifier, byReference: false });
    await app.listen({ host: '127.0.0.1', port: 0 });
    url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    remote = new RemoteNode({ id: 'node-a', url, auth: signer, unpack: unpackLayer });
  });

  after(async () => {
    await app?.close();
    await local?.close();
    if (t) {
      for (const id of await t.rt.list()) await t.rt.destroy(id);
      await assertNoLeaks(t.rt);
      await t.teardown();
    }
  });

  test('every verb goes through: take, agent, pause/resume, stats, stop/start, destroy', async () => {
    await remote.ping();
    const spec = { ...testSpec('', [lower], { resources: { vcpu: 1, memoryMb: 128, diskGb: 1, pidsMax: 128 }, layerIds: ['base'] }), env: {} };
    const kills: Array<[string, number]> = [];
    const stopWatching = remote.watchOom((sid, n) => kills.push([sid, n]));
    await t.rt.oomWatchReady();
    let id = '';
    try {
      ({ id } = await remote.take({ spec, poolId: 'base', label: 'base', env: { FROM: 'control' }, egress: null }));
      assert.equal(await remote.status(id), 'running');
      assert.deepEqual([...(await remote.statuses([id, 'nosuch']))], [[id, 'running'], ['nosuch', 'missing']]);
      assert.ok((await remote.list()).includes(id));

      // The agent, through the node's relay: the same bytes as its unix socket.
      const health = await getOver(await remote.dialAgent(id), '/health');
      assert.equal(health.status, 200);
      assert.equal((JSON.parse(health.body) as { ok: boolean }).ok, true);

      await remote.pause(id);
      assert.equal(await remote.status(id), 'paused');
      await remote.resume(id);
      assert.equal(await remote.status(id), 'running');

      const s = await remote.stats(id);
      assert.equal(s.memoryLimitBytes, 128 * 1024 * 1024);
      assert.ok(s.diskTotalBytes > 0);
      assert.deepEqual(await remote.listeningPorts(id), await t.rt.listeningPorts(id));

      // An OOM kill on the node reaches control's watcher.
      const r = await sh(t.rt, id, 'dd if=/dev/zero of=/dev/null bs=400M count=1', true);
      assert.notEqual(r.code, 0);
      for (let i = 0; i < 100 && kills.length === 0; i++) await sleep(50);
      assert.equal(kills[0]?.[0], id, 'the kill was reported across the network');

      await remote.stop(id);
      assert.equal(await remote.status(id), 'stopped');
      await assert.rejects(remote.pause(id), (err: unknown) => err instanceof ServiceError && err.code === 'SANDBOX_STOPPED', 'the node error comes back as it was');
      await remote.start(withSandboxId(spec, id));
      assert.equal(await remote.status(id), 'running');
      await remote.destroy(id);
      await remote.destroy(id);
      assert.equal(await remote.status(id), 'missing');
    } finally {
      stopWatching();
      if (id) await t.rt.destroy(id);
    }
  });

  test('errors keep their code; bugs stay bugs; what a node cannot do yet says so', async () => {
    await assert.rejects(remote.stop('nosuch'), (err: unknown) => err instanceof ServiceError && err.code === 'NOT_FOUND');
    await assert.rejects(remote.setEgress('nosuch', { internet: true, allow: [], deny: [] }), (err: unknown) => err instanceof ServiceError && err.code === 'NOT_FOUND');
    // This node was given no exports directory: it takes no snapshots, and says so.
    await assert.rejects(remote.exportLayer('nosuch', '/nonexistent'), (err: unknown) => err instanceof ServiceError && err.code === 'INVALID_STATE' && /takes no snapshots/.test(err.message));
    // A bad id is refused before it leaves (as CrunRuntime does: a TypeError, our bug).
    await assert.rejects(remote.status('../etc'), TypeError);
    await assert.rejects(remote.dialAgent('nosuch'), (err: unknown) => err instanceof ServiceError && err.code === 'AGENT_UNAVAILABLE');
  });

  test('a node obeys only tokens control signed for it', async () => {
    const call = async (token: string | undefined, path = '/node/v1/sandboxes') =>
      (await fetch(`${url}${path}`, { headers: token ? { authorization: `Bearer ${token}` } : {} })).status;
    assert.equal(await call(undefined), 401);
    assert.equal(await call('not-a-jwt'), 401);
    assert.equal(await call(await signer.tokenFor('node-b')), 401, "another node's token");
    assert.equal(await call(await testClusterKeys().signer.tokenFor('node-a')), 401, 'another cluster');
    const key = signingKeyFromPem(signingPem);
    const expired = await new SignJWT({}).setProtectedHeader({ alg: 'EdDSA' }).setIssuer('sandboxd-control').setAudience('sandboxd-node:node-a').setIssuedAt(Math.floor(Date.now() / 1000) - 600).setExpirationTime(Math.floor(Date.now() / 1000) - 300).sign(key);
    assert.equal(await call(expired), 401, 'expired');
    assert.equal(await call(await signer.tokenFor('node-a')), 200);
    // The agent relay too: no token, no connection.
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: new URL(url).port, method: 'CONNECT', path: 'rem1.agent:1' });
      req.on('connect', (res, socket) => {
        socket.destroy();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal(status, 401);
    assert.equal(await call(await signer.tokenFor('node-a'), '/node/v1/sandboxes/..%2Fetc/status'), 400, 'a bad id');
  });

  test('a node that is down is an outage of that node, at once', async () => {
    const gone = new RemoteNode({ id: 'node-a', url: 'http://127.0.0.1:9', auth: signer });
    const t0 = performance.now();
    await assert.rejects(gone.status('rem2'), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE' && /node node-a cannot be reached/.test(err.message));
    await assert.rejects(gone.dialAgent('rem2'), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE');
    assert.ok(performance.now() - t0 < 5000);
  });
});
