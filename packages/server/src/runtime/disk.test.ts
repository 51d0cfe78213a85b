import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ServiceError } from '@sandboxd/protocol';
import { existsSync, statSync, writeFileSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createDiskImage, detachLoops, formattedImage, loopDeviceAt, mountDiskImage, unmountAllUnder, unmountDisk, type DiskTools } from './disk.js';
import { ensureIdmapHelper } from './idmap.js';
import { loopDevicesFor, mountsUnder } from './mounts.js';
import { proc, procOk } from './proc.js';
import { testDataDir } from '../testing/fixtures.js';

// The disk helpers on real loop devices and mounts.

const dir = join(testDataDir(), `disk-test-${process.pid}`);

before(async () => {
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
});
after(async () => {
  await unmountAllUnder(dir).catch(() => undefined);
  for (const f of ['a.img', 'b.img', 'c.img', 'd.img', 'bad.img']) await detachLoops(join(dir, f)).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

test('the loop device of a mounted disk comes from its st_dev, and unmountDisk frees it and every mount below', async () => {
  const image = join(dir, 'a.img');
  const mnt = join(dir, 'a');
  await createDiskImage(image, 64 * 1024 * 1024);
  await mkdir(mnt);
  await mountDiskImage(image, mnt);
  const [searched] = await loopDevicesFor(image);
  assert.ok(searched, 'mounted through a loop device');
  assert.equal(await loopDeviceAt(mnt, image), searched);
  // Another image's name, or a directory that is no mount of it, names no device.
  assert.equal(await loopDeviceAt(mnt, join(dir, 'b.img')), undefined);
  assert.equal(await loopDeviceAt(dir, image), undefined);
  // A mount below the disk goes too (as a sandbox's overlay does).
  await mkdir(join(mnt, 'inner'));
  await procOk('mount', ['-t', 'tmpfs', 'tmpfs', join(mnt, 'inner')]);
  await unmountDisk(dir, image, mnt);
  assert.deepEqual(await mountsUnder(dir), []);
  for (let i = 0; i < 100 && (await loopDevicesFor(image)).length; i++) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(await loopDevicesFor(image), []);
});

test('a loop device attached without autoclear is detached: by name when known, by a search when not', async () => {
  const image = join(dir, 'b.img');
  await createDiskImage(image, 64 * 1024 * 1024);
  for (const known of [true, false]) {
    const dev = (await procOk('losetup', ['-f', '--show', image])).trim();
    assert.deepEqual(await loopDevicesFor(image), [dev]);
    await detachLoops(image, known ? dev : undefined);
    assert.deepEqual(await loopDevicesFor(image), [], known ? 'by name' : 'by search');
  }
  // A known device that backs another file is left alone.
  const dev = (await procOk('losetup', ['-f', '--show', image])).trim();
  try {
    await detachLoops(join(dir, 'a.img'), dev);
    assert.deepEqual(await loopDevicesFor(image), [dev]);
  } finally {
    await proc('losetup', ['-d', dev]);
  }
  assert.ok(existsSync(image));
});

test("the helper's disk tools: one formatted image per size, copied sparse; a loop mount that frees its device; nothing left bound on failure", async () => {
  const tools: DiskTools = { helper: await ensureIdmapHelper(dir), imagesDir: join(dir, 'images') };
  const size = 256 * 1024 * 1024;
  // Two disks at once: one formatting of the size, two copies.
  await Promise.all(['c.img', 'd.img'].map((f) => createDiskImage(join(dir, f), size, tools)));
  const golden = await formattedImage(tools.imagesDir, size);
  assert.equal(golden, join(tools.imagesDir, golden.slice(tools.imagesDir.length + 1)));
  assert.match(golden, /ext4-268435456-[0-9a-f]{12}\.img$/);
  for (const f of ['c.img', 'd.img']) {
    const st = statSync(join(dir, f));
    assert.equal(st.size, size);
    assert.equal(st.mode & 0o777, 0o600);
    assert.ok(st.blocks * 512 < 16 * 1024 * 1024, `sparse: ${st.blocks * 512} bytes allocated of ${size}`);
  }
  const mnt = join(dir, 'c');
  await mkdir(mnt);
  await mountDiskImage(join(dir, 'c.img'), mnt, tools);
  const [dev] = await loopDevicesFor(join(dir, 'c.img'));
  assert.ok(dev, 'mounted through a loop device');
  assert.equal(await loopDeviceAt(mnt, join(dir, 'c.img')), dev);
  const line = (await mountsUnder(dir)).join(' ');
  assert.ok(line.includes(mnt), line);
  writeFileSync(join(mnt, 'x'), 'on the disk');
  // The copies are filesystems of their own (the same empty one, twice).
  const df = (await procOk('df', ['--output=size', '-B1', mnt])).trim().split('\n').pop()!;
  assert.ok(Number(df) > 0.8 * size, `df: ${df}`);
  await unmountDisk(dir, join(dir, 'c.img'), mnt);
  for (let i = 0; i < 100 && (await loopDevicesFor(join(dir, 'c.img'))).length; i++) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(await loopDevicesFor(join(dir, 'c.img')), [], 'autoclear: the device went with the mount');
  // Not a filesystem: the mount fails, and no device stays bound to it.
  const bad = join(dir, 'bad.img');
  writeFileSync(bad, Buffer.alloc(4 * 1024 * 1024));
  await mkdir(join(dir, 'bad'));
  await assert.rejects(mountDiskImage(bad, join(dir, 'bad'), tools), /mount/);
  assert.deepEqual(await loopDevicesFor(bad), []);
  // A copy never overwrites a file.
  // (The helper's words are the operator's: in the error's detail, not its message.)
  await assert.rejects(createDiskImage(join(dir, 'd.img'), size, tools), (err: unknown) => err instanceof ServiceError && /exists/.test(err.detail ?? ''));
});
