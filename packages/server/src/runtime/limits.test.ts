// Root tests with real containers: resource limits hold, and only the sandbox pays.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, statSync, statfsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { baseLayer } from '../testing/fixtures.js';
import { agentGet, assertNoLeaks, createTestRuntime, sh, testSpec, type TestRuntime } from '../testing/runtime-fixtures.js';

describe('CrunRuntime resource limits', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let lower: string;

  before(async () => {
    lower = (await baseLayer()).path;
    t = await createTestRuntime();
  });

  after(async () => {
    if (t) {
      for (const id of await t.rt.list()) await t.rt.destroy(id);
      await assertNoLeaks(t.rt);
      await t.teardown();
    }
  });

  test('memory: exceeding the limit OOM-kills inside the sandbox only; init and agent survive', async () => {
    const id = 'mem1';
    const reports: Array<[string, number]> = [];
    const stopWatching = t.rt.watchOom((sid, kills) => reports.push([sid, kills]));
    await t.rt.oomWatchReady();
    await t.rt.create(testSpec(id, [lower], { resources: { vcpu: 1, memoryMb: 128, diskGb: 1, pidsMax: 128 } }));
    try {
      // dd allocates (and touches) a 400 MiB block buffer: more than the limit, and no swap (memsw = limit).
      const r = await sh(t.rt, id, 'dd if=/dev/zero of=/dev/null bs=400M count=1', true);
      assert.notEqual(r.code, 0, 'dd was killed');
      const s = await t.rt.stats(id);
      assert.ok(s.oomKills >= 1, `oom_kill counted (${s.oomKills})`);
      for (let i = 0; i < 100 && reports.reduce((n, [, k]) => n + k, 0) < s.oomKills; i++) await sleep(50);
      assert.deepEqual(
        { ids: [...new Set(reports.map(([sid]) => sid))], kills: reports.reduce((n, [, k]) => n + k, 0) },
        { ids: [id], kills: s.oomKills },
        'the kills are reported as they happen, once, for this sandbox only',
      );
      assert.equal(s.memoryLimitBytes, 128 * 1024 * 1024);
      assert.equal(await t.rt.status(id), 'running');
      const health = await agentGet(t.rt.agentSocket(id));
      assert.equal(health.ok, true, 'the agent survived');
      const memsw = readFileSync(`/sys/fs/cgroup/memory/${t.rt.cgroupPath(id)}/memory.memsw.limit_in_bytes`, 'utf8').trim();
      assert.equal(Number(memsw), 128 * 1024 * 1024, 'memory+swap = memory: the sandbox cannot swap');
    } finally {
      stopWatching();
      await t.rt.destroy(id);
    }
  });

  test('pids: a fork bomb stops at the limit and the host stays responsive', async () => {
    const id = 'fork1';
    const pidsMax = 64;
    await t.rt.create(testSpec(id, [lower], { resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax } }));
    try {
      // Detached from exec's pipes, self-limited to 6 s; destroy kills whatever is left anyway.
      await sh(t.rt, id, `setsid timeout -s KILL 6 bash -c 'b() { b | b & }; b' </dev/null >/dev/null 2>&1 & disown; exit 0`);
      const pidsDir = `/sys/fs/cgroup/pids/${t.rt.cgroupPath(id)}`;
      let maxSeen = 0;
      let slowestHostSpawnMs = 0;
      for (let i = 0; i < 15; i++) {
        await sleep(200);
        maxSeen = Math.max(maxSeen, Number(readFileSync(`${pidsDir}/pids.current`, 'utf8')));
        const t0 = performance.now();
        assert.equal(spawnSync('/bin/true').status, 0);
        slowestHostSpawnMs = Math.max(slowestHostSpawnMs, performance.now() - t0);
      }
      const events = readFileSync(`${pidsDir}/pids.events`, 'utf8');
      assert.ok(maxSeen <= pidsMax, `pids.current stayed at or under ${pidsMax} (max ${maxSeen})`);
      assert.ok(maxSeen >= pidsMax - 8, `the bomb did reach the limit (max ${maxSeen})`);
      assert.match(events, /^max [1-9]\d*$/m, 'forks were refused at the limit');
      assert.ok(slowestHostSpawnMs < 1000, `host spawn stayed fast (${slowestHostSpawnMs.toFixed(0)} ms)`);
    } finally {
      await t.rt.destroy(id);
    }
  });

  test('cpu: two busy loops at vcpu=1 get at most ~1 core', async () => {
    const id = 'cpu1';
    await t.rt.create(testSpec(id, [lower], { resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 128 } }));
    try {
      await sh(t.rt, id, `for i in 1 2; do setsid timeout 4 bash -c 'while :; do :; done' </dev/null >/dev/null 2>&1 & done; exit 0`);
      await sleep(700);
      const s0 = await t.rt.stats(id);
      const w0 = performance.now();
      await sleep(2000);
      const s1 = await t.rt.stats(id);
      const cores = (s1.cpuUsageNs - s0.cpuUsageNs) / 1e6 / (performance.now() - w0);
      assert.ok(cores <= 1.1, `used ${cores.toFixed(2)} cores`);
      assert.ok(cores >= 0.3, `the loops did run (${cores.toFixed(2)} cores)`);
      const quota = readFileSync(`/sys/fs/cgroup/cpu/${t.rt.cgroupPath(id)}/cpu.cfs_quota_us`, 'utf8').trim();
      assert.equal(quota, '100000');
    } finally {
      await t.rt.destroy(id);
    }
  });

  test('disk: writing past a 1 GB disk fails with ENOSPC and the host disk is untouched', async () => {
    const id = 'disk1';
    await t.rt.create(testSpec(id, [lower], { resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 128 } }));
    try {
      const r = await sh(t.rt, id, 'dd if=/dev/zero of=/big bs=1M count=1500 conv=fsync', true);
      assert.notEqual(r.code, 0);
      assert.match(r.stderr, /No space left on device/);
      const size = await sh(t.rt, id, 'stat -c %s /big');
      assert.ok(Number(size.stdout) < 1024 ** 3, `the file stopped below 1 GiB (${size.stdout.trim()})`);
      // Everything the sandbox wrote is inside its image, whose allocation is bounded by its size.
      // (The host's free space is not compared: other work on the machine moves it.)
      const image = statSync(`${t.dataDir}/sandboxes/${id}/disk.img`);
      assert.ok(image.blocks * 512 <= 1.01 * 1024 ** 3, 'the image never grows past its size');
      const hostFreeAfter = statfsSync(t.dataDir);
      assert.ok(hostFreeAfter.bavail * hostFreeAfter.bsize > 1024 ** 3, 'the host disk did not fill up');
      const others = readdirSync(`${t.dataDir}/sandboxes/${id}`).filter((n) => n !== 'disk.img' && n !== 'disk' && n !== 'rootfs');
      for (const n of others) assert.ok(statSync(`${t.dataDir}/sandboxes/${id}/${n}`).size < 1024 ** 2, `${n} stays small`);
      const s = await t.rt.stats(id);
      assert.ok(s.diskUsedBytes > 0.9 * s.diskTotalBytes, 'stats see the full disk');
      await sh(t.rt, id, 'rm /big && echo ok > /after');
    } finally {
      await t.rt.destroy(id);
    }
  });
});
