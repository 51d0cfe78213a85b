// The claims control replicas make on a node (services/orphans.ts): taken only from control, and
// only in the bounded shape.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { RemoteNode } from './remote-node.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { nodeOver } from '../testing/fake-node.js';
import { nodeApi } from './node-api.js';

/** Control signs with the private key; the node holds the public one only. */
const { signer, verifier } = testClusterKeys();
const claims: Array<{ owner: string; ids: string[]; ttlMs: number }> = [];
let dir: string;
let app: FastifyInstance;
let url: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbd-claims-'));
  const fake = new FakeRuntime({ socketDir: join(dir, 's') });
  await fake.setupHost();
  app = nodeApi({ node: nodeOver(fake, 'node-c'), byReference: false, auth: verifier, orphans: { claim: (owner, ids, ttlMs) => void claims.push({ owner, ids, ttlMs }) } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});

after(async () => {
  await app?.close();
  await rm(dir, { recursive: true, force: true });
});

test("control's claim reaches the collector; anyone else's, or a malformed one, does not", async () => {
  const remote = new RemoteNode({ id: 'node-c', url, auth: signer });
  await remote.claim('replica-1', ['sba', 'sbb'], 120);
  assert.deepEqual(claims, [{ owner: 'replica-1', ids: ['sba', 'sbb'], ttlMs: 120_000 }]);
  const put = async (path: string, body: unknown, token?: string) =>
    (
      await fetch(`${url}${path}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify(body),
      })
    ).status;
  assert.equal(await put('/node/v1/claims/x', { ids: [], ttl_seconds: 60 }), 401, 'no token');
  const other = await testClusterKeys().signer.tokenFor('node-c');
  assert.equal(await put('/node/v1/claims/x', { ids: [], ttl_seconds: 60 }, other), 401, "another cluster's token");
  const token = await signer.tokenFor('node-c');
  for (const [path, body] of [
    ['/node/v1/claims/x', { ids: ['../etc'], ttl_seconds: 60 }],
    ['/node/v1/claims/x', { ids: 'sba', ttl_seconds: 60 }],
    ['/node/v1/claims/x', { ids: ['sba'], ttl_seconds: 0 }],
    ['/node/v1/claims/x', { ids: ['sba'], ttl_seconds: 601 }],
    ['/node/v1/claims/x', { ids: ['sba'], ttl_seconds: 1.5 }],
    ['/node/v1/claims/x', { ids: Array.from({ length: 20_001 }, (_, i) => `s${i}`), ttl_seconds: 60 }],
    ['/node/v1/claims/bad%20owner', { ids: [], ttl_seconds: 60 }],
  ] as const) {
    assert.equal(await put(path, body, token), 400, JSON.stringify(body).slice(0, 80));
  }
  assert.equal(claims.length, 1, 'nothing else reached the collector');
});
