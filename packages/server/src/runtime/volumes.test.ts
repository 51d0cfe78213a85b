import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CANONICAL_ID_OFFSET, ID_RANGE } from './ids.js';
import { buildConfig } from './oci.js';
import { volumeOciMount, volumePathProblem, volumePaths } from './volumes.js';

test('a volume mount path is absolute, normalized and outside what the kernel and the runtime own', () => {
  for (const ok of ['/data', '/mnt/shared', '/work/v', '/root/.cache', '/proc2', '/devices', '/.sbx', '/etc']) assert.equal(volumePathProblem(ok), undefined, ok);
  const bad: Record<string, RegExp> = {
    '': /empty/,
    '/': /'\/'/,
    data: /absolute/,
    './data': /absolute/,
    '/data/': /normalized/,
    '/a//b': /normalized/,
    '/a/./b': /normalized/,
    '/a/../etc': /normalized/,
    '/..': /normalized/,
    '/proc': /under \/proc/,
    '/proc/self/root': /under \/proc/,
    '/sys/fs': /under \/sys/,
    '/dev': /under \/dev/,
    '/dev/shm/x': /under \/dev/,
    '/.sb': /under \/.sb/,
    '/.sb/agent': /under \/.sb/,
    '/a\nb': /control/,
    '/a,b': /','/,
    '/a:b': /':'/,
    [`/${'x'.repeat(1100)}`]: /longer/,
  };
  for (const [path, why] of Object.entries(bad)) assert.match(volumePathProblem(path) ?? 'accepted', why, JSON.stringify(path));
});

test("a volume's bind is idmapped from the canonical offset to the sandbox's own range, nosuid and nodev, before the runtime's binds", () => {
  const m = volumeOciMount('/var/lib/sandboxd', { id: 'vol-0123456789abcdef0123', path: '/data', readOnly: true }, 1_000_000);
  assert.equal(m.source, '/var/lib/sandboxd/volumes/vol-0123456789abcdef0123/mnt');
  assert.equal(m.destination, '/data');
  const map = `${CANONICAL_ID_OFFSET}-1000000-${ID_RANGE}`;
  assert.deepEqual(m.options, ['bind', 'ro', 'nosuid', 'nodev', `idmap=uids=${map};gids=${map}`]);
  const config = buildConfig({
    args: ['/bin/true'], env: {}, cwd: '/', hostname: 'h', rootfs: 'rootfs', cgroupsPath: 'x', idBase: 1_000_000, caBundle: false, cgroupVersion: 2,
    resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 },
    roBinds: [{ source: '/opt/agent', target: '/.sb/agent' }],
    extraMounts: [m],
  });
  const at = (d: string) => config.mounts.findIndex((x) => x.destination === d);
  assert.ok(at('/data') > at('/proc') && at('/data') < at('/.sb/agent'));
  assert.throws(() => volumePaths('/d', '../etc'), /bad volume id/);
  assert.throws(() => volumePaths('/d', 'vol-x/../../y'), /bad volume id/);
});
