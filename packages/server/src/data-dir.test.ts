import assert from 'node:assert/strict';
import { chmod, lstat, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { secureDataDir } from './data-dir.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbd-datadir-'));
});
after(async () => rm(dir, { recursive: true, force: true }));

const mode = async (p: string) => (await lstat(p)).mode & 0o7777;

test('an installation made before: private files and directories lose group and other bits; the data dir keeps o+x', async () => {
  const data = join(dir, 'data');
  const layers = join(dir, 'layers');
  await mkdir(join(data, 'build-logs'), { recursive: true, mode: 0o755 });
  await mkdir(join(data, 'blobs'), { mode: 0o755 });
  await mkdir(join(data, 'agent-runtime'), { mode: 0o755 });
  await mkdir(layers, { mode: 0o755 });
  await chmod(data, 0o755);
  for (const f of ['sandboxd.db', 'sandboxd.db-wal', 'sandboxd.db-shm', 'api-key']) await writeFile(join(data, f), 'x', { mode: 0o644 });
  const elsewhere = join(dir, 'not-ours');
  await writeFile(elsewhere, 'x', { mode: 0o644 });
  await symlink(elsewhere, join(data, 'tmp'));

  const fixes = await secureDataDir(data, layers);
  assert.equal(await mode(data), 0o711);
  for (const f of ['sandboxd.db', 'sandboxd.db-wal', 'sandboxd.db-shm', 'api-key']) assert.equal(await mode(join(data, f)), 0o600, f);
  for (const d of ['build-logs', 'blobs']) assert.equal(await mode(join(data, d)), 0o700, d);
  assert.equal(await mode(layers), 0o700);
  assert.equal(await mode(join(data, 'agent-runtime')), 0o755, 'public by design: bind-mounted into sandboxes');
  assert.equal(await mode(elsewhere), 0o644, 'a symlink is not followed');
  assert.ok(fixes.some((f) => f.path === join(data, 'sandboxd.db') && f.from === 0o644 && f.to === 0o600));
  assert.deepEqual(await secureDataDir(data, layers), [], 'idempotent');
});
