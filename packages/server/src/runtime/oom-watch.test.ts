// The OOM watch's v1 trigger over files a test writes (a v1 memory hierarchy is directories of
// counter files): a kill the host-wide counter shows before the cgroup's own counter does is still
// reported, once, even when the cgroup's counter lags by several ticks. The real kernel's kills are
// covered by cgroups.test.ts.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { OomWatch } from './oom-watch.js';
import type { CgroupLayout } from './cgroups.js';

test('v1: a kill whose cgroup counter lags the host-wide counter by several ticks is reported once', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-oomwatch-'));
  try {
    const mem = join(dir, 'memory');
    const vmstat = join(dir, 'vmstat');
    const counter = (n: number) => `oom_kill_disable 0\nunder_oom 0\noom_kill ${n}\n`;
    await mkdir(join(mem, 'sbx', 'c1'), { recursive: true });
    await mkdir(join(mem, 'sbx', 'c2'), { recursive: true });
    await writeFile(join(mem, 'sbx', 'memory.oom_control'), counter(0));
    await writeFile(join(mem, 'sbx', 'c1', 'memory.oom_control'), counter(0));
    await writeFile(join(mem, 'sbx', 'c2', 'memory.oom_control'), counter(0));
    await writeFile(vmstat, 'pgfault 10\noom_kill 4\n');
    const layout: CgroupLayout = { version: 1, hierarchies: [{ mountPoint: mem, controllers: ['memory'] }] };
    const w = new OomWatch({ layout: async () => layout, parent: '/sbx', pollMs: 20, vmstatPath: vmstat });
    const reports: Array<[string, number]> = [];
    const stop = w.watch((n, k) => reports.push([n, k]));
    try {
      await w.ready();
      // The host's counter moves; the cgroup's shows the kill three ticks later.
      await writeFile(vmstat, 'pgfault 10\noom_kill 5\n');
      await sleep(60);
      assert.deepEqual(reports, [], 'nothing to report yet');
      await writeFile(join(mem, 'sbx', 'c1', 'memory.oom_control'), counter(1));
      for (let i = 0; i < 50 && reports.length === 0; i++) await sleep(10);
      assert.deepEqual(reports, [['c1', 1]]);
      // With nothing new, the look stops: a later change of a child's counter alone is not looked at
      // until the host's counter moves again, and then it is reported once.
      await sleep(200);
      await writeFile(join(mem, 'sbx', 'c2', 'memory.oom_control'), counter(2));
      await sleep(100);
      assert.deepEqual(reports, [['c1', 1]], 'no look without the trigger');
      await writeFile(vmstat, 'pgfault 10\noom_kill 7\n');
      for (let i = 0; i < 50 && reports.length === 1; i++) await sleep(10);
      await sleep(100);
      assert.deepEqual(reports, [['c1', 1], ['c2', 2]]);
    } finally {
      stop();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
