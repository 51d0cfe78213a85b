import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CappedOutput, utf8SafeEnd } from './capture.js';

test('keeps output up to the cap and counts the rest', () => {
  const out = new CappedOutput(10);
  out.push(Buffer.from('hello '));
  out.push(Buffer.from('world, and more'));
  assert.equal(out.text(), 'hello worl');
  assert.equal(out.truncated, true);
  assert.equal(out.totalBytes, 21);
  out.push(Buffer.from('ignored'));
  assert.equal(out.text(), 'hello worl');
});

test('below the cap nothing is truncated', () => {
  const out = new CappedOutput(100);
  out.push(Buffer.from('a'));
  out.push(Buffer.from('b'));
  assert.equal(out.text(), 'ab');
  assert.equal(out.truncated, false);
  assert.equal(new CappedOutput(5).text(), '');
});

test('a multi-byte character cut by the cap is dropped, not mangled', () => {
  const out = new CappedOutput(4);
  out.push(Buffer.from('abcé€')); // é = 2 bytes, € = 3: the cap falls inside é
  assert.equal(out.text(), 'abc');
  const euro = new CappedOutput(6);
  euro.push(Buffer.from('abcé€'));
  assert.equal(euro.text(), 'abcé');
});

test('utf8SafeEnd', () => {
  assert.equal(utf8SafeEnd(Buffer.from('abc')), 3);
  const e = Buffer.from('a€'); // 1 + 3 bytes
  assert.equal(utf8SafeEnd(e), 4);
  assert.equal(utf8SafeEnd(e.subarray(0, 3)), 1);
  assert.equal(utf8SafeEnd(e.subarray(0, 2)), 1);
  assert.equal(utf8SafeEnd(Buffer.from('😀').subarray(0, 3)), 0);
  assert.equal(utf8SafeEnd(Buffer.alloc(0)), 0);
});
