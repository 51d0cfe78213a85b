import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { encodeFrame, FRAME, frameQueue, FrameReader, jsonFrame, MAX_FRAME_BYTES, outputFrames, sendFrames } from './frames.js';
import { keepaliveMs, MAX_QUEUED_BYTES } from './stream-queue.js';

test('a frame is [kind u8][length u32 BE][payload]', () => {
  assert.deepEqual([...encodeFrame(FRAME.stdout, Buffer.from('hi'))], [1, 0, 0, 0, 2, 0x68, 0x69]);
  assert.deepEqual([...encodeFrame(FRAME.keepalive)], [4, 0, 0, 0, 0]);
  const j = jsonFrame({ start: { pid: 7 } });
  assert.equal(j[0], 0);
  assert.equal(j.readUInt32BE(1), j.length - 5);
  assert.deepEqual(JSON.parse(j.subarray(5).toString()), { start: { pid: 7 } });
  assert.throws(() => encodeFrame(FRAME.pty, Buffer.alloc(MAX_FRAME_BYTES + 1)), RangeError);
});

test('output larger than a frame is split; frames read back from any chunking', () => {
  const data = Buffer.alloc(MAX_FRAME_BYTES * 2 + 3, 7);
  const frames = outputFrames('stderr', data);
  assert.deepEqual(frames.map((f) => [f[0], f.readUInt32BE(1)]), [
    [2, MAX_FRAME_BYTES],
    [2, MAX_FRAME_BYTES],
    [2, 3],
  ]);
  const all = Buffer.concat([jsonFrame({ a: 1 }), ...frames, encodeFrame(FRAME.keepalive)]);
  const reader = new FrameReader();
  const got = [];
  // Odd-sized chunks cut headers and payloads anywhere.
  for (let off = 0; off < all.length; off += 7777) got.push(...reader.push(all.subarray(off, off + 7777)));
  assert.equal(reader.pending, 0);
  assert.deepEqual(got.map((f) => [f.kind, f.payload.length]), [[0, 7], [2, MAX_FRAME_BYTES], [2, MAX_FRAME_BYTES], [2, 3], [4, 0]]);
  assert.ok(Buffer.concat(got.slice(1, 4).map((f) => f.payload)).equals(data));
});

test('keepalive_ms: default 50 s, clamped to 1..300 s, a non-number refused', () => {
  assert.deepEqual([keepaliveMs(undefined), keepaliveMs(null), keepaliveMs(10), keepaliveMs(2500), keepaliveMs(1e9)], [50_000, 50_000, 1000, 2500, 300_000]);
  assert.throws(() => keepaliveMs('5'), /keepalive_ms/);
});

test('sendFrames: frames in order with keepalives; a reader too slow gets an error frame and the end', async () => {
  const server = createServer((req, res) => {
    const queue = frameQueue();
    if (req.url === '/slow') {
      // More than the bound queued before the writer takes any: the queue fails.
      for (let i = 0; i <= MAX_QUEUED_BYTES / MAX_FRAME_BYTES; i++) queue.push(encodeFrame(FRAME.stdout, Buffer.alloc(MAX_FRAME_BYTES)));
    } else {
      queue.push(jsonFrame({ n: 1 }));
      setTimeout(() => {
        queue.push(encodeFrame(FRAME.stdout, Buffer.from('late')));
        queue.end();
      }, 1300);
    }
    void sendFrames(res, queue, 1000);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const read = async (path: string) => {
      const reader = new FrameReader();
      const frames = reader.push(Buffer.from(await (await fetch(`${base}${path}`)).arrayBuffer()));
      assert.equal(reader.pending, 0);
      return frames;
    };
    const ok = await read('/ok');
    assert.deepEqual(ok.map((f) => [f.kind, f.payload.toString()]), [[0, '{"n":1}'], [4, ''], [1, 'late']]);
    const slow = await read('/slow');
    assert.equal(slow.length, 1);
    assert.equal(slow[0]!.kind, FRAME.error);
    assert.equal((JSON.parse(slow[0]!.payload.toString()) as { code: string }).code, 'QUOTA_EXCEEDED');
  } finally {
    await new Promise<void>((r) => server.close(() => r()));
  }
});
