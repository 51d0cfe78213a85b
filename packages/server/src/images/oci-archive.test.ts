import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { FsImageStore } from './image-store.js';
import { FsLayerStore } from './layer-store.js';
import { importImageArchive } from './oci-archive.js';
import { isWhiteout, ociLayerId } from './oci-layer.js';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import { testDataDir } from '../testing/fixtures.js';
import { makeSyntheticImage, readXattr, sha256, writeDockerSave, writeOciLayout } from '../testing/oci-fixtures.js';

let scratch: string;
let layers: FsLayerStore;
let images: FsImageStore;
const mounted: string[] = [];
const logs: string[] = [];
const deps = () => ({ layers, images, tmpDir: join(scratch, 'tmp'), log: (l: string) => logs.push(l) });

before(async () => {
  await mkdir(testDataDir(), { recursive: true });
  // On the layers' filesystem, as overlayfs needs for the merged-view check.
  scratch = await mkdtemp(join(testDataDir(), 'oci-archive-test-'));
  layers = new FsLayerStore(join(scratch, 'layers'));
  images = new FsImageStore(join(scratch, 'images'));
});

after(async () => {
  for (const m of mounted.reverse()) execFileSync('umount', [m]);
  await rm(scratch, { recursive: true, force: true });
});

test('docker save archive: layers converted to overlay form, ownership shifted, config kept', async () => {
  const img = makeSyntheticImage(join(scratch, 'img1'));
  const file = join(scratch, 'img1.tar');
  writeDockerSave(img, join(scratch, 'img1-save'), 'example/thing:1.0', file);
  const rec = await importImageArchive(file, undefined, deps());
  assert.equal(rec.ref, 'example/thing:1.0');
  assert.deepEqual(rec.layers, img.diffIds.map(ociLayerId));
  assert.equal(rec.configDigest, img.configDigest);
  assert.equal(rec.workdir, '/srv');
  assert.deepEqual(rec.env, ['PATH=/usr/local/bin:/usr/bin:/bin', 'LANG=C.UTF-8']);
  assert.deepEqual(await images.get('example/thing:1.0'), JSON.parse(JSON.stringify(rec)));

  const [bottom, top] = rec.layers.map((id) => layers.path(id)) as [string, string];
  assert.equal((await lstat(join(bottom, 'home/user/file'))).uid, CANONICAL_ID_OFFSET + 1000);
  assert.equal((await lstat(join(bottom, 'etc/keep'))).uid, CANONICAL_ID_OFFSET);
  assert.equal((await lstat(join(bottom, 'usr/bin/su'))).mode & 0o7777, 0o4755);
  assert.ok((await lstat(join(bottom, 'bin'))).isSymbolicLink());
  await assert.rejects(lstat(join(bottom, 'dev/sda')), { code: 'ENOENT' }, 'block device dropped');
  assert.equal((await layers.meta(rec.layers[0]!))?.droppedDevices, 1);

  assert.ok(await isWhiteout(join(top, 'etc/gone')), 'etc/.wh.gone became a 0/0 char device');
  await assert.rejects(lstat(join(top, 'etc/.wh.gone')), { code: 'ENOENT' });
  assert.equal(readXattr(join(top, 'opq'), 'trusted.overlay.opaque'), 'y');
  assert.equal(readXattr(join(top, 'etc'), 'trusted.overlay.opaque'), undefined);
  await assert.rejects(lstat(join(top, 'opq/.wh..wh..opq')), { code: 'ENOENT' });
  assert.equal(await readFile(join(top, 'newfile2'), 'utf8'), 'again', 'a re-created entry wins over its own whiteout');

  // The kernel's view: mount the two layers as overlay lowers and look.
  const merged = join(scratch, 'merged');
  await mkdir(merged);
  execFileSync('mount', ['-t', 'overlay', 'overlay', '-o', `ro,lowerdir=${top}:${bottom}`, merged]);
  mounted.push(merged);
  assert.deepEqual((await readdir(join(merged, 'etc'))).sort(), ['keep']);
  assert.deepEqual((await readdir(join(merged, 'opq'))).sort(), ['new1'], 'opaque dir hides the lower contents');
  assert.equal(await readFile(join(merged, 'newfile'), 'utf8'), 'new');
  assert.equal(await readFile(join(merged, 'home/user/file'), 'utf8'), 'mine');
  execFileSync('umount', [merged]);
  mounted.pop();
});

test('OCI layout archive (gzip layers, nested index) shares the layers of the same content', async () => {
  const img = makeSyntheticImage(join(scratch, 'img2'));
  const file = join(scratch, 'img2.tar');
  writeOciLayout(img, join(scratch, 'img2-oci'), 'ubuntu:22.04', file);
  const before = logs.length;
  const rec = await importImageArchive(file, 'ubuntu:22.04', deps());
  assert.equal(rec.ref, 'ubuntu:22.04');
  assert.equal(rec.source, 'import');
  assert.deepEqual(rec.layers, img.diffIds.map(ociLayerId));
  // Same tar content as the first test's image → same diff ids → already present, not unpacked again.
  assert.equal(logs.slice(before).filter((l) => l.includes('already present')).length, 2);
  assert.deepEqual((await images.list()).map((r) => r.ref), ['example/thing:1.0', 'ubuntu:22.04']);
});

test('an image for another architecture or with a corrupt layer is refused and leaves no layer', async () => {
  const arm = makeSyntheticImage(join(scratch, 'img3'), { arch: 'arm64' });
  const armFile = join(scratch, 'arm.tar');
  writeDockerSave(arm, join(scratch, 'img3-save'), 'arm/thing:1', armFile);
  await assert.rejects(importImageArchive(armFile, undefined, deps()), /linux\/arm64; this host runs linux\/amd64/);

  // A layer whose bytes do not match the config's diff id.
  const img = makeSyntheticImage(join(scratch, 'img4'), { env: ['X=1'] });
  const dir = join(scratch, 'img4-save');
  const file = join(scratch, 'bad.tar');
  const fake = { ...img, diffIds: [img.diffIds[0]!, `sha256:${sha256('something else')}`] };
  const config = JSON.parse(img.config.toString()) as { rootfs: { diff_ids: string[] } };
  config.rootfs.diff_ids = fake.diffIds;
  fake.config = Buffer.from(JSON.stringify(config));
  fake.configDigest = `sha256:${sha256(fake.config)}`;
  writeDockerSave(fake, dir, 'bad/thing:1', file);
  const before = await layers.list();
  await assert.rejects(importImageArchive(file, undefined, deps()), /diff id/);
  assert.deepEqual(await layers.list(), before, 'no new layer');
  assert.equal(await images.get('bad/thing:1'), undefined);
  assert.deepEqual((await readdir(layers.root)).filter((n) => n.startsWith('.')), [], 'no tmp dirs or locks');
  assert.deepEqual(await readdir(join(scratch, 'tmp')), [], 'unpacked archive removed');
});

test('an archive whose manifest points outside itself is refused', async () => {
  const dir = join(scratch, 'evil');
  await mkdir(dir);
  await writeFile(join(dir, 'manifest.json'), JSON.stringify([{ Config: '../../../etc/os-release', RepoTags: ['evil:1'], Layers: [] }]));
  const file = join(scratch, 'evil.tar');
  execFileSync('tar', ['-c', '-f', file, '-C', dir, '.']);
  await assert.rejects(importImageArchive(file, undefined, deps()), /outside the archive/);
});
