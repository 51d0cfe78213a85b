// A node without database credentials registers, heartbeats and reads its sandboxes through
// control's registry (http/routes/internal-nodes.ts) with its own credential; the credential opens
// that node's entry and nothing else, and every field a node sends is checked.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { SignJWT } from 'jose';
import { ServiceError } from '@sandboxd/protocol';
import { internalNodeRoutes } from '../http/routes/internal-nodes.js';
import { SqliteStore } from '../store/sqlite.js';
import type { SandboxRow } from '../store/types/index.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import type { Services } from '../http/services.js';
import { NodeMembership } from './membership.js';
import { NodeRegistryAuth } from '../services/node-registry.js';
import { RegistryClient } from './registry-client.js';

describe("the nodes' registry through control", { timeout: 60_000 }, () => {
  const { signer, signingPem } = testClusterKeys();
  const store = SqliteStore.open(':memory:');
  let app: FastifyInstance;
  let url: string;
  let dir: string;
  let fake: FakeRuntime;
  const capacity = { vcpu: 4, memoryMb: 4096, diskGb: 100, maxSandboxes: 50 };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-registry-'));
    fake = new FakeRuntime({ socketDir: join(dir, 's') });
    await fake.setupHost();
    app = Fastify();
    app.setErrorHandler((err: { status?: number; code?: string; message?: string }, _req, reply) => reply.code(err instanceof ServiceError ? err.status : 500).send({ code: err.code, message: err.message }));
    internalNodeRoutes(app, { store, nodeRegistry: new NodeRegistryAuth(signer, store.nodes) } as unknown as Services);
    await app.listen({ host: '127.0.0.1', port: 0 });
    url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });

  after(async () => {
    await app?.close();
    await fake?.dispose();
    store.close();
    await rm(dir, { recursive: true, force: true });
  });

  const call = async (method: string, path: string, token: string | undefined, body?: unknown) => {
    const r = await fetch(`${url}${path}`, { method, headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: r.status, body: (await r.json().catch(() => ({}))) as { code?: string } };
  };

  test('a node registers and heartbeats with its credential; the store has its entry; it reads only its own sandboxes', async () => {
    const client = new RegistryClient({ controlUrls: [url], credential: await signer.nodeCredentialFor('node-a') });
    const m = new NodeMembership({ registry: client, node: fake, id: 'node-a', url: 'http://10.0.0.7:7070', capacity, leaseMs: 30_000, layers: async () => ['a'.repeat(64)] });
    const row = await m.start();
    m.stop();
    assert.equal(row.status, 'active');
    const stored = await store.nodes.byId('node-a');
    assert.equal(stored?.url, 'http://10.0.0.7:7070');
    assert.deepEqual(stored?.capacity, capacity);
    const beat = await new NodeMembership({ registry: client, node: fake, id: 'node-a', url: 'http://10.0.0.7:7070', capacity, leaseMs: 30_000, layers: async () => ['a'.repeat(64)] }).beat();
    assert.equal(beat?.id, 'node-a');
    assert.match((await store.nodes.byId('node-a'))!.layersDigest ?? '', /^sha256:/);

    const now = new Date().toISOString();
    const sandbox = (id: string, nodeId: string): SandboxRow => ({
      id, orgId: 'org_a', templateId: 't', templateName: 'base', status: 'running', region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
      vcpu: 1, memoryMb: 512, diskGb: 1, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId, version: 0, deletedReason: null, createdAt: now, updatedAt: now,
      deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
    });
    await store.sandboxes.insert(sandbox('sb-on-a', 'node-a'));
    await store.sandboxes.insert(sandbox('sb-on-b', 'node-b'));
    assert.deepEqual(await client.liveIds('node-a'), ['sb-on-a']);
    assert.equal((await client.usage('node-a'))?.activeMemoryMb, 512);
  });

  test("a credential opens its own node's entry only; nothing else is one", async () => {
    const a = await signer.nodeCredentialFor('node-a');
    const reg = { url: 'http://10.0.0.9:7070', capacity, lease_ms: 30_000 };
    assert.equal((await call('PUT', '/internal/v1/nodes/node-b', a, reg)).status, 403, "node-a's credential for node-b");
    assert.equal((await call('GET', '/internal/v1/nodes/node-b/sandboxes', a)).status, 403);
    assert.equal((await call('PUT', '/internal/v1/nodes/node-b', undefined, reg)).status, 401, 'none');
    const other = testClusterKeys().signer;
    const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const forged: Array<[string, string]> = [
      ["a call token control sends node-b (another kind)", await signer.tokenFor('node-b')],
      ["a layer token", await signer.layerTokenFor('node-b', 'c'.repeat(64))],
      ["another cluster's credential", await other.nodeCredentialFor('node-b')],
      ['alg none', `${b64({ alg: 'none', typ: 'sandboxd-node-credential+jwt' })}.${b64({ iss: 'sandboxd-control', aud: 'sandboxd-control:registry', sub: 'node-b', iat: 1 })}.`],
      ['HS256 keyed with the signing PEM', await new SignJWT({}).setProtectedHeader({ alg: 'HS256', typ: 'sandboxd-node-credential+jwt' }).setIssuer('sandboxd-control').setAudience('sandboxd-control:registry').setSubject('node-b').setIssuedAt().sign(new TextEncoder().encode(signingPem))],
      ['the signature cut', (await signer.nodeCredentialFor('node-b')).slice(0, -5)],
    ];
    for (const [what, token] of forged) assert.equal((await call('PUT', '/internal/v1/nodes/node-b', token, reg)).status, 401, what);
    assert.equal(await store.nodes.byId('node-b'), undefined, 'node-b was never registered');
  });

  test('what a node sends is checked field by field', async () => {
    const a = await signer.nodeCredentialFor('node-a');
    const good = { url: 'http://10.0.0.7:7070', capacity, lease_ms: 30_000 };
    const bad: Array<[string, unknown]> = [
      ['a file URL', { ...good, url: 'file:///etc/passwd' }],
      ['a URL with a path and credentials', { ...good, url: 'http://user:pw@10.0.0.7:7070/x' }],
      ['a negative capacity', { ...good, capacity: { ...capacity, vcpu: -1 } }],
      ['a capacity of strings', { ...good, capacity: { ...capacity, memoryMb: '4096' } }],
      ['a lease of a year', { ...good, lease_ms: 365 * 86_400_000 }],
      ['no body', undefined],
    ];
    for (const [what, body] of bad) assert.equal((await call('PUT', '/internal/v1/nodes/node-a', a, body)).status, 400, what);
    const report = { usage: { sandboxes: 1, vcpu: 1, memoryMb: 512, diskGb: 1 }, warm: {}, layersDigest: null };
    const badBeats: Array<[string, unknown]> = [
      ['usage of NaN', { ...report, usage: { ...report.usage, vcpu: 'NaN' } }],
      ['a warm count that is not whole', { ...report, warm: { k: 1.5 } }],
      ['too many warm keys', { ...report, warm: Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`k${i}`, 1])) }],
      ['a layers digest that is not one', { ...report, layersDigest: 'sha256:xyz' }],
      ['an array for a report', [report]],
    ];
    for (const [what, r] of badBeats) assert.equal((await call('POST', '/internal/v1/nodes/node-a/heartbeat', a, { report: r, lease_ms: 30_000 })).status, 400, what);
    assert.equal((await call('POST', '/internal/v1/nodes/node-a/heartbeat', a, { report, lease_ms: 30_000 })).status, 200, 'the control case');
  });

  test('a node an operator removed is told so, and stops heartbeating', async () => {
    const client = new RegistryClient({ controlUrls: [url], credential: await signer.nodeCredentialFor('node-c') });
    const m = new NodeMembership({ registry: client, node: fake, id: 'node-c', url: 'http://10.0.0.8:7070', capacity, leaseMs: 30_000 });
    await m.start();
    await store.nodes.remove('node-c');
    assert.equal(await m.beat(), undefined);
    assert.equal(await m.beat(), undefined, 'stopped: no more beats');
    m.stop();
  });

  test('a node given several replicas reaches control through any that answers, and stays with it', async () => {
    const logs: string[] = [];
    const client = new RegistryClient({ controlUrls: ['http://127.0.0.1:9', url], credential: await signer.nodeCredentialFor('node-e'), log: (l) => logs.push(l) });
    const m = new NodeMembership({ registry: client, node: fake, id: 'node-e', url: 'http://10.0.0.10:7070', capacity, leaseMs: 30_000 });
    const row = await m.start();
    m.stop();
    assert.equal(row.id, 'node-e', 'registered through the second replica');
    assert.equal((await store.nodes.byId('node-e'))?.url, 'http://10.0.0.10:7070');
    assert.equal(logs.length, 1, logs.join('\n'));
    assert.match(logs[0]!, /answers at http:\/\/127\.0\.0\.1:\d+ \(http:\/\/127\.0\.0\.1:9 did not\)/);
    assert.equal((await client.heartbeat('node-e', { usage: { sandboxes: 0, vcpu: 0, memoryMb: 0, diskGb: 0 }, warm: {}, layersDigest: null }, 30_000))?.id, 'node-e');
    assert.equal(logs.length, 1, 'the next call goes to the replica that answered');
  });

  test('control away: the node keeps trying to register, and registers once control answers', async () => {
    const away = new RegistryClient({ controlUrls: ['http://127.0.0.1:9'], credential: await signer.nodeCredentialFor('node-d') });
    await assert.rejects(away.register({ id: 'node-d', url: 'http://10.0.0.9:7070', capacity }, 30_000), (err: unknown) => err instanceof ServiceError && err.code === 'STORE_UNAVAILABLE');
    const m = new NodeMembership({ registry: away, node: fake, id: 'node-d', url: 'http://10.0.0.9:7070', capacity, leaseMs: 30_000 });
    const started = m.startWhenReachable(50);
    await new Promise((r) => setTimeout(r, 200));
    m.stop();
    assert.equal(await started, false, 'stopped before control answered');
  });
});
