import { test } from 'node:test';
import assert from 'node:assert/strict';
import { exitStatusFor, languageFromFile, parseCpEndpoint, parseDuration, parseKeyValues, parsePositiveInt, splitAtDoubleDash, UsageError } from './args.js';

test('KEY=VALUE pairs: values may hold = and be empty; bad names are usage errors', () => {
  assert.deepEqual(parseKeyValues(['A=1', 'B=x=y', 'C=']), { A: '1', B: 'x=y', C: '' });
  assert.deepEqual(parseKeyValues(undefined), {});
  assert.throws(() => parseKeyValues(['NOVALUE']), UsageError);
  assert.throws(() => parseKeyValues(['=1']), UsageError);
  assert.throws(() => parseKeyValues(['1A=1']), UsageError);
});

test('durations in seconds, minutes, hours, days', () => {
  assert.equal(parseDuration('300'), 300);
  assert.equal(parseDuration('90s'), 90);
  assert.equal(parseDuration('15m'), 900);
  assert.equal(parseDuration('2h'), 7200);
  assert.equal(parseDuration('1d'), 86400);
  for (const bad of ['', '0', '-5', '1.5h', '10x', 'soon']) assert.throws(() => parseDuration(bad), UsageError, bad);
  assert.equal(parsePositiveInt('12', '--limit'), 12);
  assert.throws(() => parsePositiveInt('0', '--limit'), UsageError);
});

test('cp endpoints: ID:/path, -, local paths', () => {
  assert.deepEqual(parseCpEndpoint('sb_abc123:/workspace/a.txt'), { kind: 'remote', sandboxId: 'sb_abc123', path: '/workspace/a.txt' });
  assert.deepEqual(parseCpEndpoint('abc:rel/path'), { kind: 'remote', sandboxId: 'abc', path: 'rel/path' });
  assert.deepEqual(parseCpEndpoint('-'), { kind: 'stdio' });
  assert.deepEqual(parseCpEndpoint('./a:b'), { kind: 'local', path: './a:b' });
  assert.deepEqual(parseCpEndpoint('/tmp/x'), { kind: 'local', path: '/tmp/x' });
  assert.deepEqual(parseCpEndpoint('file.txt'), { kind: 'local', path: 'file.txt' });
  assert.throws(() => parseCpEndpoint('abc:'), UsageError);
});

test('language from extension', () => {
  assert.equal(languageFromFile('a.py'), 'python');
  assert.equal(languageFromFile('dir.x/a.MJS'), 'javascript');
  assert.equal(languageFromFile('run.sh'), 'bash');
  assert.equal(languageFromFile('main.go'), 'go');
  assert.equal(languageFromFile('README'), undefined);
});

test('double dash splitting and exit statuses', () => {
  assert.deepEqual(splitAtDoubleDash(['id', '--timeout', '5', '--', 'ls', '--', '-la']), { before: ['id', '--timeout', '5'], after: ['ls', '--', '-la'] });
  assert.deepEqual(splitAtDoubleDash(['id']), { before: ['id'], after: undefined });
  assert.equal(exitStatusFor(0, false), 0);
  assert.equal(exitStatusFor(3, false), 3);
  assert.equal(exitStatusFor(137, false), 137);
  assert.equal(exitStatusFor(-1, false), 1);
  assert.equal(exitStatusFor(256, false), 1);
  assert.equal(exitStatusFor(0, true), 124);
});

test('repl: a Python entry needs more lines while a block, a bracket or a backslash is open', async () => {
  const { needsMore } = await import('./commands/repl.js');
  assert.equal(needsMore(['x = 1']), false);
  assert.equal(needsMore(['def f():']), true);
  assert.equal(needsMore(['def f():', '    return 1']), true);
  assert.equal(needsMore(['def f():', '    return 1', '']), false);
  assert.equal(needsMore(['print((1,']), true);
  assert.equal(needsMore(['print("(")']), false, 'brackets in strings do not count');
  assert.equal(needsMore(['x = 1 + \\']), true);
  assert.equal(needsMore(['@decorator']), true);
});
