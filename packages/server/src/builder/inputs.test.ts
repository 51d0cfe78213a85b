import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import { testDataDir } from '../testing/fixtures.js';
import { cleanupStaleInputs, stageCopyInputs } from './inputs.js';

let scratch: string;
before(async () => {
  await mkdir(testDataDir(), { recursive: true });
  scratch = await mkdtemp(join(testDataDir(), 'inputs-test-'));
});
after(async () => rm(scratch, { recursive: true, force: true }));

test("a step's inputs are copies owned by the step's root (0400) in a root-only directory, gone after cleanup", async () => {
  const blob = join(scratch, 'blob');
  await writeFile(blob, 'tenant data\n', { mode: 0o600 });
  const root = join(scratch, 'inputs');
  const staged = await stageCopyInputs(root, [{ hostPath: blob, kind: 'file', name: 'x', sha256: 'a'.repeat(64) }]);
  assert.equal(staged.paths.length, 1);
  const st = await lstat(staged.paths[0]!);
  assert.deepEqual([st.uid, st.gid, st.mode & 0o7777], [CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET, 0o400]);
  assert.equal((await lstat(join(staged.paths[0]!, '..'))).mode & 0o777, 0o700);
  assert.equal((await lstat(root)).mode & 0o777, 0o700);
  assert.equal(await readFile(staged.paths[0]!, 'utf8'), 'tenant data\n');
  assert.equal((await lstat(blob)).mode & 0o777, 0o600, 'the blob itself is untouched');
  await staged.cleanup();
  assert.deepEqual(await readdir(root), []);
  await assert.rejects(stageCopyInputs(root, [{ hostPath: join(scratch, 'missing'), kind: 'file', name: 'x', sha256: 'a'.repeat(64) }]), { code: 'ENOENT' });
  assert.deepEqual(await readdir(root), [], 'a failed staging leaves nothing');
});

test('inputs staged by a process that died are removed at startup; live ones stay', async () => {
  const root = join(scratch, 'stale');
  await mkdir(join(root, '999999999-abc'), { recursive: true });
  await mkdir(join(root, `${process.pid}-def`));
  await cleanupStaleInputs(root);
  assert.deepEqual(await readdir(root), [`${process.pid}-def`]);
});
