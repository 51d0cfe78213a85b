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
import { nodeApi } from './node-api.js';

const MIB = 1024 * 1024;

describe("a node's export of a sandbox holding a sparse file", { timeout: 60_000 }, () => {
  const { signer, verifier } = testClusterKeys();
  let dir: string;
  let app: FastifyInstance;
  let port: number;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-node-sparse-'));
    // The copy as the runtime leaves it: canonical owners, a 512 MiB file with nothing allocated.
    const runtime = {
      async exportLayer(_id: string, dest: string) {
        const f = join(dest, 'holes');
        await writeFile(f, '');
        await truncate(f, 512 * MIB);
        for (const p of [dest, f]) await chown(p, CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET);
        return { bytes: 512 * MIB, allocated: 4096, entries: 2, frozenMs: 0 };
      },
    } as unknown as Runtime;
    app = nodeApi({ nodeId: 'node-s', runtime, auth: verifier, exportsDir: join(dir, 'exports') });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });

  after(async () => {
    await app.close();
    await rm(dir, { recursive: true, force: true });
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
});
