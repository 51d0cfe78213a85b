import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { contextPath, tarStream } from './tar.js';
import { ValidationError } from './errors.js';

async function tarBytes(root: string, sources: string[]): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const c of tarStream(root, sources)) parts.push(c);
  return Buffer.concat(parts);
}

test('GNU tar extracts what tarStream writes: nested dirs, long names, modes, symlinks, empty files', async () => {
  const root = mkdtempSync(join(tmpdir(), 'tar-src-'));
  const out = mkdtempSync(join(tmpdir(), 'tar-out-'));
  try {
    const longDir = join('app', 'a'.repeat(90), 'b'.repeat(90));
    const longName = 'c'.repeat(120) + '.txt';
    mkdirSync(join(root, longDir), { recursive: true });
    mkdirSync(join(root, 'app/empty'));
    writeFileSync(join(root, 'app/main.py'), 'print("hi")\n');
    writeFileSync(join(root, 'app/run.sh'), '#!/bin/sh\necho run\n');
    chmodSync(join(root, 'app/run.sh'), 0o755);
    writeFileSync(join(root, 'app/zero'), '');
    writeFileSync(join(root, longDir, longName), Buffer.alloc(1500, 7));
    symlinkSync('main.py', join(root, 'app/link.py'));
    symlinkSync('x'.repeat(150), join(root, 'app/longlink'));
    writeFileSync(join(root, 'config.txt'), 'config=1\n');
    writeFileSync(join(root, 'not-included.txt'), 'no\n');

    const bytes = await tarBytes(root, ['app', 'config.txt']);
    assert.equal(bytes.length % 512, 0);
    assert.deepEqual(await tarBytes(root, ['config.txt', 'app']), bytes, 'same input, same bytes');
    writeFileSync(join(out, 'ctx.tar'), bytes);
    execFileSync('tar', ['-xf', join(out, 'ctx.tar'), '-C', out]);
    assert.equal(readFileSync(join(out, 'app/main.py'), 'utf8'), 'print("hi")\n');
    assert.equal(statSync(join(out, 'app/run.sh')).mode & 0o777, 0o755);
    assert.equal(readFileSync(join(out, 'app/zero'), 'utf8'), '');
    assert.ok(statSync(join(out, 'app/empty')).isDirectory());
    assert.deepEqual(readFileSync(join(out, longDir, longName)), Buffer.alloc(1500, 7));
    assert.equal(readlinkSync(join(out, 'app/link.py')), 'main.py');
    assert.equal(readlinkSync(join(out, 'app/longlink')), 'x'.repeat(150));
    assert.equal(readFileSync(join(out, 'config.txt'), 'utf8'), 'config=1\n');
    assert.throws(() => statSync(join(out, 'not-included.txt')));
    const listing = execFileSync('tar', ['-tvf', join(out, 'ctx.tar')]).toString();
    assert.match(listing, /root\/root/);
  } finally {
    rmSync(root, { recursive: true, force: true });
    rmSync(out, { recursive: true, force: true });
  }
});

test('a source inside a subdirectory brings its parent directories first', async () => {
  const root = mkdtempSync(join(tmpdir(), 'tar-src-'));
  try {
    mkdirSync(join(root, 'a/b'), { recursive: true });
    writeFileSync(join(root, 'a/b/f.txt'), 'f');
    const names = execFileSync('tar', ['-t'], { input: await tarBytes(root, ['a/b/f.txt']) }).toString().trim().split('\n');
    assert.deepEqual(names, ['a/', 'a/b/', 'a/b/f.txt']);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('copy sources must stay inside the context directory', () => {
  assert.equal(contextPath('app/', '/ctx'), 'app');
  assert.equal(contextPath('/ctx/app/x', '/ctx'), 'app/x');
  assert.equal(contextPath('.', '/ctx'), '.');
  assert.throws(() => contextPath('../etc/passwd', '/ctx'), ValidationError);
  assert.throws(() => contextPath('/etc/passwd', '/ctx'), ValidationError);
});
