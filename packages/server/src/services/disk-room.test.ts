import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { readDiskSpace } from '../runtime/disk-space.js';
import { DISK_READING_MS, DISK_READING_STALE_MS, DiskRoom } from './disk-room.js';
import type { DiskSpace } from '../runtime/disk-space.js';

const MIB = 2 ** 20;
const space = (over: Partial<DiskSpace> = {}): DiskSpace => ({ totalBytes: 1000 * MIB, availBytes: 600 * MIB, promisedBytes: 0, heldBytes: 0, disks: 0, ...over });

function room(s: () => DiskSpace, reserve = { percent: 10 }) {
  let now = 0;
  let reads = 0;
  const r = new DiskRoom({
    name: 'the data filesystem',
    reserve,
    read: async () => {
      reads++;
      return s();
    },
    now: () => now,
  });
  return { r, tick: (ms: number) => (now += ms), reads: () => reads };
}

const settle = () => new Promise((r) => setImmediate(r));
const refused = (err: unknown) => err instanceof ServiceError && err.code === 'INSUFFICIENT_STORAGE' && err.status === 507;

test('a write is admitted within free space less the reserve and the promises, and refused with 507 past it', async () => {
  const { r } = room(() => space({ promisedBytes: 200 * MIB }));
  // 600 free - 100 reserve (10 % of 1000) - 200 promised = 300 MB.
  const v = await r.view();
  assert.equal(v.reserveBytes, 100 * MIB);
  assert.equal(v.admitsBytes, 300 * MIB);
  await assert.rejects(r.claim(301 * MIB, 'a sandbox disk of 1 GB'), (err: unknown) => {
    assert.ok(refused(err));
    const e = err as ServiceError;
    assert.match(e.message, /the data filesystem has no room for a sandbox disk of 1 GB: 600 MB free, of which 100 MB are kept in reserve/);
    assert.deepEqual(e.extra, { requested_bytes: 301 * MIB, available_bytes: 300 * MIB, reserve_bytes: 100 * MIB });
    return true;
  });
  const release = await r.claim(300 * MIB, 'x');
  assert.equal((await r.view()).admitsBytes, 0);
  release();
  release();
  assert.equal((await r.view()).pendingBytes, 0, 'released once, however often called');
});

test('concurrent claims never share the same room; a released claim counts as promised until the next reading', async () => {
  let s = space();
  const { r, tick, reads } = room(() => s, { percent: 0 });
  const results = await Promise.allSettled(Array.from({ length: 10 }, () => r.claim(100 * MIB, 'x')));
  assert.equal(results.filter((x) => x.status === 'fulfilled').length, 6, '600 MB admit six writes of 100');
  assert.ok(results.filter((x) => x.status === 'rejected').every((x) => refused((x as PromiseRejectedResult).reason)));
  assert.equal(reads(), 1, 'one reading for the burst');
  for (const x of results) if (x.status === 'fulfilled') x.value();
  // One that failed and left nothing gives its room back at once.
  const failed = await r.claim(0, 'x');
  failed(false);
  // Released: what they wrote is not in the old reading, so it all counts as promised.
  assert.equal((await r.view()).admitsBytes, 0);
  await assert.rejects(r.claim(1, 'x'), refused);
  // The next reading sees what was written (here: 200 MB written, 400 promised to their disks).
  s = space({ availBytes: 400 * MIB, promisedBytes: 300 * MIB });
  tick(DISK_READING_MS);
  // Older than a second: it still serves (conservatively) while the new one is read.
  assert.equal((await r.view()).admitsBytes, 0);
  await settle();
  assert.equal((await r.view()).admitsBytes, 100 * MIB);
  assert.equal(reads(), 2);
  // Older than DISK_READING_STALE_MS: the admission waits for the new reading.
  s = space({ availBytes: 500 * MIB, promisedBytes: 300 * MIB });
  tick(DISK_READING_STALE_MS);
  assert.equal((await r.view()).admitsBytes, 200 * MIB);
  assert.equal(reads(), 3);
});

test('a write that failed and left nothing (kept: false) frees its room at once', async () => {
  const { r } = room(() => space(), { percent: 0 });
  const release = await r.claim(600 * MIB, 'x');
  await assert.rejects(r.claim(1, 'x'), refused);
  release(false);
  assert.equal((await r.view()).admitsBytes, 600 * MIB);
  await assert.rejects(r.with(600 * MIB, 'x', async () => Promise.reject(new Error('undone'))), /undone/);
  assert.equal((await r.view()).admitsBytes, 600 * MIB, 'with() gives back the room of a failed write');
});

test('a start (0 bytes) passes within the reserve and is refused past it; a fixed reserve overrides the percent', async () => {
  let s = space({ availBytes: 150 * MIB });
  const { r, tick } = room(() => s, { percent: 10, bytes: 50 * MIB } as { percent: number; bytes?: number });
  (await r.claim(0, 'starting a sandbox'))();
  s = space({ availBytes: 40 * MIB });
  tick(DISK_READING_STALE_MS);
  await assert.rejects(r.claim(0, 'starting a sandbox'), refused);
});

test('a failed reading fails the claim and the next one reads again', async () => {
  let fail = true;
  const r = new DiskRoom({
    name: 'fs',
    reserve: { percent: 0 },
    read: async () => {
      if (fail) throw new Error('statfs failed');
      return space();
    },
  });
  await assert.rejects(r.claim(1, 'x'), /statfs failed/);
  fail = false;
  (await r.claim(1, 'x'))();
});

const dir = mkdtempSync(join(tmpdir(), 'sbd-disk-space-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('readDiskSpace counts what the named sandboxes’ sparse disks may still grow by, and nothing of others', async () => {
  for (const id of ['a', 'b', 'pool']) mkdirSync(join(dir, 'sandboxes', id), { recursive: true });
  const a = join(dir, 'sandboxes', 'a', 'disk.img');
  writeFileSync(a, Buffer.alloc(MIB, 1));
  truncateSync(a, 64 * MIB);
  truncateSync((writeFileSync(join(dir, 'sandboxes', 'pool', 'disk.img'), ''), join(dir, 'sandboxes', 'pool', 'disk.img')), 64 * MIB);
  const s = await readDiskSpace(dir, ['a', 'b', 'gone']);
  assert.equal(s.disks, 1, 'b has no disk, gone no directory, pool is not named');
  assert.ok(s.heldBytes >= MIB && s.heldBytes < 2 * MIB, String(s.heldBytes));
  assert.equal(s.promisedBytes, 64 * MIB - s.heldBytes);
  assert.ok(s.totalBytes > 0 && s.availBytes > 0);
  // Thinly provisioned 4×: a disk is promised a quarter of its size, less what it holds.
  assert.equal((await readDiskSpace(dir, ['a'], 4)).promisedBytes, 16 * MIB - s.heldBytes);
  assert.equal((await readDiskSpace(dir, ['a'], 64)).promisedBytes, 0, 'it holds more than its share: nothing more is promised');
});
