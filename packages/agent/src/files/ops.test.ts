import { test } from 'node:test';
import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, readFile, readlink, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { listDir, parseMode, permissionString, readFileForJson, writeFileAtomic } from './ops.js';

test('modes: "0644", "644", "0o755", 644 and rejects', () => {
  assert.equal(parseMode('0644'), 0o644);
  assert.equal(parseMode('644'), 0o644);
  assert.equal(parseMode('0o755'), 0o755);
  assert.equal(parseMode(644), 0o644);
  assert.equal(parseMode('4755'), 0o4755);
  assert.equal(parseMode(undefined), undefined);
  assert.throws(() => parseMode('rw-r--r--'), { code: 'VALIDATION_ERROR' });
  assert.throws(() => parseMode('0899'), { code: 'VALIDATION_ERROR' });
});

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'ops-'));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('atomic writes: parents created, mode applied, existing mode kept, symlinks written through', async () => {
  await withDir(async (dir) => {
    const p = join(dir, 'a', 'b', 'f.txt');
    await writeFileAtomic(p, Buffer.from('one'), 0o600, true);
    assert.equal(await readFile(p, 'utf8'), 'one');
    assert.equal((await stat(p)).mode & 0o7777, 0o600);
    await writeFileAtomic(p, Buffer.from('two'), undefined, true);
    assert.equal((await stat(p)).mode & 0o7777, 0o600, 'a rewrite keeps the mode');
    await assert.rejects(writeFileAtomic(p, Buffer.from('x'), undefined, false), { code: 'ALREADY_EXISTS' });
    await assert.rejects(writeFileAtomic(join(dir, 'a'), Buffer.from('x'), undefined, true), { code: 'NOT_A_FILE' });
    await assert.rejects(writeFileAtomic(join(p, 'under-a-file'), Buffer.from('x'), undefined, true), { code: 'NOT_A_DIRECTORY' });
    const link = join(dir, 'link');
    await symlink(p, link);
    await writeFileAtomic(link, Buffer.from('through'), undefined, true);
    assert.equal(await readlink(link), p, 'the link stays a link');
    assert.equal(await readFile(p, 'utf8'), 'through');
    assert.ok((await lstat(link)).isSymbolicLink());
  });
});

test('reads: text, base64, binary refused, size cap, directories refused', async () => {
  await withDir(async (dir) => {
    await writeFile(join(dir, 't.txt'), 'héllo');
    await writeFile(join(dir, 'b.bin'), Buffer.from([0, 1, 2, 255]));
    assert.deepEqual(await readFileForJson(join(dir, 't.txt'), 100, 'utf8'), { content: 'héllo', size: 6 });
    assert.deepEqual(await readFileForJson(join(dir, 'b.bin'), 100, 'base64'), { content: 'AAEC/w==', size: 4 });
    await assert.rejects(readFileForJson(join(dir, 'b.bin'), 100, 'utf8'), { code: 'BINARY_FILE' });
    await assert.rejects(readFileForJson(join(dir, 't.txt'), 3, 'utf8'), { code: 'FILE_TOO_LARGE' });
    await assert.rejects(readFileForJson(dir, 100, 'utf8'), { code: 'NOT_A_FILE' });
    await assert.rejects(readFileForJson(join(dir, 'missing'), 100, 'utf8'), (e: { code: string; message: string }) => e.code === 'FILE_NOT_FOUND' && !/sandbox/i.test(e.message));
    assert.equal((await readFileForJson('/proc/self/status', 1 << 20, 'utf8')).content.includes('Name:'), true, 'size-0 /proc files are read to EOF');
  });
});

test('listing: entries in both spellings, symlinks as their targets', async () => {
  await withDir(async (dir) => {
    await mkdir(join(dir, 'sub'));
    await writeFile(join(dir, 'f.txt'), '12345', { mode: 0o640 });
    await symlink(join(dir, 'sub'), join(dir, 'ln'));
    await symlink(join(dir, 'nowhere'), join(dir, 'dangling'));
    const l = await listDir(dir);
    assert.equal(l.count, 4);
    assert.deepEqual(l.files.map((f) => f.name), ['dangling', 'f.txt', 'ln', 'sub']);
    const f = l.files.find((e) => e.name === 'f.txt')!;
    assert.equal(f.size, 5);
    assert.equal(f.is_dir, false);
    assert.equal(f.is_directory, false);
    assert.equal(f.permissions, '-rw-r-----');
    assert.equal(f.mode, '0640');
    assert.equal(f.modified, f.modified_time);
    const ln = l.files.find((e) => e.name === 'ln')!;
    assert.equal(ln.is_dir, true);
    assert.equal(ln.is_symlink, true);
    assert.equal(permissionString(await stat(dir)).startsWith('d'), true);
    await assert.rejects(listDir(join(dir, 'f.txt')), { code: 'NOT_A_DIRECTORY' });
    await assert.rejects(listDir(join(dir, 'missing')), { code: 'FILE_NOT_FOUND' });
  });
});
