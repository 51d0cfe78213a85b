import { test } from 'node:test';
import assert from 'node:assert/strict';
import { queryPath, resolvePath } from './paths.js';

test('absolute paths are normalised; relative ones start at the workspace', () => {
  assert.equal(resolvePath('/a/b/../c/', '/workspace'), '/a/c');
  assert.equal(resolvePath('/', '/workspace'), '/');
  assert.equal(resolvePath('x/y.txt', '/workspace'), '/workspace/x/y.txt');
  assert.equal(resolvePath('../etc/passwd', '/workspace'), '/etc/passwd');
  assert.equal(resolvePath('/a//b/./c', '/workspace'), '/a/b/c');
  assert.equal(resolvePath('dir with spaces/ünïcödé ✓.txt', '/workspace'), '/workspace/dir with spaces/ünïcödé ✓.txt');
});

test('missing, empty and NUL-carrying paths are rejected', () => {
  assert.throws(() => resolvePath(undefined, '/w'), { code: 'VALIDATION_ERROR' });
  assert.throws(() => resolvePath('', '/w'), { code: 'VALIDATION_ERROR' });
  assert.throws(() => resolvePath(42, '/w'), { code: 'VALIDATION_ERROR' });
  assert.throws(() => resolvePath('/a\0b', '/w'), { code: 'INVALID_PATH' });
  assert.throws(() => resolvePath(`/${'x'.repeat(5000)}`, '/w'), { code: 'INVALID_PATH' });
});

test('query paths decode + as a space (axios encoding) and %XX', () => {
  assert.equal(queryPath(new URL('http://a/files/read?path=%2Fworkspace%2Fprobe+dir%2Fa.txt'), '/w'), '/workspace/probe dir/a.txt');
  assert.equal(queryPath(new URL('http://a/f?path=/tmp/%C3%BC'), '/w'), '/tmp/ü');
  assert.throws(() => queryPath(new URL('http://a/f'), '/w'), { code: 'VALIDATION_ERROR' });
});
