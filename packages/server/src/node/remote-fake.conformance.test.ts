// The runtime conformance suite against RemoteRuntime: the node API in front of a FakeRuntime, over
// real HTTP on loopback. What the wire keeps of the contract (states, error codes, idempotence,
// agent connections relayed by CONNECT), without root.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { unpackLayer } from '../images/layer-tar.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { runtimeConformance } from '../runtime/conformance.js';
import { RemoteRuntime } from '../runtime/remote-runtime.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { nodeApi } from './node-api.js';

runtimeConformance('RemoteRuntime over a FakeRuntime node', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-remote-fake-'));
  const layer = join(dir, 'layer');
  await mkdir(layer);
  const fake = new FakeRuntime({ socketDir: join(dir, 's') });
  await fake.setupHost();
  const { signer, verifier } = testClusterKeys();
  const app = nodeApi({ nodeId: 'node-f', runtime: fake, auth: verifier, exportsDir: join(dir, 'exports') });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const remote = new RemoteRuntime({ nodeId: 'node-f', url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, auth: signer, unpack: unpackLayer });
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
      assert.deepEqual(await readdir(join(dir, 'exports')).catch(() => []), [], "no snapshot's copy left on the node");
    },
    teardown: async () => {
      await remote.close();
      await app.close();
      await fake.dispose();
      await rm(dir, { recursive: true, force: true });
    },
  };
});
