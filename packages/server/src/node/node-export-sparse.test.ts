// A node's snapshot export against a tenant's sparse file: the tar holds every byte of a file, holes
// too, which the disk's count (and the copy's allocation) does not. With a limit asked, the node
// refuses by the files' length before it reads them for a digest and sends them to control.
import assert from 'node:assert/strict';
import { chown, mkdtemp, readdir, rm, truncate, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import type { Runtime } from '../runtime/types.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { nodeOver } from '../testing/fake-node.js';
import { nodeApi } from './node-api.js';

const MIB = 1024 * 1024;

/**
 * The copy as the runtime leaves it: canonical owners, a file with nothing allocated (512 MiB; 16 GiB
 * for sandboxes `huge` and `slow` (whose copy takes 0.8 s), whose count the runtime gets wrong, so that only the digest's read is left).
 */
function runtimeOf(): Runtime {
  return {
    async exportLayer(id: string, dest: string) {
      if (id === 'slow') await new Promise((r) => setTimeout(r, 800)); // a copy that takes its time
      const f = join(dest, 'holes');
      await writeFile(f, '');
      await truncate(f, id === 'huge' || id === 'slow' ? 16 * 1024 * MIB : 512 * MIB);
      for (const p of [dest, f]) await chown(p, CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET);
      return { bytes: id === 'huge' || id === 'slow' ? 0 : 512 * MIB, allocated: 4096, entries: 2, frozenMs: 0 };
    },
  } as unknown as Runtime;
}

describe("a node's export of a sandbox holding a sparse file", { timeout: 60_000 }, () => {
  const { signer, verifier } = testClusterKeys();
  let dir: string;
  let app: FastifyInstance;
  let port: number;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-node-sparse-'));
    app = nodeApi({ node: nodeOver(runtimeOf(), 'node-s'), byReference: false, auth: verifier, exportsDir: join(dir, 'exports'), exportMaxBytes: 256 * MIB });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });

  let unlimited: FastifyInstance | undefined;
  after(async () => {
    await unlimited?.close();
    await app.close();
    await rm(dir, { recursive: true, force: true });
  });

  const post = async (body: unknown) => {
    const r = await fetch(`http://127.0.0.1:${port}/node/v1/sandboxes/sb1/layer`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await signer.tokenFor('node-s')}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const json = r.headers.get('content-type')?.includes('json') ? ((await r.json()) as { code?: string; extra?: Record<string, unknown> }) : (await r.body?.cancel(), {});
    return { status: r.status, body: json };
  };

  test("without max_bytes (no quota), still the node's own limit: LIMIT_EXCEEDED, not a size ExportTooLarge maps from", async () => {
    const r = await post({});
    assert.notEqual(r.status, 200);
    assert.equal(r.body.code, 'LIMIT_EXCEEDED');
    assert.equal(r.body.extra?.limit, 'snapshot_layer_bytes');
    assert.equal(r.body.extra?.export_used_bytes, undefined);
  });

  test('with max_bytes: LIMIT_EXCEEDED by the files\' length (export_used_bytes), nothing sent, no copy left', async () => {
    const r = await fetch(`http://127.0.0.1:${port}/node/v1/sandboxes/sb1/layer`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await signer.tokenFor('node-s')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ max_bytes: 64 * MIB }),
    });
    const body = r.headers.get('content-type')?.includes('json') ? ((await r.json()) as { code?: string; extra?: { export_used_bytes?: number } }) : (await r.body?.cancel(), {});
    assert.notEqual(r.status, 200, 'refused, not sent');
    assert.equal(body.code, 'LIMIT_EXCEEDED');
    assert.equal(body.extra?.export_used_bytes, 512 * MIB);
    let left = await readdir(join(dir, 'exports'));
    for (let i = 0; i < 40 && left.length > 0; i++) left = await new Promise((res) => setTimeout(res, 50)).then(() => readdir(join(dir, 'exports')));
    assert.deepEqual(left, []);
  });

  for (const [when, id] of [
    ['while the node reads the copy for its digest', 'huge'],
    ['while the node is still copying', 'slow'],
  ]) {
    test(`a control that leaves ${when}: the node reads no more of it, and the copy goes`, async () => {
      // A node with no limit of its own: the digest would read 16 GiB of holes.
      const exports = join(dir, 'exports-unlimited');
      unlimited ??= nodeApi({ node: nodeOver(runtimeOf(), 'node-s'), byReference: false, auth: verifier, exportsDir: exports });
      if (!unlimited.server.listening) await unlimited.listen({ host: '127.0.0.1', port: 0 });
      const p = (unlimited.server.address() as AddressInfo).port;
      const ac = new AbortController();
      const headers = { authorization: `Bearer ${await signer.tokenFor('node-s')}`, 'content-type': 'application/json' };
      const asked = fetch(`http://127.0.0.1:${p}/node/v1/sandboxes/${id}/layer`, { method: 'POST', headers, body: '{}', signal: ac.signal }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 400));
      ac.abort();
      await asked;
      await new Promise((r) => setTimeout(r, 600)); // the slow copy ends meanwhile
      let left = await readdir(exports);
      for (let i = 0; i < 30 && left.length > 0; i++) left = await new Promise((res) => setTimeout(res, 100)).then(() => readdir(exports));
      assert.deepEqual(left, [], 'the copy is removed within 3 s, not once 16 GiB were read');
    });
  }
});
