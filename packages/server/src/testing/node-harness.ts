import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { unpackLayer } from '../images/layer-tar.js';
import type { NodeHarness } from '../node/conformance.js';
import { LocalNode } from '../node/local-node.js';
import { nodeApi } from '../node/node-api.js';
import { RemoteNode } from '../node/remote-node.js';
import { testClusterKeys } from './cluster-keys.js';
import { FakeRuntime } from './fake-runtime.js';

/** The warm pool of a conformance node: one ready sandbox of a key once it was asked for. */
export const CONFORMANCE_POOL = { minPerKey: 1, maxMemoryMb: 200, horizonSeconds: 0, shrinkAfterMs: 60_000, bootConcurrency: 4, tickMs: 0 };

/**
 * The harness of the node conformance suite over the FakeRuntime: the LocalNode itself, or (with
 * `remote`) a RemoteNode over a real node API in front of it, on loopback, plain or over TLS (a
 * certificate of a test CA, which the client alone trusts).
 */
export async function fakeNodeHarness(remote?: { tls?: { cert: string; key: string; ca: string } }): Promise<NodeHarness> {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-node-conf-'));
  const layer = join(dir, 'layer');
  await mkdir(layer);
  const fake = new FakeRuntime({ socketDir: join(dir, 's') });
  await fake.setupHost();
  const local = new LocalNode({ id: 'node-f', runtime: fake, pool: CONFORMANCE_POOL, agentReadyTimeoutMs: 5000, log: () => undefined });
  let node: LocalNode | RemoteNode = local;
  let close = async () => undefined as void;
  if (remote) {
    const { signer, verifier } = testClusterKeys();
    const app = nodeApi({ node: local, auth: verifier, byReference: false, exportsDir: join(dir, 'exports'), ...(remote.tls ? { https: { cert: remote.tls.cert, key: remote.tls.key } } : {}) });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (app.server.address() as AddressInfo).port;
    const client = new RemoteNode({ id: 'node-f', url: `${remote.tls ? 'https' : 'http'}://127.0.0.1:${port}`, auth: signer, unpack: unpackLayer, ...(remote.tls ? { ca: remote.tls.ca } : {}) });
    await client.ping();
    node = client;
    close = async () => {
      await client.close();
      await app.close();
    };
  }
  let heal: (() => void) | undefined;
  return {
    node,
    spec: (over) => ({ id: '', hostname: '', lowerDirs: [layer], layerIds: ['fake-layer'], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 256 }, internetAccess: false, env: {}, ...over }),
    failBoots: (fail) => {
      heal?.();
      heal = fail ? fake.failOn('create', new Error('injected failure')) : undefined;
    },
    writeFile: async (id, path, content) => fake.writeFile(id, path, content),
    readFile: async (id, path) => fake.readFile(id, path),
    egressOf: async (id) => fake.egressOf(id),
    oomKill: async (id) => fake.triggerOom(id),
    finish: async () => {
      try {
        await close();
        await local.close();
        for (const id of await fake.list()) await fake.destroy(id);
        assert.deepEqual(await fake.list(), []);
        assert.deepEqual(await readdir(join(dir, 's')), [], 'no socket left');
        assert.deepEqual(await readdir(join(dir, 'exports')).catch(() => []), [], "no snapshot's copy left on the node");
      } finally {
        await fake.dispose();
        await rm(dir, { recursive: true, force: true });
      }
    },
  };
}
