import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createDiskImage, detachLoops, loopDeviceAt, mountDiskImage, unmountAllUnder, unmountDisk } from './disk.js';
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
  for (const f of ['a.img', 'b.img']) await detachLoops(join(dir, f)).catch(() => undefined);
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
