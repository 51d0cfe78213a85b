// fixHybridCgroups: crun follows every hierarchy of /proc/self/cgroup, so each one the kernel has
// must be mounted in the daemon's mount namespace, whoever made it first. The plan is checked on
// its own, and for real in a mount namespace of a child's own where one hierarchy is not mounted.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { detectCgroups } from './cgroups.js';
import { unmountedHierarchies } from './host.js';
import { parseMountInfo } from './mounts.js';

const PROC_CGROUPS = [
  '#subsys_name\thierarchy\tnum_cgroups\tenabled',
  'cpuset\t3\t2\t1',
  'cpu\t1\t2\t1',
  'cpuacct\t1\t2\t1',
  'memory\t4\t37\t1',
  'net_cls\t0\t2\t1',
  'hugetlb\t11\t1\t1',
  'pids\t8\t2\t1',
  'rdma\t9\t1\t0',
  '',
].join('\n');

const mount = (point: string, options: string) => ({ device: '0:1', root: '/', mountPoint: point, fsType: 'cgroup', source: 'cgroup', superOptions: options });

describe('unmountedHierarchies: what a v1 host lacks in this mount namespace', () => {
  test('a hierarchy the kernel has but this namespace has not mounted is mounted, with its comounted controllers together', () => {
    const mounts = [mount('/sys/fs/cgroup/cpuset', 'rw,cpuset'), mount('/sys/fs/cgroup/memory', 'rw,memory'), mount('/sys/fs/cgroup/pids', 'rw,pids')];
    assert.deepEqual(unmountedHierarchies(PROC_CGROUPS, mounts, []), [['cpu', 'cpuacct'], ['hugetlb']]);
  });

  test('a controller bound to the v2 mount is moved on its own; v2-only (hierarchy 0) and disabled ones are left', () => {
    const mounts = [mount('/sys/fs/cgroup/cpuset', 'rw,cpuset'), mount('/sys/fs/cgroup/cpu,cpuacct', 'rw,cpu,cpuacct'), mount('/sys/fs/cgroup/memory', 'rw,memory'), mount('/sys/fs/cgroup/pids', 'rw,pids')];
    const procNoHugetlb = PROC_CGROUPS.replace('hugetlb\t11', 'hugetlb\t0');
    assert.deepEqual(unmountedHierarchies(procNoHugetlb, mounts, ['hugetlb']), [['hugetlb']]);
  });

  test('nothing when every hierarchy is mounted here', () => {
    const mounts = [
      mount('/sys/fs/cgroup/cpuset', 'rw,cpuset'),
      mount('/sys/fs/cgroup/cpu,cpuacct', 'rw,cpu,cpuacct'),
      mount('/sys/fs/cgroup/memory', 'rw,memory'),
      mount('/sys/fs/cgroup/hugetlb', 'rw,hugetlb'),
      mount('/sys/fs/cgroup/pids', 'rw,pids'),
    ];
    assert.deepEqual(unmountedHierarchies(PROC_CGROUPS, mounts, []), []);
  });
});

describe('fixHybridCgroups in a mount namespace that lacks a hierarchy', () => {
  test('the hierarchy is mounted again where crun looks for it, and the v2 mount stays empty', async (t) => {
    if (process.getuid?.() !== 0) return t.skip('needs root');
    const layout = await detectCgroups();
    if (layout.version !== 1) return t.skip('a cgroup v2 host: no v1 hierarchies');
    // One hierarchy of a single controller, as hugetlb is: pids is one on every v1 host we run on.
    const pids = parseMountInfo(readFileSync('/proc/self/mountinfo', 'utf8')).find((m) => m.fsType === 'cgroup' && m.superOptions.split(',').includes('pids'));
    if (!pids || pids.mountPoint !== '/sys/fs/cgroup/pids') return t.skip('no pids hierarchy at /sys/fs/cgroup/pids');
    const hostModule = fileURLToPath(new URL('./host.js', import.meta.url));
    const script = [
      `const { fixHybridCgroups } = await import(${JSON.stringify(hostModule)});`,
      `const { readMounts } = await import(${JSON.stringify(fileURLToPath(new URL('./mounts.js', import.meta.url)))});`,
      "const before = (await readMounts()).some((m) => m.mountPoint === '/sys/fs/cgroup/pids');",
      'const said = [];',
      'await fixHybridCgroups((m) => said.push(m));',
      "const after = (await readMounts()).find((m) => m.mountPoint === '/sys/fs/cgroup/pids');",
      "const { readFileSync, existsSync } = await import('node:fs');",
      "const unified = existsSync('/sys/fs/cgroup/unified/cgroup.controllers') ? readFileSync('/sys/fs/cgroup/unified/cgroup.controllers', 'utf8').trim() : '';",
      "const procs = after ? existsSync('/sys/fs/cgroup/pids/cgroup.procs') : false;",
      'console.log(JSON.stringify({ before, after: after?.fsType, options: after?.superOptions, procs, unified, said }));',
    ].join('\n');
    // A private mount namespace of the child's own: the host's mounts are not touched.
    const r = spawnSync('unshare', ['--mount', '--propagation', 'private', 'sh', '-ec', `umount /sys/fs/cgroup/pids && exec "$0" --input-type=module -e "$1"`, process.execPath, script], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { before: boolean; after?: string; options?: string; procs: boolean; unified: string; said: string[] };
    assert.equal(out.before, false, 'the child starts without the pids mount');
    assert.equal(out.after, 'cgroup', 'a cgroup v1 filesystem is mounted there again');
    assert.ok(out.options!.split(',').includes('pids'), out.options);
    assert.ok(out.procs, 'it is the hierarchy itself (cgroup.procs), not a plain directory');
    assert.equal(out.unified, '', 'the v2 mount keeps no controller');
    assert.ok(out.said.some((m) => m.includes('pids')), JSON.stringify(out.said));
    // And the host's own mount is where it was.
    assert.ok(parseMountInfo(readFileSync('/proc/self/mountinfo', 'utf8')).some((m) => m.mountPoint === '/sys/fs/cgroup/pids'));
  });
});
