import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { hasOwnFilesystem, parseMountInfo } from './mounts.js';

describe('mount table', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-mounts-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('mountinfo lines: optional fields skipped, octal escapes undone, a bind mount\'s root kept', () => {
    const text = [
      '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:12 master:3 - cgroup2 cgroup2 rw',
      '99 23 7:3 / /var/lib/my\\040data/disk rw,noatime - ext4 /dev/loop3 rw',
      '120 23 8:1 /var/lib/sandboxd/layers/ab/tree /tmp/x/0 ro,relatime idmapped - ext4 /dev/sda1 rw',
    ].join('\n');
    assert.deepEqual(parseMountInfo(text), [
      { device: '0:38', root: '/', mountPoint: '/sys/fs/cgroup/unified', fsType: 'cgroup2', source: 'cgroup2', superOptions: 'rw' },
      { device: '7:3', root: '/', mountPoint: '/var/lib/my data/disk', fsType: 'ext4', source: '/dev/loop3', superOptions: 'rw' },
      { device: '8:1', root: '/var/lib/sandboxd/layers/ab/tree', mountPoint: '/tmp/x/0', fsType: 'ext4', source: '/dev/sda1', superOptions: 'rw' },
    ]);
  });

  test('a filesystem of its own is told from a plain directory without the mount table', async () => {
    mkdirSync(join(dir, 'plain'));
    assert.equal(await hasOwnFilesystem('/proc'), true);
    assert.equal(await hasOwnFilesystem(join(dir, 'plain')), false);
    assert.equal(await hasOwnFilesystem(join(dir, 'missing')), false);
  });
});
