import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createReadStream, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tarStream } from './tar.js';
import { extractTar } from './untar.js';

function tree(root: string): void {
  const longDir = join('a'.repeat(90), 'b'.repeat(90));
  mkdirSync(join(root, longDir), { recursive: true });
  mkdirSync(join(root, 'empty'));
  writeFileSync(join(root, 'main.py'), 'print("hi")\n');
  writeFileSync(join(root, 'run.sh'), '#!/bin/sh\n');
  chmodSync(join(root, 'run.sh'), 0o755);
  writeFileSync(join(root, 'ünï cödé.txt'), 'u');
  writeFileSync(join(root, longDir, 'c'.repeat(120)), Buffer.alloc(70_000, 7));
  symlinkSync('main.py', join(root, 'link.py'));
}

function check(out: string): void {
  assert.equal(readFileSync(join(out, 'main.py'), 'utf8'), 'print("hi")\n');
  assert.equal(statSync(join(out, 'run.sh')).mode & 0o777, 0o755);
  assert.equal(readFileSync(join(out, 'ünï cödé.txt'), 'utf8'), 'u');
  assert.equal(readFileSync(join(out, 'a'.repeat(90), 'b'.repeat(90), 'c'.repeat(120))).length, 70_000);
  assert.equal(readlinkSync(join(out, 'link.py')), 'main.py');
  assert.ok(statSync(join(out, 'empty')).isDirectory());
}

/** A raw ustar entry, for archives no honest tool writes. */
function entry(name: string, type: string, data = '', linkname = ''): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0);
  h.write('0000644\0', 100);
  h.write('0000000\0', 108);
  h.write('0000000\0', 116);
  h.write(data.length.toString(8).padStart(11, '0') + '\0', 124);
  h.write('00000000000\0', 136);
  h.fill(' ', 148, 156);
  h.write(type, 156);
  h.write(linkname, 157);
  h.write('ustar\0', 257);
  h.write('00', 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  const body = Buffer.alloc(Math.ceil(data.length / 512) * 512);
  body.write(data);
  return Buffer.concat([h, body]);
}

async function* chunks(buf: Buffer, size = 333): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
}

test('extracts our own archives and GNU tar ones (long names, modes, symlinks, unicode) from any chunking', async () => {
  const src = mkdtempSync(join(tmpdir(), 'untar-src-'));
  const out1 = mkdtempSync(join(tmpdir(), 'untar-a-'));
  const out2 = mkdtempSync(join(tmpdir(), 'untar-b-'));
  try {
    tree(src);
    const parts: Uint8Array[] = [];
    for await (const c of tarStream(src, ['.'])) parts.push(c);
    const r = await extractTar(chunks(Buffer.concat(parts)), out1);
    assert.equal(r.files, 4);
    check(out1);
    const gnu = join(src, '..', `${src.split('/').pop()}.tar`);
    execFileSync('tar', ['-cf', gnu, '-C', src, '.']);
    await extractTar(createReadStream(gnu), out2);
    rmSync(gnu);
    check(out2);
  } finally {
    for (const d of [src, out1, out2]) rmSync(d, { recursive: true, force: true });
  }
});

test('refuses entries outside the destination: .., absolute names, writes through a symlink', async () => {
  const base = mkdtempSync(join(tmpdir(), 'untar-evil-'));
  try {
    const end = Buffer.alloc(1024);
    const cases: Array<[string, Buffer]> = [
      ['dotdot', Buffer.concat([entry('../escaped.txt', '0', 'x'), end])],
      ['nested dotdot', Buffer.concat([entry('a/../../escaped.txt', '0', 'x'), end])],
      ['absolute', Buffer.concat([entry('/tmp/escaped.txt', '0', 'x'), end])],
      ['symlink then through it', Buffer.concat([entry('link', '2', '', '..'), entry('link/escaped.txt', '0', 'x'), end])],
      ['symlink then over it', Buffer.concat([entry('link', '2', '', '../escaped.txt'), entry('link', '0', 'x'), end])],
    ];
    for (const [what, archive] of cases) {
      const dest = join(base, what.replace(/ /g, '-'), 'dest');
      await assert.rejects(extractTar(chunks(archive), dest), /outside the destination|not a directory|symlink/, what);
      assert.equal(existsSync(join(dest, '..', 'escaped.txt')), false, what);
    }
    assert.equal(existsSync('/tmp/escaped.txt'), false);
    await assert.rejects(extractTar(chunks(entry('f', '0', 'x')), join(base, 'short')), /ended/);
    const bad = entry('f', '0', 'x');
    bad[0] = 0x41;
    await assert.rejects(extractTar(chunks(Buffer.concat([bad, end])), join(base, 'sum')), /checksum/);
    assert.ok(lstatSync(base).isDirectory());
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});

test('a write that fails (here: the target is a directory the archive cannot replace) is an error, not a crash', async () => {
  const base = mkdtempSync(join(tmpdir(), 'untar-fail-'));
  try {
    mkdirSync(join(base, 'dest', 'taken'), { recursive: true });
    const archive = Buffer.concat([entry('taken', '0', 'x'.repeat(2000)), Buffer.alloc(1024)]);
    await assert.rejects(extractTar(chunks(archive, 100), join(base, 'dest')), /EISDIR|illegal operation/);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});
