import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { NEUTRAL_FILES, neutralizeHostFiles } from './host-identity.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbd-identity-'));
});
after(async () => rm(dir, { recursive: true, force: true }));

test("the host's hostname, resolver and mail name are replaced by neutral files; a symlink is replaced, not followed", async () => {
  const tree = join(dir, 'tree');
  await mkdir(join(tree, 'etc'), { recursive: true });
  await writeFile(join(tree, 'etc/hostname'), 'build-host-42\n');
  await writeFile(join(tree, 'etc/resolv.conf'), 'search corp.example\nnameserver 10.1.2.3\n');
  await writeFile(join(tree, 'etc/mailname'), 'build-host-42.corp.example\n');
  const outside = join(dir, 'outside');
  await writeFile(outside, 'must stay\n');
  await symlink(outside, join(tree, 'etc/hosts'));

  await neutralizeHostFiles(tree);
  assert.equal(await readFile(join(tree, 'etc/hostname'), 'utf8'), 'sandbox\n');
  assert.equal(await readFile(join(tree, 'etc/resolv.conf'), 'utf8'), '');
  assert.match(await readFile(join(tree, 'etc/hosts'), 'utf8'), /^127\.0\.0\.1\tlocalhost\n/);
  assert.ok((await lstat(join(tree, 'etc/hosts'))).isFile());
  assert.equal(await readFile(outside, 'utf8'), 'must stay\n');
  await assert.rejects(lstat(join(tree, 'etc/mailname')), { code: 'ENOENT' });
  for (const rel of Object.keys(NEUTRAL_FILES)) assert.equal((await lstat(join(tree, rel))).mode & 0o777, 0o644, rel);
  await neutralizeHostFiles(tree);
  assert.equal(await readFile(join(tree, 'etc/hostname'), 'utf8'), 'sandbox\n', 'idempotent');
});
