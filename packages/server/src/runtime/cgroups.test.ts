// The cgroup layer's conformance suite: the same cases against this host's real v1 hierarchies, a
// real cgroup2 mount, and a directory fixture shaped like a v2 tree (for what a cgroup2 mount
// cannot do on a hybrid host, where the controllers are bound to v1). Real processes throughout.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmdirSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import {
  cgroupDirs,
  cgroupExists,
  childCgroups,
  detectCgroups,
  isFrozen,
  keyed,
  oomCounterFile,
  readCgroupStats,
  removeCgroup,
  setFrozen,
  type CgroupLayout,
} from './cgroups.js';
import { parseMountInfo } from './mounts.js';
import { OomWatch } from './oom-watch.js';
import { CgroupV2Fixture } from '../testing/cgroup-v2-fixture.js';

const MIB = 1024 * 1024;
const PARENT = `/sandboxd-test-cg${process.pid}`;

type Need = 'memory' | 'pids' | 'freezer' | 'rmdir' | 'v2';

interface Proc {
  pid: number;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

interface Backend {
  layout: CgroupLayout;
  /** Why a case needing this cannot run here; undefined when it can. */
  lacks(need: Need): string | undefined;
  /** Makes `${PARENT}/${name}`, as crun would, with a memory limit. */
  make(name: string, memoryBytes?: number): Promise<void>;
  /** Puts a process in the cgroup (cgroup.procs). */
  attach(name: string, pid: number): Promise<void>;
  /** The counter that triggers a look for OOM kills: /proc/vmstat's on v1, the parent's memory.events on v2. */
  triggerCount(): Promise<number>;
  /** Ends what runs in the cgroup and removes it, whatever a case left. */
  discard(name: string): Promise<void>;
  close(): Promise<void>;
}

const rel = (name: string) => `${PARENT}/${name}`;

/** `sh -c script`, moved into the cgroup before the script runs, so what it forks is born there. */
async function run(b: Backend, name: string, script: string): Promise<Proc> {
  const child = spawn('sh', ['-c', `read _; ${script}`], { stdio: ['pipe', 'ignore', 'ignore'] });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  await once(child, 'spawn');
  try {
    await b.attach(name, child.pid!);
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  child.stdin!.end('\n');
  return { pid: child.pid!, exited };
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

function isGone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

const asRoot = process.getuid?.() === 0;

async function writeIfPresent(path: string, value: string): Promise<void> {
  if (existsSync(path)) await writeFile(path, value);
}

/** This host's hierarchies, as the runtime detects them. */
async function realV1(): Promise<Backend | string> {
  if (!asRoot) return 'needs root';
  const layout = await detectCgroups();
  if (layout.version !== 1) return `this host is cgroup v${layout.version}`;
  const has = (c: string) => layout.hierarchies.find((h) => h.controllers.includes(c));
  const cpuset = has('cpuset');
  return {
    layout,
    lacks(need) {
      if (need === 'v2') return 'v1 triggers on /proc/vmstat, which is always there';
      return need === 'rmdir' || has(need) ? undefined : `no ${need} hierarchy`;
    },
    async make(name, memoryBytes) {
      for (const d of cgroupDirs(layout, rel(name))) await mkdir(d, { recursive: true });
      // A task may join a v1 cpuset only once it has cpus and mems (crun copies them the same way).
      if (cpuset) {
        for (const r of [PARENT, rel(name)]) {
          for (const f of ['cpuset.cpus', 'cpuset.mems']) {
            const path = `${cpuset.mountPoint}${r}/${f}`;
            if ((await readFile(path, 'utf8')).trim() === '') await writeFile(path, await readFile(`${cpuset.mountPoint}/${f}`, 'utf8'));
          }
        }
      }
      if (memoryBytes !== undefined) {
        const mem = `${has('memory')!.mountPoint}${rel(name)}`;
        await writeFile(`${mem}/memory.limit_in_bytes`, String(memoryBytes));
        // memory+swap = memory: with swap on the host, the process must not swap instead of dying.
        await writeIfPresent(`${mem}/memory.memsw.limit_in_bytes`, String(memoryBytes));
      }
    },
    async attach(name, pid) {
      for (const d of cgroupDirs(layout, rel(name))) await writeFile(`${d}/cgroup.procs`, String(pid));
    },
    triggerCount: async () => keyed(await readFile('/proc/vmstat', 'utf8'), 'oom_kill')!,
    discard: (name) => removeCgroup(layout, rel(name)),
    close: () => removeCgroup(layout, PARENT),
  };
}

/**
 * A cgroup2 filesystem mounted just for this suite. On a v2 host it has the controllers; on this
 * hybrid one it has none (cgroup.controllers is empty), but its core files are real: cgroup.procs,
 * cgroup.freeze and cgroup.events, cgroup.kill, cpu.stat's usage_usec, rmdir.
 */
async function realV2(): Promise<Backend | string> {
  if (!asRoot) return 'needs root';
  const root = mkdtempSync(join(tmpdir(), 'sbd-cgroup2-'));
  const m = spawnSync('mount', ['-t', 'cgroup2', 'none', root], { encoding: 'utf8' });
  if (m.status !== 0) {
    rmdirSync(root);
    return `cannot mount cgroup2: ${m.stderr.trim()}`;
  }
  const layout: CgroupLayout = { version: 2, root };
  const controllers = readFileSync(`${root}/cgroup.controllers`, 'utf8').trim().split(/\s+/).filter(Boolean);
  const enable = ['cpu', 'memory', 'pids'].filter((c) => controllers.includes(c)).map((c) => `+${c}`);
  try {
    await mkdir(`${root}${PARENT}`);
    if (enable.length > 0) {
      await writeFile(`${root}/cgroup.subtree_control`, enable.join(' ')).catch(() => undefined);
      await writeFile(`${root}${PARENT}/cgroup.subtree_control`, enable.join(' '));
    }
  } catch (err) {
    await removeCgroup(layout, PARENT);
    spawnSync('umount', [root]);
    rmdirSync(root);
    throw err;
  }
  return {
    layout,
    lacks(need) {
      if ((need === 'memory' || need === 'pids') && !controllers.includes(need)) {
        return `this host's cgroup2 mount has no ${need} controller (cgroup.controllers: "${controllers.join(' ')}"; bound to v1 here): the fixture covers it`;
      }
      if (need === 'freezer' && !existsSync(`${root}${PARENT}/cgroup.freeze`)) return 'kernel without cgroup.freeze';
      return undefined;
    },
    async make(name, memoryBytes) {
      await mkdir(`${root}${rel(name)}`);
      if (memoryBytes !== undefined && controllers.includes('memory')) {
        await writeFile(`${root}${rel(name)}/memory.max`, String(memoryBytes));
        await writeIfPresent(`${root}${rel(name)}/memory.swap.max`, '0');
      }
    },
    attach: (name, pid) => writeFile(`${root}${rel(name)}/cgroup.procs`, String(pid)),
    triggerCount: async () => keyed(await readFile(`${root}${PARENT}/memory.events`, 'utf8'), 'oom_kill')!,
    discard: (name) => removeCgroup(layout, rel(name)),
    async close() {
      try {
        await removeCgroup(layout, PARENT);
      } finally {
        spawnSync('umount', [root]);
        rmdirSync(root);
      }
    },
  };
}

async function fixtureV2(): Promise<Backend> {
  const fx = new CgroupV2Fixture();
  fx.mkdir(PARENT);
  const layout: CgroupLayout = { version: 2, root: fx.root };
  return {
    layout,
    lacks: (need) => (need === 'rmdir' ? 'a directory fixture cannot remove a cgroup (it holds files); the real cgroup2 mount covers removal' : undefined),
    async make(name, memoryBytes) {
      fx.mkdir(rel(name));
      if (memoryBytes !== undefined) await writeFile(`${fx.root}${rel(name)}/memory.max`, String(memoryBytes));
    },
    attach: async (name, pid) => fx.attach(rel(name), pid),
    triggerCount: async () => keyed(await readFile(`${fx.root}${PARENT}/memory.events`, 'utf8'), 'oom_kill')!,
    discard: async (name) => fx.kill(rel(name)),
    close: async () => fx.close(),
  };
}

/** Fills memory until the kernel (or the fixture) kills `tail`: the pipeline's status is 128+9. */
const MEMORY_HOG = 'head -c 2000000000 /dev/zero | tail -n 1 >/dev/null';

const backends: Array<[string, () => Promise<Backend | string>]> = [
  ['this host (cgroup v1)', realV1],
  ['a real cgroup2 mount', realV2],
  ['a cgroup v2 directory FIXTURE', fixtureV2],
];

for (const [label, open] of backends) {
  describe(`cgroup layer on ${label}`, { timeout: 180_000 }, () => {
    let b: Backend | undefined;
    let unavailable = 'not set up';

    before(async () => {
      const r = await open();
      if (typeof r === 'string') unavailable = r;
      else b = r;
    });

    after(async () => {
      if (!b) return;
      await b.close();
      assert.equal(await cgroupExists(b.layout, PARENT), false, 'the suite left no cgroup behind');
    });

    /** A case run only where the backend has what it needs; its cgroups are discarded after, pass or fail. */
    const scenario = (name: string, needs: Need[], cgroups: string[], fn: (b: Backend, L: CgroupLayout) => Promise<void>) =>
      test(name, async (t) => {
        if (!b) return t.skip(unavailable);
        const why = needs.map((n) => b!.lacks(n)).find(Boolean);
        if (why) return t.skip(why);
        try {
          await fn(b, b.layout);
        } finally {
          for (const c of cgroups) await b.discard(c);
        }
      });

    scenario('a cgroup with a process is listed and found; an empty one is neither frozen nor thawed', ['freezer'], ['c-list', 'c-empty'], async (b, L) => {
      await b.make('c-list');
      await b.make('c-empty');
      await run(b, 'c-list', 'exec sleep 1000');
      assert.deepEqual(await childCgroups(L, PARENT), ['c-empty', 'c-list']);
      assert.equal(await cgroupExists(L, rel('c-list')), true);
      assert.equal(await cgroupExists(L, rel('c-none')), false);
      assert.equal(await isFrozen(L, rel('c-list')), false);
      assert.equal(await isFrozen(L, rel('c-empty')), undefined, 'no process: not a running container');
      assert.equal(await setFrozen(L, rel('c-empty'), true), undefined);
    });

    scenario('stats: the cpu time of a busy process accrues to its cgroup', [], ['c-cpu'], async (b, L) => {
      await b.make('c-cpu');
      assert.equal((await readCgroupStats(L, rel('c-cpu'))).cpuUsageNs, 0, 'a new cgroup has used no cpu');
      await run(b, 'c-cpu', 'while :; do :; done');
      await waitFor('50 ms of cpu', async () => (await readCgroupStats(L, rel('c-cpu'))).cpuUsageNs >= 50e6);
    });

    scenario('stats: memory in use, the limit and the number of processes are the cgroup\'s', ['memory', 'pids'], ['c-mem'], async (b, L) => {
      await b.make('c-mem', 64 * MIB);
      const empty = await readCgroupStats(L, rel('c-mem'));
      assert.deepEqual([empty.memoryLimitBytes, empty.pids, empty.oomKills], [64 * MIB, 0, 0]);
      // dd fills a 24 MiB buffer, then blocks writing it to a pipe nobody reads: sh, dd and sleep stay.
      await run(b, 'c-mem', 'dd if=/dev/zero bs=24M count=1 2>/dev/null | sleep 1000');
      const s = await waitFor('24 MiB in use', async () => {
        const x = await readCgroupStats(L, rel('c-mem'));
        return x.memoryBytes >= 24 * MIB && x;
      });
      assert.ok(s.memoryBytes < 64 * MIB, `below the limit (${s.memoryBytes})`);
      assert.equal(s.pids, 3);
      assert.equal(s.oomKills, 0);
    });

    scenario('freeze and thaw: a frozen busy process gets no cpu, and runs again once thawed', ['freezer'], ['c-freeze'], async (b, L) => {
      await b.make('c-freeze');
      await run(b, 'c-freeze', 'while :; do :; done');
      const cpu = async () => (await readCgroupStats(L, rel('c-freeze'))).cpuUsageNs;
      await waitFor('the loop to run', async () => (await cpu()) >= 20e6);
      assert.equal(await setFrozen(L, rel('c-freeze'), true), true);
      assert.equal(await isFrozen(L, rel('c-freeze')), true);
      const frozenAt = await cpu();
      await sleep(300);
      const frozenFor = (await cpu()) - frozenAt;
      assert.ok(frozenFor < 10e6, `no cpu while frozen (${frozenFor / 1e6} ms)`);
      assert.equal(await setFrozen(L, rel('c-freeze'), false), true);
      assert.equal(await isFrozen(L, rel('c-freeze')), false);
      const thawedAt = await cpu();
      await waitFor('the loop to run again', async () => (await cpu()) >= thawedAt + 20e6);
    });

    scenario(
      'OOM kills are counted in the cgroup and reported once, by a watch that does not poll every cgroup',
      ['memory'],
      ['c-oom1', 'c-oom2', 'c-oom3'],
      async (b, L) => {
        await b.make('c-oom1', 32 * MIB);
        await b.make('c-oom2', 32 * MIB);
        await run(b, 'c-oom2', 'exec sleep 1000');
        const watcher = () => {
          const w = new OomWatch({ layout: async () => L, parent: PARENT, pollMs: 100 });
          const reports: Array<[string, number]> = [];
          const stop = w.watch((n, k) => reports.push([n, k]));
          return { w, reports, stop };
        };
        const oom = async (name: string) => {
          const r = await (await run(b, name, MEMORY_HOG)).exited;
          // tail is the one that holds the memory; on a loaded host the killer may also take the
          // shell waiting for it (a second kill, counted like the first).
          assert.ok(r.code === 128 + 9 || r.signal === 'SIGKILL', `the hog was killed (${JSON.stringify(r)})`);
        };
        const a = watcher();
        let restarted: ReturnType<typeof watcher> | undefined;
        // One hog is usually one kill, but a loaded host's OOM killer may take two processes of it:
        // what matters is that every kill the cgroup counts is reported, once, to its own name.
        const total = (reports: Array<[string, number]>, name: string) => reports.filter((r) => r[0] === name).reduce((n, r) => n + r[1], 0);
        // The cgroup's count once it has settled: a second kill of the same hog can land a moment
        // after the pipeline's exit is seen.
        const kills = async (name: string) => {
          let last = (await readCgroupStats(L, rel(name))).oomKills;
          for (let steady = 0; steady < 3; ) {
            await sleep(100);
            const now = (await readCgroupStats(L, rel(name))).oomKills;
            steady = now === last ? steady + 1 : 0;
            last = now;
          }
          return last;
        };
        try {
          await a.w.ready();
          const triggerBefore = await b.triggerCount();
          await oom('c-oom1');
          const first = await kills('c-oom1');
          assert.ok(first >= 1);
          await waitFor('a report', async () => total(a.reports, 'c-oom1') === first);
          await sleep(400); // a second report would come within a few periods
          assert.deepEqual(a.reports.map((r) => r[0]), a.reports.map(() => 'c-oom1'));
          assert.equal(total(a.reports, 'c-oom1'), first, 'each kill reported once');
          assert.equal(await kills('c-oom2'), 0, 'the bystander saw no kill');
          assert.ok((await b.triggerCount()) > triggerBefore, 'the trigger counter moved');

          // A restarted daemon: the kill it did not see happen is its baseline, not news.
          restarted = watcher();
          await restarted.w.ready();
          // A cgroup made after watching began starts at zero (the runtime tells the watch).
          await b.make('c-oom3', 32 * MIB);
          a.w.created('c-oom3');
          restarted.w.created('c-oom3');
          await oom('c-oom3');
          const third = await kills('c-oom3');
          await waitFor('the reports of c-oom3', async () => total(a.reports, 'c-oom3') === third && total(restarted!.reports, 'c-oom3') === third);
          await oom('c-oom1');
          const again = await kills('c-oom1');
          assert.ok(again > first);
          await waitFor('the second reports of c-oom1', async () => total(a.reports, 'c-oom1') === again && total(restarted!.reports, 'c-oom1') === again - first);
          await sleep(400);
          assert.deepEqual([total(a.reports, 'c-oom1'), total(a.reports, 'c-oom3'), total(a.reports, 'c-oom2')], [again, third, 0], 'nothing reported twice, nothing to another name');
          assert.deepEqual([total(restarted.reports, 'c-oom1'), total(restarted.reports, 'c-oom3')], [again - first, third], 'the earlier kill was its baseline');
        } finally {
          a.stop();
          restarted?.stop();
        }
      },
    );

    scenario('v2: the watch waits for a parent made after it started', ['v2', 'memory'], ['late'], async (b, L) => {
      assert(L.version === 2);
      const w = new OomWatch({ layout: async () => L, parent: rel('late'), pollMs: 100 });
      const reports: Array<[string, number]> = [];
      const stop = w.watch((n, k) => reports.push([n, k]));
      try {
        await w.ready();
        assert.equal(existsSync(`${L.root}${rel('late')}`), false);
        await b.make('late');
        // Controllers reach a child only through its parent's subtree_control.
        await writeFile(`${L.root}${rel('late')}/cgroup.subtree_control`, '+memory');
        await b.make('late/c1', 32 * MIB);
        w.created('c1');
        const r = await (await run(b, 'late/c1', MEMORY_HOG)).exited;
        assert.equal(r.code, 128 + 9);
        await waitFor('a report', async () => reports.length > 0);
        assert.deepEqual(reports, [['c1', 1]]);
      } finally {
        stop();
        await b.discard('late/c1');
      }
    });

    scenario('removal kills what runs in a cgroup, frozen or not, and removes it everywhere', ['freezer', 'rmdir'], ['c-rm'], async (b, L) => {
      await b.make('c-rm');
      const p = await run(b, 'c-rm', 'sleep 1000 & exec sleep 1000');
      const procsFile = `${cgroupDirs(L, rel('c-rm'))[0]}/cgroup.procs`;
      const pids = await waitFor('two processes', async () => {
        const list = (await readFile(procsFile, 'utf8')).split('\n').filter(Boolean).map(Number);
        return list.length === 2 && list;
      });
      assert.equal(await setFrozen(L, rel('c-rm'), true), true);
      await removeCgroup(L, rel('c-rm'));
      assert.equal(await cgroupExists(L, rel('c-rm')), false);
      for (const d of cgroupDirs(L, rel('c-rm'))) assert.equal(existsSync(d), false, d);
      assert.deepEqual(await childCgroups(L, PARENT), []);
      assert.equal((await p.exited).signal, 'SIGKILL');
      await waitFor('every process gone', async () => pids.every(isGone), 5000);
    });
  });
}

describe('cgroup layout detection from the mount table', () => {
  const line = (id: number, mountPoint: string, fsType: string, superOptions: string) =>
    `${id} 23 0:${id} / ${mountPoint} rw,nosuid,nodev,noexec,relatime shared:${id} - ${fsType} ${fsType} ${superOptions}`;

  test('unified: cgroup2 mounted at /sys/fs/cgroup', async () => {
    const mounts = parseMountInfo([line(25, '/sys/fs/cgroup', 'cgroup2', 'rw,nsdelegate,memory_recursiveprot'), line(26, '/proc', 'proc', 'rw')].join('\n'));
    const layout = await detectCgroups(mounts);
    assert.deepEqual(layout, { version: 2, root: '/sys/fs/cgroup' });
    assert.equal(oomCounterFile(layout, '/sandboxd/sb1'), '/sys/fs/cgroup/sandboxd/sb1/memory.events');
    assert.deepEqual(cgroupDirs(layout, '/sandboxd/sb1'), ['/sys/fs/cgroup/sandboxd/sb1']);
  });

  test('hybrid (this host): v1 hierarchies, plus the controller-less cgroup2 beside them', async () => {
    const mounts = parseMountInfo(
      [
        line(31, '/sys/fs/cgroup', 'tmpfs', 'rw,mode=755'),
        line(32, '/sys/fs/cgroup/cpu', 'cgroup', 'rw,cpu'),
        line(33, '/sys/fs/cgroup/cpuacct', 'cgroup', 'rw,cpuacct'),
        line(35, '/sys/fs/cgroup/memory', 'cgroup', 'rw,memory'),
        line(37, '/sys/fs/cgroup/freezer', 'cgroup', 'rw,freezer'),
        line(40, '/sys/fs/cgroup/systemd', 'cgroup', 'rw,xattr,name=systemd'),
        line(41, '/sys/fs/cgroup/unified', 'cgroup2', 'rw'),
      ].join('\n'),
    );
    const layout = await detectCgroups(mounts);
    assert.deepEqual(layout, {
      version: 1,
      hierarchies: [
        { mountPoint: '/sys/fs/cgroup/cpu', controllers: ['cpu'] },
        { mountPoint: '/sys/fs/cgroup/cpuacct', controllers: ['cpuacct'] },
        { mountPoint: '/sys/fs/cgroup/memory', controllers: ['memory'] },
        { mountPoint: '/sys/fs/cgroup/freezer', controllers: ['freezer'] },
        { mountPoint: '/sys/fs/cgroup/systemd', controllers: ['name=systemd'] },
        { mountPoint: '/sys/fs/cgroup/unified', controllers: [] },
      ],
    });
    assert.equal(oomCounterFile(layout, '/sandboxd/sb1'), '/sys/fs/cgroup/memory/sandboxd/sb1/memory.oom_control');
  });

  test('v1 only, with co-mounted controllers', async () => {
    const mounts = parseMountInfo(
      [line(30, '/sys/fs/cgroup/cpu,cpuacct', 'cgroup', 'rw,cpu,cpuacct'), line(31, '/sys/fs/cgroup/memory', 'cgroup', 'rw,memory')].join('\n'),
    );
    const layout = await detectCgroups(mounts);
    assert.deepEqual(layout, {
      version: 1,
      hierarchies: [
        { mountPoint: '/sys/fs/cgroup/cpu,cpuacct', controllers: ['cpu', 'cpuacct'] },
        { mountPoint: '/sys/fs/cgroup/memory', controllers: ['memory'] },
      ],
    });
  });

  test('this host is detected as what its mount table says', async () => {
    const layout = await detectCgroups();
    const table = readFileSync('/proc/self/mountinfo', 'utf8');
    assert.equal(layout.version, /^\S+ \S+ \S+ \S+ \/sys\/fs\/cgroup \S+.* - cgroup2 /m.test(table) ? 2 : 1);
  });
});
