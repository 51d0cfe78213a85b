import { test } from 'node:test';
import assert from 'node:assert/strict';
import { plainArgv } from './shell.js';

test('plain word lists run directly, split on spaces', () => {
  assert.deepEqual(plainArgv('true'), ['true']);
  assert.deepEqual(plainArgv('ls  -la /tmp'), ['ls', '-la', '/tmp']);
  assert.deepEqual(plainArgv('python3 -m http.server 8000'), ['python3', '-m', 'http.server', '8000']);
  assert.deepEqual(plainArgv('git log --format=%H -n 1'), ['git', 'log', '--format=%H', '-n', '1']);
});

test('anything a shell would interpret goes through /bin/sh', () => {
  for (const cmd of [
    'echo $HOME',
    'ls *.py',
    'a && b',
    'a | b',
    'echo "quoted"',
    "echo 'x'",
    'echo x > f',
    'cd /tmp',
    'export A=1',
    'A=1 env',
    'echo ~',
    'x # comment',
    'echo a\nb',
    'echo `id`',
    'echo a\\ b',
    'source x',
    '. x',
    'if',
    '',
    '   ',
  ]) {
    assert.equal(plainArgv(cmd), null, JSON.stringify(cmd));
  }
});
