// A node's API closes whatever its clients hold open: control replicas keep an OOM event stream
// open on every node, and relayed connections to agents. A node told to stop must not wait for
// each of them to let go (it stayed up, unreachable, until killed, its warm pool undrained).
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { fakeNode } from '../testing/fake-node.js';
import { nodeApi } from './node-api.js';
import { RemoteNode } from './remote-node.js';

test("the node API closes within a second while control holds an event stream and a relayed connection open; the node's pool empties after", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-node-close-'));
  const { node, runtime } = fakeNode({ socketDir: join(dir, 's'), id: 'node-c', pool: { minPerKey: 1, maxMemoryMb: 100, refillDelayMs: 0 } });
  await runtime.setupHost();
  const { signer, verifier } = testClusterKeys();
  const app = nodeApi({ node, auth: verifier, byReference: false });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const remote = new RemoteNode({ id: 'node-c', url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, auth: signer });
  const stopWatching = remote.watchOom(() => undefined);
  try {
    const layer = join(dir, 'layer');
    await mkdir(layer);
    const spec = { id: '', hostname: '', lowerDirs: [layer], layerIds: ['l'], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 }, internetAccess: false, env: {} };
    const { id } = await remote.take({ spec, poolId: 'p', label: 'p', env: {}, egress: null });
    const relayed = await remote.dialAgent(id, 2000);
    let relayClosed = false;
    relayed.on('close', () => (relayClosed = true));
    // The pool boots one ahead for the key; the event stream is open.
    for (let i = 0; i < 100 && node.held().length === 0; i++) await sleep(20);
    assert.equal(node.held().length, 1, 'a ready sandbox in the pool');
    await sleep(100);

    const t0 = performance.now();
    await app.close();
    const closedMs = performance.now() - t0;
    assert.ok(closedMs < 1000, `closed in ${Math.round(closedMs)} ms`);
    for (let i = 0; i < 50 && !relayClosed; i++) await sleep(20);
    assert.ok(relayClosed, 'the relayed connection was closed');

    await node.close();
    assert.deepEqual(node.held(), [], 'the pool is empty');
    assert.deepEqual(await runtime.list(), [id], 'only the sandbox handed out is left (it is control\'s, and keeps running)');
    await runtime.destroy(id);
  } finally {
    stopWatching();
    await remote.close();
    await app.close();
    await runtime.dispose();
    await rm(dir, { recursive: true, force: true });
  }
});
