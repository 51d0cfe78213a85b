import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, linkSync, lstatSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { mapIdRange, moveIdRange, shiftOwnership } from './shift.js';

let dir: string;
let outside: string;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'shift-test-'));
  outside = join(dir, 'outside');
  writeFileSync(outside, 'not in the tree');
  chownSync(outside, 7, 7);
  const t = join(dir, 'tree');
  mkdirSync(join(t, 'usr/bin'), { recursive: true });
  writeFileSync(join(t, 'usr/bin/su'), 'x');
  chmodSync(join(t, 'usr/bin/su'), 0o4755);
  writeFileSync(join(t, 'usr/bin/chage'), 'x');
  chownSync(join(t, 'usr/bin/chage'), 0, 42);
  chmodSync(join(t, 'usr/bin/chage'), 0o2755);
  mkdirSync(join(t, 'home/user'), { recursive: true });
  chownSync(join(t, 'home/user'), 1000, 1000);
  mkdirSync(join(t, 'shared'));
  chmodSync(join(t, 'shared'), 0o3777);
  writeFileSync(join(t, 'a'), 'hard');
  linkSync(join(t, 'a'), join(t, 'b'));
  symlinkSync(outside, join(t, 'link-out'));
  symlinkSync('/does/not/exist', join(t, 'dangling'));
  execFileSync('mknod', [join(t, 'whiteout'), 'c', '0', '0']);
});

after(() => rmSync(dir, { recursive: true, force: true }));

test('shifts every entry once, keeps special bits, does not follow symlinks', () => {
  const t = join(dir, 'tree');
  const res = shiftOwnership(t, 100000);
  const st = (p: string) => lstatSync(join(t, p));
  assert.equal(st('').uid, 100000);
  assert.equal(st('usr/bin').gid, 100000);
  assert.equal(st('usr/bin/su').uid, 100000);
  assert.equal(st('usr/bin/su').mode & 0o7777, 0o4755, 'setuid kept');
  assert.equal(st('usr/bin/chage').gid, 100042);
  assert.equal(st('usr/bin/chage').mode & 0o7777, 0o2755, 'setgid kept');
  assert.equal(st('shared').mode & 0o7777, 0o3777, 'sticky+setgid dir kept');
  assert.equal(st('home/user').uid, 101000);
  assert.equal(st('home/user').gid, 101000);
  assert.equal(st('a').uid, 100000, 'hard-linked inode shifted once, not twice');
  assert.equal(st('b').uid, 100000);
  assert.equal(st('link-out').uid, 100000, 'symlink itself lchowned');
  assert.equal(st('dangling').uid, 100000);
  assert.equal(lstatSync(outside).uid, 7, 'symlink target untouched');
  assert.equal(st('whiteout').uid, 100000);
  assert.ok(st('whiteout').isCharacterDevice());
  assert.equal(st('whiteout').rdev, 0, 'whiteout stays a 0/0 device');
  // root, usr, usr/bin, su, chage, home, home/user, shared, a(+b once), link-out, dangling, whiteout
  assert.equal(res.entries, 12);
  assert.equal(res.bytes, 1 + 1 + 4);
});

test('a negative offset unshifts, and refuses to go below 0', () => {
  const t = join(dir, 'tree');
  shiftOwnership(t, -100000);
  assert.equal(lstatSync(join(t, 'home/user')).uid, 1000);
  assert.equal(lstatSync(join(t, 'usr/bin/su')).mode & 0o7777, 0o4755);
  assert.throws(() => shiftOwnership(t, -1), /would get id -1/);
});

test('moveIdRange moves only the ids inside the range, keeping special bits', () => {
  const t = join(dir, 'moved');
  mkdirSync(join(t, 'home/user'), { recursive: true });
  writeFileSync(join(t, 'su'), 'x');
  writeFileSync(join(t, 'mine'), 'x');
  chownSync(t, 100000, 100000);
  chownSync(join(t, 'su'), 100000, 100000);
  chmodSync(join(t, 'su'), 0o4755);
  chownSync(join(t, 'home/user'), 101000, 165535);
  // Made by host root (e.g. an agent directory): not in the range, stays.
  chownSync(join(t, 'mine'), 0, 5);
  const res = moveIdRange(t, 100000, 1_000_065_536, 65536);
  const st = (p: string) => lstatSync(join(t, p));
  assert.equal(res.entries, 5);
  assert.equal(st('').uid, 1_000_065_536);
  assert.equal(st('su').uid, 1_000_065_536);
  assert.equal(st('su').mode & 0o7777, 0o4755, 'setuid kept');
  assert.equal(st('home').uid, 0, 'made by the test as root: outside the range');
  assert.equal(st('home/user').uid, 1_000_066_536);
  assert.equal(st('home/user').gid, 1_000_065_536 + 65535);
  assert.deepEqual([st('mine').uid, st('mine').gid], [0, 5]);
});

test('mapIdRange moves a sandbox range to another and every id outside it to nobody of the target, without following links', () => {
  const t = join(dir, 'range');
  mkdirSync(join(t, 'd'), { recursive: true });
  const base = 1_000_065_536;
  chownSync(t, base, base);
  writeFileSync(join(t, 'd', 'user'), 'u');
  chownSync(join(t, 'd', 'user'), base + 1234, base + 4321);
  chmodSync(join(t, 'd', 'user'), 0o4750);
  writeFileSync(join(t, 'host-root'), 'r');
  chownSync(join(t, 'host-root'), 0, 0);
  symlinkSync(outside, join(t, 'out'));
  lchownSyncSafe(join(t, 'out'), base + 5, base + 5);
  const res = mapIdRange(t, base, 900_000_000, 65536);
  const st = (p: string) => lstatSync(join(t, p));
  assert.deepEqual([st('.').uid, st('.').gid], [900_000_000, 900_000_000]);
  assert.deepEqual([st('d/user').uid, st('d/user').gid], [900_001_234, 900_004_321]);
  assert.equal(st('d/user').mode & 0o7777, 0o4750, 'the setuid bit chown cleared is put back');
  assert.deepEqual([st('host-root').uid, st('host-root').gid], [900_065_534, 900_065_534], 'outside the range: nobody, never host root');
  assert.deepEqual([st('out').uid, st('out').gid], [900_000_005, 900_000_005]);
  assert.deepEqual([lstatSync(outside).uid, lstatSync(outside).gid], [7, 7], 'the link is not followed');
  assert.equal(res.entries, 5);
  linkSync(join(t, 'host-root'), join(t, 'second-name'));
  const again = mapIdRange(t, 900_000_000, 900_000_000, 65536);
  assert.deepEqual([again.entries, again.names], [5, 6], 'a hard link is a name, not an inode');
});

function lchownSyncSafe(p: string, uid: number, gid: number): void {
  execFileSync('chown', ['-h', `${uid}:${gid}`, p]);
}
