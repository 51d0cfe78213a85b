// Layers as tar streams: one tree gives the same bytes every time and comes back exact; archives
// that would write outside the tree, carry devices or foreign owners, or do not match their digest
// are refused before tar sees the offending entry. Root (chown, mknod, trusted xattrs).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import { digestLayerTree, packLayer, unpackLayer } from './layer-tar.js';
import { TarRefused } from './tar-guard.js';

const root = mkdtempSync(join(tmpdir(), 'layer-tar-'));
after(() => rmSync(root, { recursive: true, force: true }));
const O = CANONICAL_ID_OFFSET;

function sh(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
}

/** A small layer as a build would leave it: canonical owners, odd modes, links, a whiteout, an opaque dir. */
function makeTree(dir: string): void {
  mkdirSync(join(dir, 'etc/deep'), { recursive: true });
  mkdirSync(join(dir, 'opaque'));
  writeFileSync(join(dir, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\n');
  writeFileSync(join(dir, 'etc/deep/big'), Buffer.alloc(300_000, 7));
  writeFileSync(join(dir, 'etc/empty'), '');
  symlinkSync('/etc/passwd', join(dir, 'abs-link'));
  symlinkSync('../etc/passwd', join(dir, 'opaque/rel-link'));
  linkSync(join(dir, 'etc/passwd'), join(dir, 'etc/hard'));
  sh('mknod', ['-m', '000', join(dir, 'gone'), 'c', '0', '0']);
  sh('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', join(dir, 'opaque')]);
  sh('setfattr', ['-n', 'user.note', '-v', 'hello', join(dir, 'etc/empty')]);
  sh('chown', ['-hR', `${O}:${O}`, dir]);
  sh('chown', ['-h', `${O + 1000}:${O + 50}`, join(dir, 'etc/deep/big'), join(dir, 'abs-link')]);
  chmodSync(join(dir, 'etc/passwd'), 0o4750); // after chown, which clears set-id bits
  utimesSync(join(dir, 'etc/deep/big'), 1_600_000_000.5, 1_600_000_000.25);
  utimesSync(join(dir, 'etc/deep'), 1_500_000_000, 1_500_000_000);
}

async function bufferOf(tree: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of packLayer(tree) as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

async function* chunked(b: Buffer, size = 777): AsyncIterable<Uint8Array> {
  for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
}

describe('layer tar: digest and round trip', () => {
  const a = join(root, 'a');
  mkdirSync(a);
  makeTree(a);

  test('the same tree gives the same digest every time, and it is the digest of the stream', async () => {
    const d1 = await digestLayerTree(a);
    const d2 = await digestLayerTree(a);
    assert.deepEqual(d1, d2);
    const bytes = await bufferOf(a);
    assert.equal(sha(bytes), d1.digest);
    assert.equal(bytes.length, d1.bytes);
  });

  test('unpacked elsewhere, the tree is the same: owners, modes, times, links, whiteouts, xattrs', async () => {
    const bytes = await bufferOf(a);
    const b = join(root, 'b');
    mkdirSync(b);
    const got = await unpackLayer(chunked(bytes), b, { digest: sha(bytes), bytes: bytes.length });
    assert.ok(got.entries >= 10, String(got.entries));
    assert.deepEqual(await digestLayerTree(b), await digestLayerTree(a));
    const st = lstatSync(join(b, 'etc/passwd'));
    assert.equal(st.mode & 0o7777, 0o4750);
    assert.equal(st.uid, O);
    assert.equal(lstatSync(join(b, 'etc/hard')).ino, st.ino, 'the hard link is one inode');
    assert.equal(readlinkSync(join(b, 'abs-link')), '/etc/passwd');
    assert.equal(lstatSync(join(b, 'abs-link')).uid, O + 1000);
    assert.equal(lstatSync(join(b, 'etc/deep/big')).gid, O + 50);
    assert.equal(lstatSync(join(b, 'etc/deep/big')).mtimeMs, 1_600_000_000_250);
    assert.equal(lstatSync(join(b, 'etc/deep')).mtimeMs, 1_500_000_000_000);
    const wh = lstatSync(join(b, 'gone'));
    assert.ok(wh.isCharacterDevice() && wh.rdev === 0);
    assert.match(spawnSync('getfattr', ['-n', 'trusted.overlay.opaque', join(b, 'opaque')], { encoding: 'utf8' }).stdout, /="y"/);
    assert.match(spawnSync('getfattr', ['-n', 'user.note', join(b, 'etc/empty')], { encoding: 'utf8' }).stdout, /="hello"/);
    assert.equal(lstatSync(b).uid, O, 'the root entry owns the tree');
  });

  test('a wrong digest, a short stream or a longer one is refused', async () => {
    const bytes = await bufferOf(a);
    const into = () => {
      const d = mkdtempSync(join(root, 'x-'));
      return d;
    };
    await assert.rejects(unpackLayer(chunked(bytes), into(), { digest: sha(Buffer.from('other')), bytes: bytes.length }), TarRefused);
    await assert.rejects(unpackLayer(chunked(bytes.subarray(0, bytes.length - 10240)), into(), { digest: sha(bytes), bytes: bytes.length }), TarRefused);
    const longer = Buffer.concat([bytes, Buffer.alloc(512)]);
    await assert.rejects(unpackLayer(chunked(longer), into(), { digest: sha(longer), bytes: bytes.length }), TarRefused);
    const flipped = Buffer.from(bytes);
    flipped[flipped.length - 20_000] ^= 1;
    await assert.rejects(unpackLayer(chunked(flipped), into(), { digest: sha(bytes), bytes: bytes.length }), TarRefused);
  });
});

// A tar writer of our own, to make archives GNU tar would never write.
interface Entry {
  name: string;
  type?: string;
  data?: Buffer | string;
  link?: string;
  uid?: number;
  gid?: number;
  mode?: number;
  dev?: [number, number];
  pax?: Record<string, string>;
  magic?: string;
  badChecksum?: boolean;
}

function header(e: Entry, size: number): Buffer {
  const h = Buffer.alloc(512);
  const put = (off: number, len: number, v: string) => h.write(v, off, len, 'latin1');
  const oct = (off: number, len: number, n: number) => put(off, len, n.toString(8).padStart(len - 1, '0') + '\0');
  put(0, 100, e.name);
  oct(100, 8, e.mode ?? 0o755);
  oct(108, 8, Math.min(e.uid ?? 0, 0o7777777));
  oct(116, 8, Math.min(e.gid ?? 0, 0o7777777));
  oct(124, 12, size);
  oct(136, 12, 1_700_000_000);
  put(156, 1, e.type ?? '0');
  put(157, 100, e.link ?? '');
  put(257, 8, e.magic ?? 'ustar\u000000');
  oct(329, 8, e.dev?.[0] ?? 0);
  oct(337, 8, e.dev?.[1] ?? 0);
  h.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of h) sum += b;
  oct(148, 8, e.badChecksum ? sum + 1 : sum);
  return h;
}

function pad(b: Buffer): Buffer {
  return Buffer.concat([b, Buffer.alloc((512 - (b.length % 512)) % 512)]);
}

function paxRecords(rec: Record<string, string>): Buffer {
  let out = '';
  for (const [k, v] of Object.entries(rec)) {
    const body = ` ${k}=${v}\n`;
    let len = body.length + 1;
    while (String(len).length + body.length !== len) len++;
    out += `${len}${body}`;
  }
  return Buffer.from(out, 'utf8');
}

function tarOf(entries: Entry[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    const pax = { uid: String(e.uid ?? O), gid: String(e.gid ?? O), ...e.pax };
    const p = paxRecords(pax);
    parts.push(header({ name: 'PaxHeaders/x', type: 'x' }, p.length), pad(p));
    const data = Buffer.from(e.data ?? '');
    parts.push(header(e, data.length), pad(data));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

const ROOT: Entry = { name: './', type: '5' };

describe('layer tar: hostile archives', () => {
  const cases: Array<[string, Entry[]]> = [
    ['a name with ..', [ROOT, { name: './../escaped', data: 'x' }]],
    ['an absolute name', [ROOT, { name: '/escaped', data: 'x' }]],
    ['an absolute name through pax', [ROOT, { name: './ok', pax: { path: '/tmp/escaped' }, data: 'x' }]],
    ['a file written through a symlink', [ROOT, { name: './l', type: '2', link: '/tmp' }, { name: './l/escaped', data: 'x' }]],
    ['a symlink replacing a directory it made', [ROOT, { name: './d', type: '5' }, { name: './d', type: '2', link: '/tmp' }]],
    ['an entry whose parent is not in the archive', [ROOT, { name: './nodir/f', data: 'x' }]],
    ['no root directory first', [{ name: './f', data: 'x' }]],
    ['a hard link to a file outside', [ROOT, { name: './h', type: '1', link: '/etc/shadow' }]],
    ['a hard link to a symlink', [ROOT, { name: './l', type: '2', link: '/etc/shadow' }, { name: './h', type: '1', link: './l' }]],
    ['a block device', [ROOT, { name: './sda', type: '4', dev: [8, 0] }]],
    ['/dev/mem', [ROOT, { name: './mem', type: '3', dev: [1, 1] }]],
    ['a file owned by host root', [ROOT, { name: './f', data: 'x', uid: 0, gid: 0 }]],
    ['a root owned outside the layer range', [{ ...ROOT, uid: 1000, gid: 1000 }]],
    ['an overlay redirect xattr', [ROOT, { name: './d', type: '5', pax: { 'SCHILY.xattr.trusted.overlay.redirect': '/etc' } }]],
    ['a security.selinux xattr', [ROOT, { name: './f', data: 'x', pax: { 'SCHILY.xattr.security.selinux': 'x' } }]],
    ['a GNU long name', [ROOT, { name: './././@LongLink', type: 'L', data: '../../escaped' }]],
    ['a sparse file record', [ROOT, { name: './f', data: 'x', pax: { 'GNU.sparse.size': '99999999' } }]],
    ['a bad checksum', [ROOT, { name: './f', data: 'x', badChecksum: true }]],
    ['an old GNU header', [ROOT, { name: './f', data: 'x', magic: 'ustar  \0' }]],
    ['a regular file named like a directory', [ROOT, { name: './f/', data: 'x' }]],
  ];
  for (const [what, entries] of cases) {
    test(`refused: ${what}`, async () => {
      const bytes = tarOf(entries);
      const dir = mkdtempSync(join(root, 'h-'));
      const tree = join(dir, 'tree');
      mkdirSync(tree);
      await assert.rejects(unpackLayer(chunked(bytes, 100), tree, { digest: sha(bytes), bytes: bytes.length }), TarRefused);
      assert.ok(!existsSync(join(dir, 'escaped')) && !existsSync('/tmp/escaped'), 'nothing written outside the tree');
    });
  }

  test('our own writer makes archives the guard takes (the cases above differ only in what they say)', async () => {
    const bytes = tarOf([ROOT, { name: './d', type: '5' }, { name: './d/f', data: 'hello' }, { name: './d/h', type: '1', link: './d/f' }, { name: './d/l', type: '2', link: '/anywhere' }]);
    const tree = mkdtempSync(join(root, 'ok-'));
    await unpackLayer(chunked(bytes, 100), tree, { digest: sha(bytes), bytes: bytes.length });
    assert.equal(readFileSync(join(tree, 'd/h'), 'utf8'), 'hello');
    assert.equal(readlinkSync(join(tree, 'd/l')), '/anywhere');
  });

  test('a file larger than the archive says it is is refused as it streams', async () => {
    const bytes = tarOf([ROOT, { name: './f', data: Buffer.alloc(100_000) }]);
    const tree = mkdtempSync(join(root, 'big-'));
    await assert.rejects(unpackLayer(chunked(bytes), tree, { digest: sha(bytes), bytes: 4096 }), TarRefused);
  });
});
