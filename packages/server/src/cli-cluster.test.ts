import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { keygen } from './cli-cluster.js';
import { ClusterSigner, ClusterVerifier } from './runtime/cluster-auth.js';

const root = mkdtempSync(join(tmpdir(), 'sbd-keygen-'));
after(() => rmSync(root, { recursive: true, force: true }));
const mode = (f: string) => statSync(f).mode & 0o777;

test('keygen: a working pair, the private key 0600 and the public one 0644 whatever the umask', async () => {
  for (const umask of [0o000, 0o077, 0o022]) {
    const dir = join(root, `umask-${umask.toString(8)}`, 'keys');
    const old = process.umask(umask);
    let files: { signing: string; verify: string };
    try {
      files = keygen(dir);
    } finally {
      process.umask(old);
    }
    assert.deepEqual(files, { signing: join(dir, 'cluster-signing.pem'), verify: join(dir, 'cluster-verify.pem') });
    assert.equal(mode(files.signing), 0o600, `umask ${umask.toString(8)}: the signing key`);
    assert.equal(mode(files.verify), 0o644, `umask ${umask.toString(8)}: the verify key`);
    assert.equal(mode(dir), 0o700, "a directory it makes is not opened to others");
    const signingPem = readFileSync(files.signing, 'utf8');
    const verifyPem = readFileSync(files.verify, 'utf8');
    assert.match(signingPem, /^-----BEGIN PRIVATE KEY-----\n/);
    assert.match(verifyPem, /^-----BEGIN PUBLIC KEY-----\n/);
    await new ClusterVerifier(verifyPem).verify(await new ClusterSigner(signingPem).tokenFor('node-a'), 'node-a');
  }
});

test('keygen overwrites nothing: either file there, and nothing is written', () => {
  const dir = join(root, 'again');
  const first = keygen(dir);
  const before = [readFileSync(first.signing, 'utf8'), readFileSync(first.verify, 'utf8')];
  const refused = (err: unknown) => err instanceof ServiceError && err.code === 'ALREADY_EXISTS' && /overwrites no key/.test(err.message);
  assert.throws(() => keygen(dir), refused);
  assert.deepEqual([readFileSync(first.signing, 'utf8'), readFileSync(first.verify, 'utf8')], before, 'the pair is untouched');
  // Only the public key is there (the private one moved to control): still refused, no new private key.
  rmSync(first.signing);
  assert.throws(() => keygen(dir), refused);
  assert.equal(existsSync(first.signing), false);
  assert.equal(readFileSync(first.verify, 'utf8'), before[1]);
  // Only the private one.
  rmSync(first.verify);
  writeFileSync(first.signing, 'mine', { mode: 0o600 });
  assert.throws(() => keygen(dir), refused);
  assert.equal(readFileSync(first.signing, 'utf8'), 'mine');
  assert.equal(existsSync(first.verify), false);
});

test('sandboxd cluster keygen --out DIR: the verb, its modes under a permissive umask, its refusal, its usage', () => {
  const cli = (...args: string[]) =>
    spawnSync('/bin/sh', ['-c', 'umask 000; exec "$0" "$@"', process.execPath, new URL('./cli.js', import.meta.url).pathname, 'cluster', ...args], { env: { ...process.env }, encoding: 'utf8' });
  const dir = join(root, 'cli');
  const made = cli('keygen', '--out', dir);
  assert.equal(made.status, 0, made.stderr);
  assert.match(made.stdout, /cluster-signing\.pem \(mode 0600\): the signing key, for control and edge only \(SANDBOXD_CLUSTER_SIGNING_KEY_FILE\)/);
  assert.match(made.stdout, /cluster-verify\.pem \(mode 0644\): the verify key, for every node \(SANDBOXD_CLUSTER_VERIFY_KEY_FILE\)/);
  assert.equal(mode(join(dir, 'cluster-signing.pem')), 0o600);
  assert.equal(mode(join(dir, 'cluster-verify.pem')), 0o644);
  const again = cli('keygen', '--out', dir);
  assert.equal(again.status, 1);
  assert.match(again.stderr, /already exist: keygen overwrites no key/);
  for (const bad of [['keygen'], ['keygen', 'x', '--out', dir], ['nosuch', '--out', dir]]) {
    const r = cli(...bad);
    assert.equal(r.status, 2, bad.join(' '));
    assert.match(r.stderr, /sandboxd cluster keygen --out DIR/);
  }
  const json = cli('keygen', '--out', join(root, 'cli-json'), '--json');
  assert.equal(json.status, 0, json.stderr);
  assert.deepEqual(JSON.parse(json.stdout), { signing_key_file: join(root, 'cli-json', 'cluster-signing.pem'), verify_key_file: join(root, 'cli-json', 'cluster-verify.pem') });
});

test('the roles refuse the wrong key at start: a node with the private key, control and edge without it', () => {
  const { signing, verify } = keygen(join(root, 'roles'));
  const start = (role: string, env: Record<string, string>) =>
    spawnSync(process.execPath, [new URL('./cli.js', import.meta.url).pathname, role], {
      env: { PATH: process.env.PATH ?? '', SANDBOXD_DATA_DIR: join(root, 'roles-data'), ...env },
      encoding: 'utf8',
      timeout: 30_000,
    });
  const refused = (r: ReturnType<typeof start>, re: RegExp) => {
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, re);
  };
  refused(start('node', { SANDBOXD_CLUSTER_VERIFY_KEY_FILE: signing }), /SANDBOXD_CLUSTER_VERIFY_KEY_FILE \(.*\): it holds a private key: a node needs the public key only/);
  refused(start('node', { SANDBOXD_CLUSTER_VERIFY_KEY: readFileSync(signing, 'utf8') }), /SANDBOXD_CLUSTER_VERIFY_KEY: it holds a private key: a node needs the public key only/);
  refused(start('node', { SANDBOXD_CLUSTER_VERIFY_KEY_FILE: verify, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: signing }), /sandboxd node must not hold the cluster's signing key.*a node needs the public key only/);
  refused(start('node', {}), /sandboxd node needs the public key of its cluster .*: set SANDBOXD_CLUSTER_VERIFY_KEY_FILE .* or SANDBOXD_CLUSTER_VERIFY_KEY/);
  refused(start('control', { SANDBOXD_DATABASE_URL: 'postgresql://u:p@127.0.0.1:1/db', SANDBOXD_CLUSTER_VERIFY_KEY_FILE: verify }), /sandboxd control needs the cluster: .*SANDBOXD_CLUSTER_SIGNING_KEY_FILE/);
  refused(start('control', { SANDBOXD_DATABASE_URL: 'postgresql://u:p@127.0.0.1:1/db', SANDBOXD_CLUSTER_SIGNING_KEY_FILE: verify }), /SANDBOXD_CLUSTER_SIGNING_KEY_FILE \(.*\): it holds a public key: control signs with the private key/);
  refused(start('edge', { SANDBOXD_DATABASE_URL: 'postgresql://u:p@127.0.0.1:1/db', SANDBOXD_CLUSTER_VERIFY_KEY_FILE: verify }), /sandboxd edge needs the cluster: .*SANDBOXD_CLUSTER_SIGNING_KEY_FILE/);
  assert.equal(existsSync(join(root, 'roles-data')), false, 'refused before touching the machine');
});

test('sandboxd cluster node-credential ID --out FILE: 0600, good for that node only, overwrites nothing; a bad id or key is refused', () => {
  const { signing, verify } = keygen(join(root, 'cred'));
  const cli = (args: string[], env: Record<string, string> = {}) =>
    spawnSync(process.execPath, [new URL('./cli.js', import.meta.url).pathname, 'cluster', ...args], { env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8', timeout: 30_000 });
  const out = join(root, 'cred', 'node-a.credential');
  const r = cli(['node-credential', 'node-a', '--out', out], { SANDBOXD_CLUSTER_SIGNING_KEY_FILE: signing });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(mode(out), 0o600);
  const token = readFileSync(out, 'utf8').trim();
  return (async () => {
    const signer = new ClusterSigner(readFileSync(signing, 'utf8'));
    const claims = await signer.checkNodeCredential(token);
    assert.equal(claims.nodeId, 'node-a');
    assert.equal(claims.expiresAt! - claims.issuedAt, 30 * 86_400, 'good for 30 days unless told');
    assert.match(r.stdout, new RegExp(`good until ${new Date(claims.expiresAt! * 1000).toISOString()}`));
    // --days: from 1 to 365 whole days.
    const week = join(root, 'cred', 'week');
    const w = cli(['node-credential', 'node-a', '--out', week, '--days', '7', '--json'], { SANDBOXD_CLUSTER_SIGNING_KEY_FILE: signing });
    assert.equal(w.status, 0, w.stderr);
    const weekClaims = await signer.checkNodeCredential(readFileSync(week, 'utf8').trim());
    assert.equal(weekClaims.expiresAt! - weekClaims.issuedAt, 7 * 86_400);
    assert.equal(JSON.parse(w.stdout).expires_at, new Date(weekClaims.expiresAt! * 1000).toISOString());
    for (const days of ['0', '366', '1.5', 'x']) {
      const bad = cli(['node-credential', 'node-a', '--out', join(root, 'cred', `days-${days}`), '--days', days], { SANDBOXD_CLUSTER_SIGNING_KEY_FILE: signing });
      assert.equal(bad.status, 1, `--days ${days}`);
      assert.match(bad.stderr, /--days takes a whole number of days/, `--days ${days}`);
      assert.equal(existsSync(join(root, 'cred', `days-${days}`)), false, `--days ${days}: nothing written`);
    }
    // Not a call token: a node's verifier refuses it.
    await assert.rejects(new ClusterVerifier(readFileSync(verify, 'utf8')).verify(token, 'node-a'));
    assert.notEqual(cli(['node-credential', 'node-a', '--out', out], { SANDBOXD_CLUSTER_SIGNING_KEY_FILE: signing }).status, 0, 'the file is there: nothing overwritten');
    assert.equal(readFileSync(out, 'utf8').trim(), token);
    assert.notEqual(cli(['node-credential', 'Node_A', '--out', join(root, 'cred', 'bad')], { SANDBOXD_CLUSTER_SIGNING_KEY_FILE: signing }).status, 0, 'not a node id');
    assert.notEqual(cli(['node-credential', 'node-b', '--out', join(root, 'cred', 'b')], { SANDBOXD_CLUSTER_SIGNING_KEY_FILE: verify }).status, 0, 'a public key signs nothing');
    assert.equal(cli(['node-credential', 'node-b', '--out', join(root, 'cred', 'b2')]).status, 2, 'no key named');
    assert.equal(existsSync(join(root, 'cred', 'bad')) || existsSync(join(root, 'cred', 'b')) || existsSync(join(root, 'cred', 'b2')), false);
  })();
});
