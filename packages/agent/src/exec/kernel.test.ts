import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EndScanner } from './end-scanner.js';

const MARKER = Buffer.from('\0sbx-end:abc\0');

/** Feeds `input` to a scanner in pieces of `size` bytes; what came out, and whether it ended. */
function scan(input: Buffer, size: number): { out: string; ended: boolean } {
  const s = new EndScanner(MARKER);
  const parts: Buffer[] = [];
  for (let i = 0; i < input.length; i += size) parts.push(s.feed(input.subarray(i, i + size)));
  return { out: Buffer.concat(parts).toString(), ended: s.ended };
}

test('the end marker is found whichever way the stream is cut, and nothing of it leaks', () => {
  const input = Buffer.concat([Buffer.from('hello\nworld'), MARKER, Buffer.from('after')]);
  for (let size = 1; size <= input.length; size++) assert.deepEqual(scan(input, size), { out: 'hello\nworld', ended: true }, `pieces of ${size}`);
});

test('output that looks like the start of the marker is held back only until it is known not to be', () => {
  const s = new EndScanner(MARKER);
  assert.equal(s.feed(Buffer.from('a\0sbx')).toString(), 'a');
  assert.equal(s.feed(Buffer.from('-other')).toString(), '\0sbx-other');
  assert.equal(s.feed(Buffer.from('\0sbx-end:ab')).toString(), '');
  assert.equal(s.flush().toString(), '\0sbx-end:ab', 'a stream that ended gives back what was held');
  assert.equal(s.ended, false);
});

test('another cell\'s marker is output, not an end', () => {
  const r = scan(Buffer.concat([Buffer.from('\0sbx-end:xyz\0'), MARKER]), 4);
  assert.deepEqual(r, { out: '\0sbx-end:xyz\0', ended: true });
});
