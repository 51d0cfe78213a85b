import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { chunksOf, counted, isReplayable, multipart, streamFrom } from './body.js';

async function bytesOf(it: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const c of it) parts.push(c);
  return Buffer.concat(parts);
}

test('every upload source kind yields its bytes', async () => {
  const want = Buffer.from('hello, sandbox');
  const sources = [
    'hello, sandbox',
    new Uint8Array(want),
    want.buffer.slice(want.byteOffset, want.byteOffset + want.byteLength),
    new Blob([want]),
    Readable.from([Buffer.from('hello, '), Buffer.from('sandbox')]),
    streamFrom((async function* () { yield new Uint8Array(want); })()),
    (async function* () { yield 'hello, '; yield new TextEncoder().encode('sandbox'); })(),
  ];
  for (const s of sources) assert.deepEqual(await bytesOf(chunksOf(s as never)), want);
  assert.equal(isReplayable('x'), true);
  assert.equal(isReplayable(new Uint8Array(1)), true);
  assert.equal(isReplayable(Readable.from([])), false);
});

test('counted reports running totals', async () => {
  const seen: number[] = [];
  await bytesOf(counted(chunksOf(Readable.from([Buffer.alloc(3), Buffer.alloc(4)])), (n) => seen.push(n)));
  assert.deepEqual(seen, [3, 7]);
});

test('multipart body parses as form data with the path field before the file', async () => {
  const data = Buffer.alloc(300_000, 7);
  data[123] = 13;
  data[124] = 10;
  const form = multipart({ path: '/workspace/dir/file "q".bin' }, { field: 'file', filename: 'file "q".bin', contentType: 'application/octet-stream', chunks: () => chunksOf(new Uint8Array(data)) });
  assert.match(form.contentType, /^multipart\/form-data; boundary=/);
  const raw = await bytesOf(form.body() as unknown as AsyncIterable<Uint8Array>);
  assert.ok(raw.indexOf('name="path"') < raw.indexOf('name="file"'), 'path part first');
  const fd = await new Response(new Uint8Array(raw), { headers: { 'content-type': form.contentType } }).formData();
  assert.equal(fd.get('path'), '/workspace/dir/file "q".bin');
  const file = fd.get('file') as Blob;
  assert.deepEqual(Buffer.from(await file.arrayBuffer()), data);
  // The body can be produced again for a retry.
  assert.equal((await bytesOf(form.body() as unknown as AsyncIterable<Uint8Array>)).length, raw.length);
});

test('streamFrom skips empty chunks without stalling (tar padding is often empty)', async () => {
  const src = streamFrom(
    (async function* () {
      yield new Uint8Array(0);
      yield new TextEncoder().encode('a');
      yield new Uint8Array(0);
      yield new Uint8Array(0);
      yield new TextEncoder().encode('b');
      yield new Uint8Array(0);
    })(),
  );
  const got = await Promise.race([
    new Response(src).text(),
    new Promise((_, reject) => setTimeout(() => reject(new Error('the stream stalled')), 2000)),
  ]);
  assert.equal(got, 'ab');
});
