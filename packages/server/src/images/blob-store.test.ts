import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, test } from 'node:test';
import { BlobMismatchError, FsBlobStore } from './blob-store.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'blob-store-test-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
/** A body arriving in several chunks, like an HTTP upload. */
const chunks = (b: Buffer) => Readable.from([b.subarray(0, 3), b.subarray(3, 10), b.subarray(10)]);

test('put streams, verifies and stores content under its sha256', async () => {
  const store = new FsBlobStore(join(dir, 'ok'));
  const body = Buffer.from('hello blob store, this is content');
  const info = await store.put(chunks(body), { sha256: `sha256:${sha(body)}`, size: body.length });
  assert.deepEqual(info, { sha256: sha(body), size: body.length });
  assert.deepEqual(await readFile(store.path(info.sha256)), body);
  assert.equal(await store.has(info.sha256), true);
  assert.deepEqual(await store.list(), [info.sha256]);
  // idempotent
  assert.deepEqual(await store.put(chunks(body)), info);
  await store.remove(info.sha256);
  assert.equal(await store.has(info.sha256), false);
});

test('a wrong hash, a short body or a long body stores nothing', async () => {
  const store = new FsBlobStore(join(dir, 'bad'));
  const body = Buffer.from('0123456789abcdefghij');
  await assert.rejects(store.put(chunks(body), { sha256: sha('other') }), (e: unknown) => e instanceof BlobMismatchError && e.kind === 'sha256');
  await assert.rejects(store.put(chunks(body), { size: body.length + 1 }), (e: unknown) => e instanceof BlobMismatchError && e.kind === 'size');
  await assert.rejects(store.put(chunks(body), { size: body.length - 1 }), (e: unknown) => e instanceof BlobMismatchError && e.kind === 'size');
  await assert.rejects(store.put(chunks(body), { maxBytes: 5 }), (e: unknown) => e instanceof BlobMismatchError && e.kind === 'too-large');
  assert.deepEqual(await store.list(), []);
  assert.deepEqual((await readdir(store.root)).filter((n) => n !== 'sha256'), [], 'no temp files left');
});

test('an aborted upload stores nothing', async () => {
  const store = new FsBlobStore(join(dir, 'abort'));
  const ac = new AbortController();
  async function* slow() {
    yield Buffer.from('part one');
    ac.abort();
    await new Promise((r) => setTimeout(r, 10));
    yield Buffer.from('part two');
  }
  await assert.rejects(store.put(slow(), { signal: ac.signal }));
  assert.deepEqual(await store.list(), []);
  assert.deepEqual((await readdir(store.root)).filter((n) => n !== 'sha256'), []);
});
