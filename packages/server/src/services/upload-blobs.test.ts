import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, test } from 'node:test';
import { BlobMismatchError, FsBlobStore } from '../images/blob-store.js';
import { SqliteStore } from '../store/sqlite.js';
import { BLOB_CHUNK_BYTES, StoreUploadBlobs } from './upload-blobs.js';

const dir = mkdtempSync(join(tmpdir(), 'sbd-upload-blobs-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
/** A body arriving in pieces of `piece` bytes, as a socket delivers it. */
const bodyOf = (b: Buffer, piece = 65_536) => Readable.from((function* () { for (let at = 0; at < b.length; at += piece) yield b.subarray(at, at + piece); })());

test('files of 0 bytes, of exactly two chunks, and of two chunks and a byte go in and come out whole, in chunks of at most BLOB_CHUNK_BYTES', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const blobs = new StoreUploadBlobs(store, new FsBlobStore(join(dir, 'cache-a')));
    for (const size of [0, 2 * BLOB_CHUNK_BYTES, 2 * BLOB_CHUNK_BYTES + 1]) {
      const bytes = Buffer.alloc(size);
      for (let i = 0; i < size; i++) bytes[i] = (i * 31) & 0xff;
      const hash = sha256(bytes);
      assert.deepEqual(await blobs.put(bodyOf(bytes, 100_000), { sha256: hash, size, maxBytes: size }), { sha256: hash, size });
      assert.deepEqual(await blobs.stat(hash), { sha256: hash, size });
      const sizes = (await store.blobs.chunks(hash, 0, 10)).map((c) => c.length);
      assert.equal(sizes.reduce((a, b) => a + b, 0), size);
      assert.ok(sizes.every((n) => n <= BLOB_CHUNK_BYTES && n > 0), JSON.stringify(sizes));
      // Another replica's cache, empty: it copies from the store, checked.
      const other = new StoreUploadBlobs(store, new FsBlobStore(join(dir, `cache-${size}`)));
      const [p1, p2] = await Promise.all([other.localPath(hash), other.localPath(hash)]);
      assert.equal(p1, p2, 'concurrent builds share one copy');
      assert.equal(sha256(readFileSync(p1)), hash);
    }
  } finally {
    store.close();
  }
});

test('a body shorter, longer or other than claimed, or of unknown hash over its size, is refused and leaves nothing', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const blobs = new StoreUploadBlobs(store, new FsBlobStore(join(dir, 'cache-bad')));
    const bytes = Buffer.alloc(BLOB_CHUNK_BYTES + 5, 'a');
    const hash = sha256(bytes);
    const refused = async (body: Readable, opts: { sha256?: string; size: number; maxBytes: number }, kind: BlobMismatchError['kind']) => {
      await assert.rejects(blobs.put(body, opts), (err: unknown) => err instanceof BlobMismatchError && err.kind === kind);
    };
    await refused(bodyOf(bytes.subarray(1)), { sha256: hash, size: bytes.length, maxBytes: bytes.length }, 'size');
    await refused(bodyOf(Buffer.concat([bytes, Buffer.from('x')])), { sha256: hash, size: bytes.length, maxBytes: bytes.length }, 'size');
    await refused(bodyOf(Buffer.alloc(bytes.length, 'b')), { sha256: hash, size: bytes.length, maxBytes: bytes.length }, 'sha256');
    await refused(bodyOf(bytes), { size: bytes.length + 10, maxBytes: bytes.length - 1 }, 'too-large');
    assert.equal(await blobs.stat(hash), undefined);
    assert.deepEqual(store.db.prepare('SELECT (SELECT count(*) FROM upload_blobs) AS blobs, (SELECT count(*) FROM upload_blob_chunks) AS chunks').get(), { blobs: 0, chunks: 0 });
    await assert.rejects(blobs.localPath(hash), /not in the store/);
  } finally {
    store.close();
  }
});
