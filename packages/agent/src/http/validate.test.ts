import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ServiceError } from '../proto.js';
import { optionalString, optionalStringArray, requiredString, stdinInput, workingDir } from './validate.js';

const refused = (fn: () => unknown, field: string) =>
  assert.throws(fn, (err: unknown) => err instanceof ServiceError && err.code === 'VALIDATION_ERROR' && err.status === 400 && /NUL/.test(err.message) && err.message.includes(field));

test('strings that reach a spawn, a path or an env refuse NUL bytes with a 400 naming the field', () => {
  refused(() => requiredString({ code: 'print(1)\0' }, 'code'), 'code');
  refused(() => optionalString({ language: 'py\0' }, 'language'), 'language');
  refused(() => optionalStringArray({ args: ['ok', 'b\0d'] }, 'args'), 'args[1]');
  refused(() => workingDir({ workdir: '/tmp/\0' }), 'workdir');
  assert.equal(requiredString({ code: 'print(1)' }, 'code'), 'print(1)');
  assert.deepEqual(optionalStringArray({ args: ['a', 1] }, 'args'), ['a', '1']);
});

test('data that never becomes a C string may hold NUL: content and stdin', () => {
  assert.equal(requiredString({ content: 'a\0b' }, 'content', { allowNul: true }), 'a\0b');
  assert.deepEqual(stdinInput({ stdin: 'a\0b' }), Buffer.from('a\0b'));
});
