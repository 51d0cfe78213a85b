// RemoteNode.exportLayer against a compromised node sending a snapshot's layer. Whatever it
// sends, control gets an error of that node in bounded time, and nothing of it stays in the
// destination (the snapshot service removes the directory; here it must be left empty).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { unpackLayer } from '../images/layer-tar.js';
import { EXPORT_STATS_HEADER, LAYER_BYTES_HEADER, LAYER_DIGEST_HEADER } from '../runtime/layer-export-wire.js';
import { RemoteNode } from './remote-node.js';
import { ExportTooLarge } from '../runtime/types.js';
import { testClusterKeys } from '../testing/cluster-keys.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

describe("a snapshot's layer from a hostile node: refused, and nothing of it left in the destination", { timeout: 60_000 }, () => {
  let server: Server;
  let url: string;
  let handler: Handler = (_q, s) => s.end();
  const sockets = new Set<Socket>();
  const { signer } = testClusterKeys();
  const remote = (o: { exportIdleMs?: number } = {}) => new RemoteNode({ id: 'node-h', url, auth: signer, unpack: unpackLayer, exportIdleMs: o.exportIdleMs });
  const nodeFault = (err: unknown) => err instanceof ServiceError && (err.code === 'RUNTIME_ERROR' || err.code === 'NODE_UNAVAILABLE');
  let dest: string;

  before(async () => {
    dest = await mkdtemp(join(tmpdir(), 'sbd-export-hostile-'));
    server = createServer((q, s) => handler(q, s));
    server.on('connection', (s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
    await rm(dest, { recursive: true, force: true });
  });

  test('without an unpacker, no snapshot is taken from a node', async () => {
    await assert.rejects(new RemoteNode({ id: 'node-h', url, auth: signer }).exportLayer('a1', dest), (err: unknown) => err instanceof ServiceError && err.code === 'INVALID_STATE');
  });

  const stats = JSON.stringify({ bytes: 5, allocated: 4096, entries: 2, frozenMs: 0 });
  const layerAnswer = (body: Buffer, h: Record<string, string>): Handler => (_q, res) => {
    res.writeHead(200, { 'content-type': 'application/x-tar', ...h });
    res.end(body);
  };
  const junk = Buffer.alloc(10240, 0x41);
  const digestOf = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
  const cases: Array<[string, Handler]> = [
    ['no headers', layerAnswer(junk, {})],
    ['a digest that is not one', layerAnswer(junk, { [LAYER_DIGEST_HEADER]: 'md5:abc', [LAYER_BYTES_HEADER]: '10240', [EXPORT_STATS_HEADER]: stats })],
    ['stats of the wrong shape', layerAnswer(junk, { [LAYER_DIGEST_HEADER]: digestOf(junk), [LAYER_BYTES_HEADER]: '10240', [EXPORT_STATS_HEADER]: '{"bytes":"5"}' })],
    ['a length far over what the stats allow', layerAnswer(junk, { [LAYER_DIGEST_HEADER]: digestOf(junk), [LAYER_BYTES_HEADER]: String(10 * 1024 ** 3), [EXPORT_STATS_HEADER]: stats })],
    ['a body that is not a tar', layerAnswer(junk, { [LAYER_DIGEST_HEADER]: digestOf(junk), [LAYER_BYTES_HEADER]: '10240', [EXPORT_STATS_HEADER]: stats })],
    ['a digest the body does not have', layerAnswer(Buffer.alloc(10240), { [LAYER_DIGEST_HEADER]: `sha256:${'0'.repeat(64)}`, [LAYER_BYTES_HEADER]: '10240', [EXPORT_STATS_HEADER]: stats })],
  ];
  for (const [what, h] of cases) {
    test(what, async () => {
      handler = h;
      await assert.rejects(remote().exportLayer('a1', dest), nodeFault);
      assert.deepEqual(await readdir(dest), []);
    });
  }

  test('a body that stalls is cut off after the idle limit', async () => {
    handler = (_q, res) => {
      res.writeHead(200, { [LAYER_DIGEST_HEADER]: digestOf(junk), [LAYER_BYTES_HEADER]: '10240', [EXPORT_STATS_HEADER]: stats });
      res.write(junk.subarray(0, 100));
    };
    const t0 = performance.now();
    await assert.rejects(remote({ exportIdleMs: 500 }).exportLayer('a1', dest), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE');
    assert.ok(performance.now() - t0 < 5000);
    assert.deepEqual(await readdir(dest), []);
  });

  test("a refusal for size is ExportTooLarge only with a whole number of bytes; otherwise the node's error as it is", async () => {
    const refusal = (used: unknown): Handler => (_q, res) => {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ code: 'LIMIT_EXCEEDED', message: 'too large', extra: { export_used_bytes: used } }));
    };
    handler = refusal(12345);
    await assert.rejects(remote().exportLayer('a1', dest, { maxBytes: 10 }), (err: unknown) => err instanceof ExportTooLarge && err.used === 12345);
    for (const used of ['12345', -1, 1.5, null]) {
      handler = refusal(used);
      await assert.rejects(remote().exportLayer('a1', dest, { maxBytes: 10 }), (err: unknown) => err instanceof ServiceError && err.code === 'LIMIT_EXCEEDED');
    }
  });
});
