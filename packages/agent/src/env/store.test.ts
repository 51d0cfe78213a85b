import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { effectiveEnv, EnvStore, validateEnvVars } from './store.js';

test('precedence: process env < env set < per-request env', () => {
  const base = { PATH: '/bin', A: 'base', B: 'base', C: 'base' };
  const set = { B: 'set', C: 'set' };
  assert.deepEqual(effectiveEnv(base, set, { C: 'request' }), { PATH: '/bin', A: 'base', B: 'set', C: 'request' });
  assert.deepEqual(effectiveEnv(base, set, undefined), { PATH: '/bin', A: 'base', B: 'set', C: 'set' });
  assert.equal(base.B, 'base', 'inputs are not modified');
});

test('env var validation', () => {
  assert.deepEqual(validateEnvVars({ A: '1', N: 2, T: true }, 'env'), { A: '1', N: '2', T: 'true' });
  assert.throws(() => validateEnvVars('A=1', 'env'), { code: 'VALIDATION_ERROR' });
  assert.throws(() => validateEnvVars([], 'env'), { code: 'VALIDATION_ERROR' });
  assert.throws(() => validateEnvVars({ 'A=B': '1' }, 'env'), /invalid variable name/);
  assert.throws(() => validateEnvVars({ '': '1' }, 'env'), /invalid variable name/);
  assert.throws(() => validateEnvVars({ A: { x: 1 } }, 'env'), /env\.A must be a string/);
  assert.throws(() => validateEnvVars({ A: 'a\0b' }, 'env'), /NUL/);
});

test('the env set is seeded from create-time env_vars once, persisted, and survives a restart', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'envstore-'));
  try {
    const file = join(dir, 'state', 'env.json');
    const first = new EnvStore(file, { CREATED: 'yes' });
    assert.deepEqual(first.all(), { CREATED: 'yes' });
    await first.merge({ A: '1', B: '2' });
    await first.delete('CREATED');
    assert.equal(await first.delete('NEVER_SET'), false);
    assert.deepEqual(JSON.parse(await readFile(file, 'utf8')).env_vars, { A: '1', B: '2' });
    // A restart: the file wins; create-time vars do not come back.
    const second = new EnvStore(file, { CREATED: 'yes' });
    assert.deepEqual(second.all(), { A: '1', B: '2' });
    assert.deepEqual(await second.replace({ ONLY: 'x' }), { ONLY: 'x' });
    assert.deepEqual(new EnvStore(file, {}).all(), { ONLY: 'x' });
    const all = second.all();
    all.MUTATED = 'no';
    assert.equal(second.all().MUTATED, undefined, 'all() is a copy');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('a set the same as the last one written is not written again; after a failed write the same set is', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'envstore-'));
  try {
    const file = join(dir, 'state', 'env.json');
    const store = new EnvStore(file, {});
    // The boot's write of the empty set: a PUT of it (a create's, most often) waits for it, writes nothing.
    assert.deepEqual(await store.replace({}), {});
    const first = await stat(file);
    assert.deepEqual(await store.replace({}), {});
    assert.equal((await stat(file)).ino, first.ino, 'the same set: the file was not replaced');
    await store.replace({ A: '1' });
    const second = await stat(file);
    assert.notEqual(second.ino, first.ino, 'another set: written (a new file renamed over the old)');
    await store.merge({ A: '1' });
    assert.equal((await stat(file)).ino, second.ino, 'a merge that changes nothing writes nothing');
    // A write that fails (its directory made unwritable: a file where the directory was) fails its
    // caller; the same set asked again is written then, not taken as written.
    await rm(join(dir, 'state'), { recursive: true });
    await writeFile(join(dir, 'state'), 'not a directory');
    await assert.rejects(store.replace({ B: '2' }), { code: 'INTERNAL_ERROR' });
    await rm(join(dir, 'state'));
    assert.deepEqual(await store.replace({ B: '2' }), { B: '2' });
    assert.deepEqual(JSON.parse(await readFile(file, 'utf8')).env_vars, { B: '2' });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("a state file written in another sandbox (a snapshot's, a fork's) is not this sandbox's env set: the create's seeds it", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-env-foreign-'));
  try {
    const file = join(dir, 'state', 'env.json');
    const source = new EnvStore(file, {}, 'sbsource');
    await source.merge({ SET_LATER: 'by-env-api' });
    assert.deepEqual(new EnvStore(file, { C: 'at-create' }, 'sbsource').all(), { SET_LATER: 'by-env-api' }, 'its own: kept across restarts');
    const copy = new EnvStore(file, { C: 'at-create' }, 'sbcopy');
    assert.deepEqual(copy.all(), { C: 'at-create' });
    await copy.merge({ MINE: '1' });
    assert.deepEqual(new EnvStore(file, {}, 'sbcopy').all(), { C: 'at-create', MINE: '1' }, 'then it is the copy’s own');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
