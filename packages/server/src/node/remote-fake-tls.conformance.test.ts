// The runtime conformance suite against RemoteRuntime over TLS: the node API served over HTTPS
// with a certificate of a test CA, control trusting that CA only. Every verb, the agent relay
// (CONNECT inside TLS), the OOM stream and a snapshot's layer go over it; a control that does not
// trust that CA, or reaches the node by a name its certificate does not hold, is refused.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import { unpackLayer } from '../images/layer-tar.js';
import { runtimeConformance } from '../runtime/conformance.js';
import { RemoteRuntime } from '../runtime/remote-runtime.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { makeTestTls } from '../testing/tls.js';
import { nodeApi } from './node-api.js';

const tls = makeTestTls(['IP:127.0.0.1']);
after(() => tls.remove());

runtimeConformance('RemoteRuntime over TLS, over a FakeRuntime node', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-remote-tls-'));
  const layer = join(dir, 'layer');
  await mkdir(layer);
  const fake = new FakeRuntime({ socketDir: join(dir, 's') });
  await fake.setupHost();
  const { signer, verifier } = testClusterKeys();
  const app = nodeApi({ nodeId: 'node-t', runtime: fake, auth: verifier, exportsDir: join(dir, 'exports'), https: { cert: tls.cert, key: tls.key } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const remote = new RemoteRuntime({ nodeId: 'node-t', url: `https://127.0.0.1:${(app.server.address() as AddressInfo).port}`, auth: signer, unpack: unpackLayer, ca: tls.ca });
  await remote.setupHost();
  const heals = new Map<string, () => void>();
  return {
    runtime: remote,
    spec: (id, over) => ({ id, lowerDirs: [layer], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 256 }, internetAccess: false, hostname: id, env: { SANDBOX_ID: id }, ...over }),
    failCreate: (id) => void heals.set(id, fake.failOn('create', new Error('injected failure'), (x) => x === id)),
    healCreate: (id) => heals.get(id)?.(),
    writeFile: async (id, path, content) => fake.writeFile(id, path, content),
    readFile: async (id, path) => fake.readFile(id, path),
    oomKill: async (id) => fake.triggerOom(id),
    assertClean: async () => {
      assert.deepEqual(await fake.list(), []);
      assert.deepEqual(await readdir(join(dir, 's')), [], 'no socket left');
    },
    teardown: async () => {
      await remote.close();
      await app.close();
      await fake.dispose();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

describe('a node over TLS refuses what its certificate does not allow', () => {
  let app: FastifyInstance;
  let port: number;
  let dir: string;
  const { signer, verifier } = testClusterKeys();
  const unreachable = (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE';

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-remote-tls-refused-'));
    const fake = new FakeRuntime({ socketDir: join(dir, 's') });
    await fake.setupHost();
    app = nodeApi({ nodeId: 'node-t', runtime: fake, auth: verifier, https: { cert: tls.cert, key: tls.key } });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });

  after(async () => {
    await app?.close();
    await rm(dir, { recursive: true, force: true });
  });

  test("control that does not trust the node's CA reaches nothing, the relay included", async () => {
    const other = makeTestTls(['IP:127.0.0.1']);
    try {
      for (const ca of [undefined, other.ca]) {
        const r = new RemoteRuntime({ nodeId: 'node-t', url: `https://127.0.0.1:${port}`, auth: signer, ca, callTimeoutMs: 5000 });
        await assert.rejects(r.setupHost(), unreachable, ca ? 'another CA' : 'the system CAs');
        await assert.rejects(r.dialAgent('x1', 3000), unreachable);
        await r.close();
      }
    } finally {
      other.remove();
    }
  });

  test('a name the certificate does not hold is refused; plain HTTP to the TLS port gets nothing', async () => {
    const byName = new RemoteRuntime({ nodeId: 'node-t', url: `https://localhost:${port}`, auth: signer, ca: tls.ca, callTimeoutMs: 5000 });
    await assert.rejects(byName.setupHost(), unreachable);
    await assert.rejects(byName.dialAgent('x1', 3000), unreachable);
    await byName.close();
    const plain = new RemoteRuntime({ nodeId: 'node-t', url: `http://127.0.0.1:${port}`, auth: signer, callTimeoutMs: 5000 });
    await assert.rejects(plain.setupHost(), (err: unknown) => err instanceof ServiceError);
  });
});
