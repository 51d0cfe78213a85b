// RemoteNode.exportLayer's bounds: what a node says its copy counted is its word,
// not a limit. A well-formed layer tar far larger than the snapshot may store (a hostile node, or an
// honest one sending a tenant's sparse file at its full length) is refused before a byte of it lands
// on control's disk, and what the snapshot is counted as is what control unpacked. Root (chown).
import assert from 'node:assert/strict';
import { chownSync, linkSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { digestLayerTree, packLayer, unpackLayer } from '../images/layer-tar.js';
import { CANONICAL_ID_OFFSET, LEGACY_ID_OFFSET } from '../runtime/ids.js';
import { EXPORT_STATS_HEADER, LAYER_BYTES_HEADER, LAYER_DIGEST_HEADER } from '../runtime/layer-export-wire.js';
import { RemoteNode } from './remote-node.js';
import { ExportTooLarge } from '../runtime/types.js';
import { testClusterKeys } from '../testing/cluster-keys.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
const MIB = 1024 * 1024;

describe("a snapshot's layer from a node: bounded by what may be stored, counted as unpacked", { timeout: process.env.SANDBOXD_SLOW_TESTS ? 420_000 : 60_000 }, () => {
  let server: Server;
  let url: string;
  let handler: Handler = (_q, s) => s.end();
  const sockets = new Set<Socket>();
  const { signer } = testClusterKeys();
  let work: string;
  let dest: string;
  /** A layer tar of one 4 MiB file (canonical owners), as a node would send it. */
  let tar: Buffer;
  let digest: string;

  before(async () => {
    work = await mkdtemp(join(tmpdir(), 'sbd-export-bounds-'));
    const tree = join(work, 'tree');
    mkdirSync(tree);
    writeFileSync(join(tree, 'big'), Buffer.alloc(4 * MIB, 0x61));
    for (const p of [tree, join(tree, 'big')]) chownSync(p, CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET);
    const chunks: Buffer[] = [];
    for await (const c of packLayer(tree) as AsyncIterable<Buffer>) chunks.push(c);
    tar = Buffer.concat(chunks);
    digest = (await digestLayerTree(tree)).digest;
    server = createServer((q, s) => handler(q, s));
    server.on('connection', (s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  beforeEach(async () => {
    dest = await mkdtemp(join(work, 'dest-'));
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
    await rm(work, { recursive: true, force: true });
  });

  /** The node's answer: this tar, with the stats it claims. */
  const claiming = (stats: { bytes: number; allocated: number; entries: number }): Handler => (_q, res) => {
    res.writeHead(200, { 'content-type': 'application/x-tar', [LAYER_DIGEST_HEADER]: digest, [LAYER_BYTES_HEADER]: String(tar.length), [EXPORT_STATS_HEADER]: JSON.stringify({ ...stats, frozenMs: 0 }) });
    res.end(tar);
  };

  test('a tar larger than the room the snapshot has is ExportTooLarge, whatever the node says it allocated', async () => {
    handler = claiming({ bytes: 4 * MIB, allocated: 0, entries: 2 });
    await assert.rejects(new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer }).exportLayer('a1', dest, { maxBytes: MIB }), (err: unknown) => err instanceof ExportTooLarge && err.used >= 4 * MIB);
    assert.deepEqual(await readdir(dest), [], 'nothing of it unpacked');
  });

  test('a node that claims a huge byte count gets no more room for it', async () => {
    handler = claiming({ bytes: 2 ** 50, allocated: 0, entries: 2 });
    await assert.rejects(new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer }).exportLayer('a1', dest, { maxBytes: MIB }), (err: unknown) => err instanceof ExportTooLarge);
    assert.deepEqual(await readdir(dest), []);
  });

  test('a node that claims every entry it may (room for their headers) still sends no more file bytes than the room', async () => {
    handler = claiming({ bytes: 4 * MIB, allocated: 0, entries: 2_000_000 });
    await assert.rejects(new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer }).exportLayer('a1', dest, { maxBytes: MIB }), (err: unknown) => err instanceof ServiceError && err.code === 'RUNTIME_ERROR');
    assert.deepEqual(await readdir(dest), [], 'refused at the header of the file, before tar saw it');
  });

  test('with no room given, the tar is still bounded (exportMaxBytes): LIMIT_EXCEEDED, nothing unpacked', async () => {
    handler = claiming({ bytes: 2 ** 50, allocated: 0, entries: 2 });
    const rt = new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer, exportMaxBytes: 2 * MIB });
    await assert.rejects(rt.exportLayer('a1', dest), (err: unknown) => err instanceof ServiceError && err.code === 'LIMIT_EXCEEDED');
    assert.deepEqual(await readdir(dest), []);
  });

  test('what the snapshot is counted as is what was unpacked, not what the node claims', async () => {
    handler = claiming({ bytes: 4 * MIB, allocated: 0, entries: 0 });
    const got = await new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer }).exportLayer('a1', dest, { maxBytes: 16 * MIB });
    assert.ok(got.allocated >= 4 * MIB, `counted as ${got.allocated} bytes, not the node's 0`);
    assert.equal(got.bytes, 4 * MIB);
    assert.equal(got.entries, 2);
  });

  const steady = (chunkBytes: number, everyMs: number): Handler => (_q, res) => {
    res.writeHead(200, { 'content-type': 'application/x-tar', [LAYER_DIGEST_HEADER]: digest, [LAYER_BYTES_HEADER]: String(tar.length), [EXPORT_STATS_HEADER]: JSON.stringify({ bytes: 4 * MIB, allocated: 4 * MIB, entries: 2, frozenMs: 0 }) });
    let at = 0;
    const t = setInterval(() => {
      if (res.destroyed) return clearInterval(t);
      res.write(tar.subarray(at, at + chunkBytes));
      at += chunkBytes;
      if (at >= tar.length) {
        clearInterval(t);
        res.end();
      }
    }, everyMs);
  };

  test('no answer in time (the copy): NODE_UNAVAILABLE', async () => {
    handler = () => undefined;
    const rt = new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer, exportAnswerMs: 300 });
    await assert.rejects(rt.exportLayer('a1', dest), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE');
  });

  test('the deadline of the answer does not cut a tar that is coming steadily after it', async () => {
    handler = steady(512 * 1024, 100);
    const rt = new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer, exportAnswerMs: 300, exportIdleMs: 2000 });
    const got = await rt.exportLayer('a1', dest);
    assert.equal(got.bytes, 4 * MIB);
  });

  test('a trickle that is never idle long enough to be cut off is cut by its length at the least rate', async () => {
    handler = steady(512, 100);
    const rt = new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer, exportIdleMs: 400, exportMinBytesPerSecond: 1e7 });
    const t0 = performance.now();
    await assert.rejects(rt.exportLayer('a1', dest), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE' && /not sent in/.test(err.detail ?? ''));
    assert.ok(performance.now() - t0 < 5000);
  });

  test("a size refusal is ExportTooLarge only when a limit was asked and the node's count is over it", async () => {
    const refusal = (used: number): Handler => (_q, res) => {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ code: 'LIMIT_EXCEEDED', message: 'too large', extra: { export_used_bytes: used } }));
    };
    const rt = new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer });
    handler = refusal(12345);
    await assert.rejects(rt.exportLayer('a1', dest), (err: unknown) => !(err instanceof ExportTooLarge) && err instanceof ServiceError && err.code === 'LIMIT_EXCEEDED');
    handler = refusal(5);
    await assert.rejects(rt.exportLayer('a1', dest, { maxBytes: 10 }), (err: unknown) => !(err instanceof ExportTooLarge) && err instanceof ServiceError);
    handler = refusal(11);
    await assert.rejects(rt.exportLayer('a1', dest, { maxBytes: 10 }), (err: unknown) => err instanceof ExportTooLarge && err.used === 11);
  });

  test('a tree of many hard links (each a header in the tar, no inode) is taken when the node counts its names', async () => {
    const tree = join(work, 'links');
    mkdirSync(tree);
    writeFileSync(join(tree, 'f'), 'x');
    for (let i = 0; i < 300; i++) linkSync(join(tree, 'f'), join(tree, `l${i}`));
    for (const p of [tree, join(tree, 'f')]) chownSync(p, CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET);
    const chunks: Buffer[] = [];
    for await (const c of packLayer(tree) as AsyncIterable<Buffer>) chunks.push(c);
    const links = Buffer.concat(chunks);
    const d = (await digestLayerTree(tree)).digest;
    // What the copy counted: 2 inodes (the root and the file), 302 names.
    handler = (_q, res) => {
      res.writeHead(200, { 'content-type': 'application/x-tar', [LAYER_DIGEST_HEADER]: d, [LAYER_BYTES_HEADER]: String(links.length), [EXPORT_STATS_HEADER]: JSON.stringify({ bytes: 1, allocated: 8192, entries: 2, names: 302, frozenMs: 0 }) });
      res.end(links);
    };
    const got = await new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer }).exportLayer('a1', dest, { maxBytes: 16 * MIB });
    assert.equal(got.entries, 302);
    // Names fewer than inodes, or more than a snapshot may hold: not a count of a copy.
    for (const names of [1, 2_000_001, 2.5]) {
      handler = (_q, res) => {
        res.writeHead(200, { [LAYER_DIGEST_HEADER]: d, [LAYER_BYTES_HEADER]: String(links.length), [EXPORT_STATS_HEADER]: JSON.stringify({ bytes: 1, allocated: 8192, entries: 2, names, frozenMs: 0 }) });
        res.end(links);
      };
      const other = await mkdtemp(join(work, 'dest-'));
      await assert.rejects(new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer }).exportLayer('a1', other), (err: unknown) => err instanceof ServiceError && err.code === 'RUNTIME_ERROR', String(names));
      assert.deepEqual(await readdir(other), []);
    }
  });

  test('a layer owned in the legacy id range (inside the hosts\' subuid space) is not a snapshot a node made', async () => {
    const tree = join(work, 'legacy');
    mkdirSync(tree);
    writeFileSync(join(tree, 'f'), 'x');
    for (const p of [tree, join(tree, 'f')]) chownSync(p, LEGACY_ID_OFFSET, LEGACY_ID_OFFSET);
    const chunks: Buffer[] = [];
    for await (const c of packLayer(tree) as AsyncIterable<Buffer>) chunks.push(c);
    const legacy = Buffer.concat(chunks);
    const d = (await digestLayerTree(tree)).digest;
    handler = (_q, res) => {
      res.writeHead(200, { [LAYER_DIGEST_HEADER]: d, [LAYER_BYTES_HEADER]: String(legacy.length), [EXPORT_STATS_HEADER]: JSON.stringify({ bytes: 1, allocated: 8192, entries: 2, frozenMs: 0 }) });
      res.end(legacy);
    };
    await assert.rejects(new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer }).exportLayer('a1', dest), (err: unknown) => err instanceof ServiceError && err.code === 'RUNTIME_ERROR');
    assert.deepEqual(await readdir(dest), []);
  });

  test('headers that trickle in, or one header of 100 KB: cut off (the deadline of the answer; the header limit)', async () => {
    const raw = createNetServer((sock) => {
      sock.on('error', () => undefined);
      sock.once('data', (q) => {
        if (q.toString('latin1').includes('/huge/')) return void sock.write(`HTTP/1.1 200 OK\r\nx-a: ${'a'.repeat(100_000)}\r\n\r\n`);
        sock.write('HTTP/1.1 200 OK\r\n');
        const t = setInterval(() => (sock.destroyed ? clearInterval(t) : sock.write('x-a: a\r\n')), 100);
      });
    });
    await new Promise<void>((r) => raw.listen(0, '127.0.0.1', r));
    const rawUrl = `http://127.0.0.1:${(raw.address() as AddressInfo).port}`;
    try {
      const rt = new RemoteNode({ id: 'node-b', url: rawUrl, auth: signer, unpack: unpackLayer, exportAnswerMs: 800 });
      for (const id of ['slow1', 'huge']) {
        const t0 = performance.now();
        await assert.rejects(rt.exportLayer(id, dest), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE', id);
        assert.ok(performance.now() - t0 < 5000, id);
      }
      assert.deepEqual(await readdir(dest), []);
    } finally {
      raw.close();
    }
  });

  // Five minutes and more of waiting: run with SANDBOXD_SLOW_TESTS=1.
  test("a node's copy that takes over 5 min is waited for (fetch's own 300 s headers timeout cut it)", { skip: !process.env.SANDBOXD_SLOW_TESTS, timeout: 400_000 }, async () => {
    const answer = claiming({ bytes: 4 * MIB, allocated: 4 * MIB, entries: 2 });
    handler = (q, res) => void setTimeout(() => answer(q, res), 310_000);
    const got = await new RemoteNode({ id: 'node-b', url, auth: signer, unpack: unpackLayer }).exportLayer('a1', dest);
    assert.equal(got.bytes, 4 * MIB);
  });
});
