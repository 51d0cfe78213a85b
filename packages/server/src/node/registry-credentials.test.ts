// Registry credentials over time: control renews a node's credential for it (POST
// /internal/v1/nodes/:id/credential), the node asks past half its life and keeps the new one in its
// file, and an operator's removal refuses the node's credentials made before it: only a new one
// (or, for a node on the database, `sandboxd nodes admit`) lets it back.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { SignJWT } from 'jose';
import { ServiceError } from '@sandboxd/protocol';
import { admitNode, removeNode } from '../cli-nodes.js';
import { internalNodeRoutes } from '../http/routes/internal-nodes.js';
import type { Services } from '../http/services.js';
import { signingKeyFromPem } from '../runtime/cluster-auth.js';
import { NodeRegistryAuth } from '../services/node-registry.js';
import { SqliteStore } from '../store/sqlite.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { NodeMembership, storeRegistry } from './membership.js';
import { RegistryClient } from './registry-client.js';

const DAY = 86_400;

describe('registry credentials: renewed by the node, refused once the node is removed', { timeout: 60_000 }, () => {
  const { signer, signingPem } = testClusterKeys();
  const store = SqliteStore.open(':memory:');
  const controlLogs: string[] = [];
  /** Each call the registry took: its path and the credential it carried. */
  const calls: Array<{ path: string; credential: string }> = [];
  /** While set, renewals answer as a control without the route would. */
  let renewalsRefused = false;
  let app: FastifyInstance;
  let url: string;
  let dir: string;
  let fake: FakeRuntime;
  const capacity = { vcpu: 4, memoryMb: 4096, diskGb: 100, maxSandboxes: 50 };
  const report = { usage: { sandboxes: 0, vcpu: 0, memoryMb: 0, diskGb: 0 }, warm: {}, layersDigest: null };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-credentials-'));
    fake = new FakeRuntime({ socketDir: join(dir, 's') });
    await fake.setupHost();
    app = Fastify();
    app.setErrorHandler((err: Error, _req, reply) => (err instanceof ServiceError ? reply.code(err.status).send(err.toBody()) : reply.code(500).send({ message: err.message })));
    app.addHook('onRequest', async (req, reply) => {
      calls.push({ path: req.url, credential: (req.headers.authorization ?? '').replace(/^Bearer /, '') });
      if (renewalsRefused && req.url.endsWith('/credential')) return reply.code(404).send({ code: 'ROUTE_NOT_FOUND', message: 'Route POST:/internal/v1/nodes/x/credential not found' });
    });
    internalNodeRoutes(app, { store, nodeRegistry: new NodeRegistryAuth(signer, store.nodes, (m) => controlLogs.push(m)) } as unknown as Services);
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
    return { status: r.status, body: (await r.json().catch(() => ({}))) as { code?: string; message?: string; credential?: string; expires_at?: string; node_removed_at?: string } };
  };
  const reg = { url: 'http://10.0.0.7:7070', capacity, lease_ms: 30_000 };
  /** A credential as one made before credentials expired: no exp. */
  const legacyFor = (id: string) =>
    new SignJWT({}).setProtectedHeader({ alg: 'EdDSA', typ: 'sandboxd-node-credential+jwt' }).setIssuer('sandboxd-control').setSubject(id).setAudience('sandboxd-control:registry').setIssuedAt().sign(signingKeyFromPem(signingPem));
  const member = (client: RegistryClient, id: string, log?: (m: string) => void) => new NodeMembership({ registry: client, node: fake, id, url: reg.url, capacity, leaseMs: 30_000, log });

  test('control renews a valid credential for its own node: the new one verifies, and lasts as long as the old did', async () => {
    const old = await signer.nodeCredentialFor('node-a', { lifetimeSeconds: 7 * DAY, now: Date.now() - 5 * DAY * 1000 });
    const r = await call('POST', '/internal/v1/nodes/node-a/credential', old, {});
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const claims = await signer.checkNodeCredential(r.body.credential);
    assert.equal(claims.nodeId, 'node-a');
    assert.ok(Math.abs(claims.issuedAt - Date.now() / 1000) < 2, 'made now');
    assert.equal(claims.expiresAt! - claims.issuedAt, 7 * DAY, 'the lifetime the operator chose');
    assert.equal(r.body.expires_at, new Date(claims.expiresAt! * 1000).toISOString());
    assert.equal((await call('PUT', '/internal/v1/nodes/node-a', r.body.credential, reg)).status, 200, 'it opens the entry');

    // One of before credentials expired: renewed for the default 30 days; control warns once per node.
    const legacy = await legacyFor('node-a');
    const renewed = await call('POST', '/internal/v1/nodes/node-a/credential', legacy, {});
    assert.equal(renewed.status, 200);
    const lc = await signer.checkNodeCredential(renewed.body.credential);
    assert.equal(lc.expiresAt! - lc.issuedAt, 30 * DAY);
    assert.equal((await call('POST', '/internal/v1/nodes/node-a/heartbeat', legacy, { report, lease_ms: 30_000 })).status, 200, 'still accepted');
    const warnings = controlLogs.filter((l) => /^warning: node node-a uses a registry credential that never expires/.test(l));
    assert.equal(warnings.length, 1, controlLogs.join('\n'));

    // Nothing else gets one.
    const b = await signer.nodeCredentialFor('node-b');
    const other = await call('POST', '/internal/v1/nodes/node-a/credential', b, {});
    assert.deepEqual([other.status, other.body.code, other.body.credential], [403, 'PERMISSION_DENIED', undefined], "node-b's credential for node-a");
    assert.equal((await call('POST', '/internal/v1/nodes/node-a/credential', undefined, {})).status, 401, 'none');
    const expired = await call('POST', '/internal/v1/nodes/node-a/credential', await signer.nodeCredentialFor('node-a', { now: Date.now() - 31 * DAY * 1000 }), {});
    assert.equal(expired.status, 401);
    assert.match(expired.body.message ?? '', /node node-a's registry credential expired at .*`sandboxd cluster node-credential node-a --out FILE`/);
    assert.equal(expired.body.credential, undefined);
    const forged = await call('POST', '/internal/v1/nodes/node-a/credential', await testClusterKeys().signer.nodeCredentialFor('node-a'), {});
    assert.equal(forged.status, 401, "another cluster's");
  });

  test('a removed node: its credentials made before the removal are refused (403, saying how to admit it again); one made after opens its entry', async () => {
    const before = await signer.nodeCredentialFor('node-r', { now: Date.now() - 5000 });
    assert.equal((await call('PUT', '/internal/v1/nodes/node-r', before, reg)).status, 200);
    await removeNode(store, 'node-r', { force: true });
    const removedAt = await store.nodes.removedAt('node-r');
    assert.ok(removedAt);
    for (const [method, path, body] of [
      ['POST', '/internal/v1/nodes/node-r/heartbeat', { report, lease_ms: 30_000 }],
      ['PUT', '/internal/v1/nodes/node-r', reg],
      ['POST', '/internal/v1/nodes/node-r/credential', {}],
      ['GET', '/internal/v1/nodes/node-r/sandboxes', undefined],
    ] as const) {
      const r = await call(method, path, before, body);
      assert.deepEqual([r.status, r.body.code, r.body.node_removed_at], [403, 'PERMISSION_DENIED', removedAt], `${method} ${path}`);
      assert.match(r.body.message ?? '', /^node node-r was removed from the cluster at .*make it a new one \(`sandboxd cluster node-credential node-r --out FILE`\)/);
    }
    assert.equal(await store.nodes.byId('node-r'), undefined, 'not registered again');
    // A credential of the removal's own second counts as made before it.
    const sameSecond = await signer.nodeCredentialFor('node-r', { now: Date.parse(removedAt) });
    assert.equal((await call('PUT', '/internal/v1/nodes/node-r', sameSecond, reg)).status, 403);
    // removeNode returned once that second was over: a credential made now is after it.
    const made = await signer.nodeCredentialFor('node-r');
    assert.equal((await call('PUT', '/internal/v1/nodes/node-r', made, reg)).status, 200, 'admitted again');
    assert.equal((await call('POST', '/internal/v1/nodes/node-r/heartbeat', made, { report, lease_ms: 30_000 })).status, 200);
    assert.equal((await call('POST', '/internal/v1/nodes/node-r/heartbeat', before, { report, lease_ms: 30_000 })).status, 403, 'the old one stays refused');
  });

  test('a node renews its credential past half its life, after registering: it uses the new one and replaces its file (0600, whole)', async (t) => {
    const file = join(dir, 'renew', 'node.credential');
    await mkdir(join(dir, 'renew'));
    const old = await signer.nodeCredentialFor('node-f', { lifetimeSeconds: 2 * DAY, now: Date.now() - 1.5 * DAY * 1000 });
    await writeFile(file, `${old}\n`, { mode: 0o644 });
    const logs: string[] = [];
    const client = new RegistryClient({ controlUrls: [url], credential: old, credentialFile: file, log: (m) => logs.push(m) });
    const m = member(client, 'node-f');
    t.after(() => m.stop());
    await m.start();
    await client.renewIfDue('node-f');
    const written = (await readFile(file, 'utf8')).trim();
    assert.notEqual(written, old, 'the file holds a new credential');
    const claims = await signer.checkNodeCredential(written);
    assert.deepEqual([claims.nodeId, claims.expiresAt! - claims.issuedAt], ['node-f', 2 * DAY]);
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    assert.deepEqual(await readdir(join(dir, 'renew')), ['node.credential'], 'no temporary file left');
    assert.ok(logs.some((l) => /^node node-f renewed its registry credential \(good until .*\) and wrote it to /.test(l)), logs.join('\n'));
    // From then on it calls with the new one, and does not renew again.
    await m.beat();
    m.stop();
    const mine = calls.filter((c) => c.path.startsWith('/internal/v1/nodes/node-f'));
    assert.equal(mine.at(-1)?.path, '/internal/v1/nodes/node-f/heartbeat');
    assert.equal(mine.at(-1)?.credential, written);
    assert.equal(mine.filter((c) => c.path.endsWith('/credential')).length, 1);

    // A fresh credential is not renewed.
    const fresh = new RegistryClient({ controlUrls: [url], credential: await signer.nodeCredentialFor('node-g') });
    await fresh.register({ id: 'node-g', url: reg.url, capacity }, 30_000);
    await fresh.renewIfDue('node-g');
    assert.equal(calls.filter((c) => c.path === '/internal/v1/nodes/node-g/credential').length, 0);
  });

  test('a renewal that fails is logged and tried again later; the credential the node holds goes on', async () => {
    const legacy = await legacyFor('node-h');
    const logs: string[] = [];
    // Its file cannot be written (its directory is gone): the node still uses the new one.
    const client = new RegistryClient({ controlUrls: [url], credential: legacy, credentialFile: join(dir, 'gone', 'node.credential'), renewRetryMs: 100, log: (m) => logs.push(m) });
    const renewals = () => calls.filter((c) => c.path === '/internal/v1/nodes/node-h/credential').length;
    renewalsRefused = true;
    try {
      await client.register({ id: 'node-h', url: reg.url, capacity }, 30_000);
      await client.renewIfDue('node-h');
      assert.equal(renewals(), 1, 'one without exp is renewed at once');
      assert.match(logs.join('\n'), /node node-h: renewing its registry credential failed \(trying again in 0 s; the one it holds is good with no end\): .*404 ROUTE_NOT_FOUND/);
      assert.ok(await client.heartbeat('node-h', report, 30_000), 'the one it holds still opens its entry');
      await client.renewIfDue('node-h');
      assert.equal(renewals(), 1, 'not again before the wait is over');
    } finally {
      renewalsRefused = false;
    }
    await new Promise((r) => setTimeout(r, 150));
    await client.renewIfDue('node-h');
    assert.equal(renewals(), 2);
    assert.match(logs.at(-1)!, /^node node-h renewed its registry credential \(good until .*\) but cannot write it to .*gone\/node\.credential/);
    assert.ok(await client.heartbeat('node-h', report, 30_000));
    const last = calls.filter((c) => c.path.startsWith('/internal/v1/nodes/node-h')).at(-1)!;
    assert.notEqual(last.credential, legacy, 'it calls with the new one');
    assert.notEqual((await signer.checkNodeCredential(last.credential)).expiresAt, undefined);
  });

  test('a node removed while it runs: its next heartbeat is refused, it logs why and stops; it cannot register again with that credential', async (t) => {
    const logs: string[] = [];
    const client = new RegistryClient({ controlUrls: [url], credential: await signer.nodeCredentialFor('node-c', { now: Date.now() - 5000 }), log: (m) => logs.push(m) });
    const m = member(client, 'node-c', (msg) => logs.push(msg));
    t.after(() => m.stop());
    await m.start();
    assert.ok(await m.beat());
    await removeNode(store, 'node-c', { force: true });
    assert.equal(await m.beat(), undefined);
    assert.match(logs.join('\n'), /refused \/internal\/v1\/nodes\/node-c\/heartbeat \(403 PERMISSION_DENIED\): node node-c was removed from the cluster/);
    assert.match(logs.join('\n'), /node node-c was removed from the cluster by an operator: no more heartbeats/);
    const sent = calls.length;
    assert.equal(await m.beat(), undefined);
    assert.equal(calls.length, sent, 'stopped: nothing sent');
    await assert.rejects(client.register({ id: 'node-c', url: reg.url, capacity }, 30_000), /refused .*\(403 PERMISSION_DENIED\): node node-c was removed/);
    assert.equal(await store.nodes.byId('node-c'), undefined);
  });

  test('a node on the database is refused at registration while its removal is recorded, naming `sandboxd nodes admit`; admitted, it registers', async () => {
    const registry = storeRegistry(store);
    await registry.register({ id: 'node-d', url: reg.url, capacity }, 30_000);
    await removeNode(store, 'node-d', { force: true });
    const m = new NodeMembership({ registry, node: fake, id: 'node-d', url: reg.url, capacity, leaseMs: 30_000 });
    await assert.rejects(m.start(), (err: unknown) => err instanceof ServiceError && err.code === 'PERMISSION_DENIED' && /node node-d was removed from the cluster at .*`sandboxd nodes admit node-d`/.test(err.message));
    assert.equal(await store.nodes.byId('node-d'), undefined);
    assert.deepEqual(await admitNode(store, 'node-d'), { admitted: true });
    assert.deepEqual(await admitNode(store, 'node-d'), { admitted: false });
    assert.equal((await m.start()).id, 'node-d');
    m.stop();
  });
});
