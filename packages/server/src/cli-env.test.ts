import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { applyEnvFile, EnvFileError, parseEnvFile } from './cli-env.js';

const CONTROL_ENV = [
  '# /etc/sandboxd/control.env',
  '',
  'SANDBOXD_DATABASE_URL=postgresql://sandboxd:secret@db.internal:5432/sandboxd',
  ' SANDBOXD_PORT = 8080 ',
  '; a comment systemd also skips',
  'SANDBOXD_PUBLIC_URL="http://sandboxd.example.com:8080"',
  "SANDBOXD_GATEWAY_DOMAIN='sandboxes.example.com'",
  '#SANDBOXD_BOOTSTRAP_API_KEY=',
].join('\n');

function tempDir(): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-cli-env-'));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

test('an environment file as systemd reads it: NAME=value, comments, quotes; anything else refused with its line', () => {
  assert.deepEqual(parseEnvFile(CONTROL_ENV, 'control.env'), {
    SANDBOXD_DATABASE_URL: 'postgresql://sandboxd:secret@db.internal:5432/sandboxd',
    SANDBOXD_PORT: '8080',
    SANDBOXD_PUBLIC_URL: 'http://sandboxd.example.com:8080',
    SANDBOXD_GATEWAY_DOMAIN: 'sandboxes.example.com',
  });
  assert.throws(() => parseEnvFile('A=1\nexport B=2\n', 'x.env'), (e: unknown) => e instanceof EnvFileError && e.message === 'x.env:2: not NAME=value');
  assert.throws(() => parseEnvFile('A="1\n', 'x.env'), /x\.env:1: A: a quote that does not end the value/);
});

test('--env-file FILE: its variables fill in what the environment lacks; the option leaves the arguments', () => {
  const t = tempDir();
  try {
    const file = join(t.dir, 'control-a.env');
    writeFileSync(file, CONTROL_ENV);
    const env: NodeJS.ProcessEnv = { SANDBOXD_PORT: '9090', SANDBOXD_PUBLIC_URL: '' };
    const r = applyEnvFile(['nodes', 'list', '--env-file', file, '--json'], env, join(t.dir, 'absent.env'));
    assert.deepEqual(r, { argv: ['nodes', 'list', '--json'], file, defaulted: false });
    assert.equal(env.SANDBOXD_DATABASE_URL, 'postgresql://sandboxd:secret@db.internal:5432/sandboxd');
    assert.equal(env.SANDBOXD_PORT, '9090', 'the environment wins');
    assert.equal(env.SANDBOXD_PUBLIC_URL, 'http://sandboxd.example.com:8080', 'an empty variable counts as unset');
    const env2: NodeJS.ProcessEnv = {};
    assert.deepEqual(applyEnvFile([`--env-file=${file}`, 'control'], env2).argv, ['control']);
    assert.equal(env2.SANDBOXD_GATEWAY_DOMAIN, 'sandboxes.example.com');
    assert.throws(() => applyEnvFile(['nodes', 'list', '--env-file'], {}), /--env-file needs a file/);
    assert.throws(() => applyEnvFile(['nodes', '--env-file', file, '--env-file', file], {}), /--env-file once/);
    assert.throws(() => applyEnvFile(['nodes', '--env-file', join(t.dir, 'none.env')], {}), /cannot read .*none\.env: ENOENT/);
  } finally {
    t.remove();
  }
});

test("without --env-file, the cluster's admin commands read control's file when no database is named", () => {
  const t = tempDir();
  try {
    const control = join(t.dir, 'control.env');
    writeFileSync(control, CONTROL_ENV);
    for (const cmd of ['nodes', 'orgs', 'keys', 'cluster']) {
      const env: NodeJS.ProcessEnv = {};
      assert.deepEqual(applyEnvFile([cmd, 'list'], env, control), { argv: [cmd, 'list'], file: control, defaulted: true }, cmd);
      assert.match(env.SANDBOXD_DATABASE_URL ?? '', /^postgresql:/);
    }
    // A database or a data directory named already, a role, a machine without the file: nothing is read.
    const named: NodeJS.ProcessEnv = { SANDBOXD_DATABASE_URL: 'postgresql://other@db/x' };
    assert.equal(applyEnvFile(['nodes', 'list'], named, control).file, undefined);
    assert.deepEqual(named, { SANDBOXD_DATABASE_URL: 'postgresql://other@db/x' });
    const local: NodeJS.ProcessEnv = { SANDBOXD_DATA_DIR: '/var/lib/sandboxd-test/servers/x' };
    assert.equal(applyEnvFile(['keys', 'create', '--org', 'a'], local, control).file, undefined);
    assert.equal(local.SANDBOXD_DATABASE_URL, undefined);
    for (const cmd of ['serve', 'node', 'control', 'edge', 'images']) {
      const env: NodeJS.ProcessEnv = {};
      assert.equal(applyEnvFile([cmd], env, control).file, undefined, cmd);
      assert.deepEqual(env, {});
    }
    assert.equal(applyEnvFile(['nodes', 'list'], {}, join(t.dir, 'absent.env')).file, undefined);
  } finally {
    t.remove();
  }
});

test('`sandboxd nodes list --env-file FILE` finds the database the file names', () => {
  const t = tempDir();
  try {
    const file = join(t.dir, 'control.env');
    // An address nothing listens on: the command fails reaching PostgreSQL there, not opening SQLite.
    writeFileSync(file, `SANDBOXD_DATABASE_URL=postgresql://sandboxd:pw@127.0.0.1:1/sandboxd\nSANDBOXD_DATA_DIR=${t.dir}/data\n`);
    const cli = fileURLToPath(new URL('./cli.js', import.meta.url));
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SANDBOXD_')));
    const r = spawnSync(process.execPath, [cli, 'nodes', 'list', '--env-file', file], { env, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /ECONNREFUSED|127\.0\.0\.1:1/);
    assert.doesNotMatch(r.stdout, /no nodes/);
  } finally {
    t.remove();
  }
});
