// The node conformance suite against RemoteNode over TLS: the node API served over HTTPS with a
// certificate of a test CA, control trusting that CA only. Every verb, the takes, the agent relay
// (CONNECT inside TLS), the OOM stream and a snapshot's layer go over it; a control that does not
// trust that CA, or reaches the node by a name its certificate does not hold, is refused.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { fakeNode } from '../testing/fake-node.js';
import { fakeNodeHarness } from '../testing/node-harness.js';
import { makeTestTls } from '../testing/tls.js';
import { nodeConformance } from './conformance.js';
import { nodeApi } from './node-api.js';
import { RemoteNode } from './remote-node.js';

const tls = makeTestTls(['IP:127.0.0.1']);
after(() => tls.remove());

nodeConformance('RemoteNode over TLS', () => fakeNodeHarness({ tls }));

describe('a node over TLS refuses what its certificate does not allow', () => {
  let app: FastifyInstance;
  let port: number;
  let dir: string;
  const { signer, verifier } = testClusterKeys();
  const unreachable = (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE';

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-remote-tls-refused-'));
    const { node, runtime } = fakeNode({ socketDir: join(dir, 's'), id: 'node-t' });
    await runtime.setupHost();
    app = nodeApi({ node, auth: verifier, byReference: false, https: { cert: tls.cert, key: tls.key } });
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
        const r = new RemoteNode({ id: 'node-t', url: `https://127.0.0.1:${port}`, auth: signer, ca, callTimeoutMs: 5000 });
        await assert.rejects(r.ping(), unreachable, ca ? 'another CA' : 'the system CAs');
        await assert.rejects(r.dialAgent('x1', 3000), unreachable);
        await r.close();
      }
    } finally {
      other.remove();
    }
  });

  test('a name the certificate does not hold is refused; plain HTTP to the TLS port gets nothing', async () => {
    const byName = new RemoteNode({ id: 'node-t', url: `https://localhost:${port}`, auth: signer, ca: tls.ca, callTimeoutMs: 5000 });
    await assert.rejects(byName.ping(), unreachable);
    await assert.rejects(byName.dialAgent('x1', 3000), unreachable);
    await byName.close();
    const plain = new RemoteNode({ id: 'node-t', url: `http://127.0.0.1:${port}`, auth: signer, callTimeoutMs: 5000 });
    await assert.rejects(plain.ping(), (err: unknown) => err instanceof ServiceError);
  });
});
