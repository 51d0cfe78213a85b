// Root tests with real containers: pause/resume, stop/start, destroy, failure cleanup, restarts.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { chown, mkdir, rm, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { CrunRuntime } from './index.js';
import { moveIdRange } from './shift.js';
import { CANONICAL_ID_OFFSET, ID_RANGE, LEGACY_ID_OFFSET } from './ids.js';
import { baseLayer } from '../testing/fixtures.js';
import { agentGet, assertNoLeaks, createTestRuntime, hostView, sh, testSpec, waitFor, type TestRuntime } from '../testing/runtime-fixtures.js';

const INJECT_AT = ['disk', 'overlay-mount', 'network', 'config', 'crun-run', 'network-finish'];

/** The host id range recorded in the sandbox's directory. */
function idBase(t: TestRuntime, id: string): number {
  return (JSON.parse(readFileSync(`${t.dataDir}/sandboxes/${id}/ids.json`, 'utf8')) as { base: number }).base;
}

/** Host uid of the running sandbox's init (root inside). */
async function initUid(rt: CrunRuntime, id: string): Promise<number> {
  const pid = await rt.initPid(id);
  assert.ok(pid);
  return Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
}

/** Every trace a sandbox can leave on the host, for one id. */
function traces(t: TestRuntime, id: string): string[] {
  const out: string[] = [];
  const dir = `${t.dataDir}/sandboxes/${id}`;
  if (existsSync(dir)) out.push(`directory ${dir}`);
  if (existsSync(`${t.dataDir}/crun/${id}`)) out.push('crun state');
  if (existsSync(`/run/netns/${t.rt.netnsName(id)}`)) out.push('netns');
  if (existsSync(`/sys/class/net/${t.rt.vethName(id)}`)) out.push('veth');
  for (const h of readdirSync('/sys/fs/cgroup')) if (existsSync(`/sys/fs/cgroup/${h}/${t.rt.cgroupPath(id)}`)) out.push(`cgroup ${h}`);
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) if (line.includes(`/sandboxes/${id}/`) || line.includes(`/sandboxes/${id} `)) out.push(`mount ${line}`);
  for (const n of readdirSync('/sys/block').filter((x) => x.startsWith('loop'))) {
    try {
      if (readFileSync(`/sys/block/${n}/loop/backing_file`, 'utf8').includes(`/sandboxes/${id}/`)) out.push(`loop ${n}`);
    } catch {
      /* unbound */
    }
  }
  return out;
}

describe('CrunRuntime lifecycle', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let lower: string;

  before(async () => {
    lower = (await baseLayer()).path;
    t = await createTestRuntime({
      stepHook: (id, step) => {
        if (id === `f-${step}`) throw new Error(`injected failure at ${step}`);
      },
    });
  });

  after(async () => {
    if (t) {
      for (const id of await t.rt.list()) await t.rt.destroy(id);
      await assertNoLeaks(t.rt);
      await t.teardown();
    }
  });

  test('pause freezes every process (a counter stops), resume continues it', async () => {
    const id = 'pause1';
    await t.rt.create(testSpec(id, [lower]));
    try {
      await sh(t.rt, id, `setsid bash -c 'i=0; while :; do i=$((i+1)); echo $i > /c.tmp; mv /c.tmp /counter; sleep 0.05; done' </dev/null >/dev/null 2>&1 & disown; exit 0`);
      const counterFile = `/proc/${await t.rt.initPid(id)}/root/counter`;
      const read = () => Number(readFileSync(counterFile, 'utf8'));
      await waitFor('counter', async () => (existsSync(counterFile) && read() > 2 ? true : undefined));
      const t0 = performance.now();
      await t.rt.pause(id);
      const pauseMs = performance.now() - t0;
      assert.equal(await t.rt.status(id), 'paused');
      const frozenAt = read();
      await sleep(600);
      assert.equal(read(), frozenAt, 'no progress while paused');
      await t.rt.pause(id); // idempotent
      const t1 = performance.now();
      await t.rt.resume(id);
      const resumeMs = performance.now() - t1;
      assert.equal(await t.rt.status(id), 'running');
      await waitFor('progress after resume', async () => (read() > frozenAt + 3 ? true : undefined), 5000);
      await t.rt.resume(id); // idempotent
      assert.ok(pauseMs < 500 && resumeMs < 500, `pause ${pauseMs.toFixed(1)} ms, resume ${resumeMs.toFixed(1)} ms`);
    } finally {
      await t.rt.destroy(id);
    }
  });

  test('stop keeps the disk and the address; start boots on it again', async () => {
    const id = 'stop1';
    const spec = testSpec(id, [lower], { internetAccess: true });
    await t.rt.create(spec);
    await sh(t.rt, id, 'echo kept > /root/file && mkdir -p /srv/data && echo deep > /srv/data/x');
    const ip = readFileSync(`${t.dataDir}/sandboxes/${id}/net.json`, 'utf8');
    const base = idBase(t, id);
    assert.equal(await initUid(t.rt, id), base);
    const other = 'stop1b';
    await t.rt.create(testSpec(other, [lower]));
    try {
      await t.rt.pause(other);
      await t.rt.stop(id);
      assert.equal(await t.rt.status(id), 'stopped');
      // One query for many: the same answers as status() one by one.
      const many = await t.rt.statuses([id, other, 'nosuch1']);
      assert.deepEqual(Object.fromEntries(many), { [id]: 'stopped', [other]: 'paused', nosuch1: 'missing' });
      await t.rt.resume(other);
      assert.equal((await t.rt.statuses([other])).get(other), 'running');
    } finally {
      await t.rt.destroy(other);
    }
    assert.ok((await t.rt.list()).includes(id));
    assert.deepEqual(traces(t, id), [`directory ${t.dataDir}/sandboxes/${id}`], 'stopped: only the directory (disk image) is left');
    await t.rt.stop(id); // idempotent
    const stopped = await t.rt.stats(id);
    assert.equal(stopped.pids, 0);
    assert.equal(stopped.diskTotalBytes, 1024 ** 3, 'disk figures from the image while unmounted');
    assert.ok(stopped.diskUsedBytes > 0);
    await assert.rejects(t.rt.pause(id), /not running/);
    await t.rt.start(spec);
    assert.equal(await t.rt.status(id), 'running');
    const r = await sh(t.rt, id, 'cat /root/file /srv/data/x');
    assert.equal(r.stdout, 'kept\ndeep\n');
    assert.equal(readFileSync(`${t.dataDir}/sandboxes/${id}/net.json`, 'utf8'), ip, 'same address');
    assert.equal(idBase(t, id), base, 'same id range');
    assert.equal(await initUid(t.rt, id), base);
    assert.equal((await agentGet(t.rt.agentSocket(id))).ok, true);
    await t.rt.start(spec); // idempotent while running
    await t.rt.destroy(id);
  });

  test("a running sandbox's mounts are in its own namespace only; disk figures come through its root; a start waits for the last run's disk", async () => {
    const id = 'mnt1';
    const spec = testSpec(id, [lower]);
    const hostMounts = () => readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.includes(`/sandboxes/${id}/`));
    await t.rt.create(spec);
    try {
      // The create answered; its mounts leave the host's table right behind it.
      await t.rt.settled(id);
      assert.deepEqual(hostMounts(), [], "the host's mount table does not hold the running sandbox's root or disk");
      const dev = readFileSync(`${t.dataDir}/sandboxes/${id}/disk.loop`, 'utf8');
      assert.match(readFileSync(`/sys/block/${dev.slice(5)}/loop/backing_file`, 'utf8'), new RegExp(`/sandboxes/${id}/disk.img`), 'the recorded device serves the disk');
      const before = await t.rt.stats(id);
      assert.ok(before.diskTotalBytes > 0.9 * 1024 ** 3 && before.diskTotalBytes <= 1024 ** 3, `ext4 figures of the 1 GiB disk (${before.diskTotalBytes})`);
      await sh(t.rt, id, 'dd if=/dev/zero of=/root/big bs=1M count=64 status=none && sync');
      const after = await t.rt.stats(id);
      assert.ok(after.diskUsedBytes - before.diskUsedBytes >= 60 * 1024 ** 2, `64 MiB written shows (${before.diskUsedBytes} → ${after.diskUsedBytes})`);
      const inside = await sh(t.rt, id, 'stat -f -c "%b %f %S" /');
      const [blocks, free, size] = inside.stdout.trim().split(' ').map(Number) as [number, number, number];
      assert.equal(after.diskTotalBytes, blocks * size, 'the figures the sandbox itself sees');
      assert.ok(Math.abs(after.diskUsedBytes - (blocks - free) * size) < 8 * 1024 ** 2);
      await t.rt.stop(id);
      assert.deepEqual(traces(t, id), [`directory ${t.dataDir}/sandboxes/${id}`], 'the stop waited until the disk was let go');
      await t.rt.start(spec);
      await t.rt.settled(id);
      assert.deepEqual(hostMounts(), []);
      assert.equal((await sh(t.rt, id, 'stat -c %s /root/big')).stdout.trim(), String(64 * 1024 ** 2));
    } finally {
      await t.rt.destroy(id);
    }
    assert.deepEqual(traces(t, id), []);
  });

  test("a tenant's symlinks on its disk are never followed by host root at start (.sb/state → a host directory)", async () => {
    const id = 'link1';
    const spec = testSpec(id, [lower]);
    const victim = join(t.dataDir, `victim-${process.pid}`);
    await mkdir(join(victim, 'keys'), { recursive: true, mode: 0o700 });
    await writeFile(join(victim, 'keys', 'authorized_keys'), 'host secret\n', { mode: 0o600 });
    try {
      await t.rt.create(spec);
      // Inside, the link dangles; on the host side it names the victim.
      await sh(t.rt, id, `rm -rf /.sb/state && ln -s ${victim} /.sb/state && ln -s ${victim}/keys /.sb/state2 && test -L /.sb/state`);
      await t.rt.stop(id);
      await t.rt.start(spec);
      assert.equal((await agentGet(t.rt.agentSocket(id))).ok, true, 'the sandbox starts');
      for (const p of [victim, join(victim, 'keys'), join(victim, 'keys', 'authorized_keys')]) {
        const st = statSync(p);
        assert.deepEqual([st.uid, st.gid], [0, 0], `${p} still host root's`);
      }
      assert.equal(statSync(victim).mode & 0o777, 0o700);
      assert.deepEqual(readdirSync(victim), ['keys'], 'nothing made in the host directory');
    } finally {
      await t.rt.destroy(id);
      await rm(victim, { recursive: true, force: true });
    }
  });

  test('destroy leaves no trace and is idempotent', async () => {
    const id = 'gone1';
    await t.rt.create(testSpec(id, [lower], { internetAccess: true }));
    await t.rt.pause(id);
    assert.ok(traces(t, id).length > 3);
    await t.rt.destroy(id);
    assert.deepEqual(traces(t, id), []);
    assert.equal(await t.rt.status(id), 'missing');
    assert.ok(!(await t.rt.list()).includes(id));
    await t.rt.destroy(id);
    await assert.rejects(t.rt.stats(id), /does not exist/);
  });

  test('a create that fails at any step leaves nothing behind', async () => {
    for (const step of INJECT_AT) {
      const id = `f-${step}`;
      // An outage to the client; what failed is in the detail, for the log.
      await assert.rejects(
        t.rt.create(testSpec(id, [lower], { internetAccess: true })),
        (err: unknown) => err instanceof ServiceError && err.code === 'RUNTIME_ERROR' && (err.detail ?? '').startsWith(`Error: injected failure at ${step}\n`),
      );
      assert.deepEqual(traces(t, id), [], `after a failure at ${step}`);
    }
    await assert.rejects(t.rt.create(testSpec('f-lower', [`${lower}-does-not-exist`])), (err: unknown) => err instanceof ServiceError && /^Error: lower layer does not exist/.test(err.detail ?? ''));
    assert.deepEqual(traces(t, 'f-lower'), []);
    // crun itself failing: an image whose /proc is a file cannot get its proc mount.
    const bad = join(t.dataDir, 'bad-layer');
    await mkdir(bad, { recursive: true });
    await assert.rejects(t.rt.create(testSpec('f-owner', [bad, lower])), /not in canonical ownership/, 'a layer owned by host root');
    assert.deepEqual(traces(t, 'f-owner'), []);
    await chown(bad, CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET);
    await writeFile(join(bad, 'proc'), 'not a directory');
    await assert.rejects(
      t.rt.create(testSpec('f-crun', [bad, lower], { internetAccess: true })),
      (err: unknown) =>
        err instanceof ServiceError &&
        err.code === 'RUNTIME_ERROR' &&
        /container of sandbox f-crun did not start/.test(err.message) &&
        // crun's own words (with host paths) are for the log, not the message a client gets.
        /^crun run exited 1: .*proc/.test(err.detail ?? '') &&
        !err.message.includes(t.dataDir),
    );
    assert.deepEqual(traces(t, 'f-crun'), []);
    await rm(bad, { recursive: true });
  });

  test('create is idempotent, and many sandboxes come and go concurrently', async () => {
    const ids = ['con1', 'con2', 'con3', 'con4'];
    await Promise.all(ids.map((id, i) => t.rt.create(testSpec(id, [lower], { internetAccess: i % 2 === 0 }))));
    await t.rt.create(testSpec('con1', [lower], { internetAccess: true }));
    for (const id of ids) assert.equal((await agentGet(t.rt.agentSocket(id))).hostname, id);
    const bases = ids.map((id) => idBase(t, id));
    assert.equal(new Set(bases).size, ids.length, `distinct id ranges: ${bases.join(' ')}`);
    const ips = ids.filter((_, i) => i % 2 === 0).map((id) => readFileSync(`${t.dataDir}/sandboxes/${id}/net.json`, 'utf8'));
    assert.equal(new Set(ips).size, ips.length, 'distinct addresses');
    assert.deepEqual((await t.rt.list()).filter((i) => i.startsWith('con')), ids);
    await Promise.all(ids.map((id) => t.rt.destroy(id)));
    for (const id of ids) assert.deepEqual(traces(t, id), []);
  });

  test('a new runtime instance (daemon restart) finds, controls and removes running sandboxes', async () => {
    const id = 'restart1';
    await t.rt.create(testSpec(id, [lower], { internetAccess: true }));
    const again = new CrunRuntime({
      dataDir: t.dataDir,
      agentBundlePath: join(t.dataDir, 'test-agent', 'agent.cjs'),
      bridgeName: t.rt.bridge,
      subnetCidr: t.rt.subnetCidr,
      cgroupParent: t.rt.cgroupParent,
    });
    const base = idBase(t, id);
    assert.ok((await again.list()).includes(id));
    assert.equal(await again.status(id), 'running');
    assert.equal((await agentGet(again.agentSocket(id))).ok, true, 'the socket outlives the process that made it');
    await again.pause(id);
    assert.equal(await t.rt.status(id), 'paused');
    await again.resume(id);
    await again.stop(id);
    // The new instance learned the range from the directory: a new sandbox gets another one.
    await again.create(testSpec('restart2', [lower]));
    assert.notEqual(idBase(t, 'restart2'), base);
    await again.start(testSpec(id, [lower], { internetAccess: true }));
    assert.equal((await agentGet(again.agentSocket(id))).ok, true);
    assert.equal(await initUid(again, id), base, 'the range survives the restart');
    await again.destroy('restart2');
    await again.destroy(id);
    assert.deepEqual(traces(t, id), []);
  });

  test('a sandbox and a layer from before per-sandbox ranges (legacy shared range) still work', async () => {
    const id = 'legacy1';
    // A layer still at the legacy offset, on top of a canonical one.
    const old = join(t.dataDir, 'legacy-layer');
    await mkdir(join(old, 'opt'), { recursive: true });
    await writeFile(join(old, 'opt/old-file'), 'from an old layer\n');
    for (const [p, k] of [['', 0], ['opt', 0], ['opt/old-file', 1000]] as const) await chown(join(old, p), LEGACY_ID_OFFSET + k, LEGACY_ID_OFFSET + k);
    const spec = testSpec(id, [old, lower]);
    try {
      await t.rt.create(spec);
      await sh(t.rt, id, 'echo mine > /root/mine && mkdir /home/u && chown 1000:1000 /home/u && echo hi > /home/u/f && chown 1000:1000 /home/u/f');
      await t.rt.stop(id);
      // Turn it into what the old runtime left: no range file, upper files in the shared legacy range.
      const dir = `${t.dataDir}/sandboxes/${id}`;
      const oldBase = idBase(t, id);
      await unlink(`${dir}/ids.json`);
      await mkdir(`${dir}/disk`, { recursive: true });
      execFileSync('mount', ['-o', 'loop', `${dir}/disk.img`, `${dir}/disk`]);
      try {
        moveIdRange(`${dir}/disk/upper`, oldBase, LEGACY_ID_OFFSET, ID_RANGE);
        assert.equal(statSync(`${dir}/disk/upper/home/u/f`).uid, LEGACY_ID_OFFSET + 1000);
      } finally {
        execFileSync('umount', [`${dir}/disk`]);
      }
      await t.rt.start(spec);
      const base = idBase(t, id);
      assert.equal(await initUid(t.rt, id), base);
      assert.ok(!('movingFrom' in JSON.parse(readFileSync(`${dir}/ids.json`, 'utf8'))), 'the move finished');
      const view = await hostView(t.rt, id);
      try {
        assert.equal(statSync(`${view.upper}/home/u/f`).uid, base + 1000, "the disk's files moved to the new range");
      } finally {
        view.close();
      }
      const r = await sh(t.rt, id, 'cat /root/mine /home/u/f /opt/old-file; stat -c "%u:%g" /home/u/f /opt/old-file /usr/bin/bash; echo more >> /root/mine');
      assert.equal(r.stdout, 'mine\nhi\nfrom an old layer\n1000:1000\n1000:1000\n0:0\n');
    } finally {
      await t.rt.destroy(id);
      await rm(old, { recursive: true, force: true });
    }
  });

  test('another data dir on this host never gets the same ranges; a sandbox whose range it holds moves at start', async () => {
    const other = await createTestRuntime({ diskPoolSize: 0 });
    const specA = testSpec('hr-a', [lower]);
    const specB = testSpec('hr-b', [lower]);
    try {
      await t.rt.create(specA);
      await other.rt.create(specB);
      const a = idBase(t, 'hr-a');
      assert.notEqual(idBase(other, 'hr-b'), a, 'two data dirs, distinct ranges');
      assert.equal(await initUid(other.rt, 'hr-b'), idBase(other, 'hr-b'));
      await sh(other.rt, 'hr-b', 'mkdir /home/u && echo hi > /home/u/f && chown 1000:1000 /home/u/f');
      await other.rt.stop('hr-b');
      // What two daemons made before ranges were registered host-wide: hr-b's files in hr-a's range.
      const dir = `${other.dataDir}/sandboxes/hr-b`;
      await mkdir(`${dir}/disk`, { recursive: true });
      execFileSync('mount', ['-o', 'loop', `${dir}/disk.img`, `${dir}/disk`]);
      try {
        moveIdRange(`${dir}/disk/upper`, idBase(other, 'hr-b'), a, ID_RANGE);
      } finally {
        execFileSync('umount', [`${dir}/disk`]);
      }
      await writeFile(`${dir}/ids.json`, JSON.stringify({ base: a, size: ID_RANGE }));
      await other.rt.start(specB);
      const moved = idBase(other, 'hr-b');
      assert.notEqual(moved, a, 'moved off the range hr-a holds');
      assert.equal(await initUid(other.rt, 'hr-b'), moved);
      assert.equal(await initUid(t.rt, 'hr-a'), a, 'hr-a untouched');
      const view = await hostView(other.rt, 'hr-b');
      try {
        assert.equal(statSync(`${view.upper}/home/u/f`).uid, moved + 1000, "the disk's files moved with it");
      } finally {
        view.close();
      }
      assert.equal((await sh(other.rt, 'hr-b', 'stat -c %u:%g /home/u/f; cat /home/u/f')).stdout, '1000:1000\nhi\n');
    } finally {
      await t.rt.destroy('hr-a');
      await other.teardown();
    }
  });

  test('agent crash: the container stops, status says stopped, start brings it back', async () => {
    const id = 'crash1';
    const spec = testSpec(id, [lower]);
    await t.rt.create(spec);
    // Pid 2 is the agent once it answers; before, on a busy machine, it may be the shell below.
    assert.equal((await agentGet(t.rt.agentSocket(id))).ok, true);
    await sh(t.rt, id, 'kill -KILL 2', true);
    await waitFor('stopped', async () => ((await t.rt.status(id)) === 'stopped' ? true : undefined));
    await t.rt.start(spec);
    assert.equal((await agentGet(t.rt.agentSocket(id))).ok, true);
    await t.rt.destroy(id);
  });

  test('the real agent bundle listens on the passed socket', async () => {
    const bundle = new URL('../../../agent/bundle/agent.cjs', import.meta.url).pathname;
    // npm test builds it first: a missing bundle is a failure, not a reason to skip.
    assert.ok(existsSync(bundle), `no agent bundle at ${bundle} (node packages/agent/build.mjs)`);
    const real = await createTestRuntime({ agentBundlePath: bundle, diskPoolSize: 0 });
    try {
      await real.rt.create(testSpec('real1', [lower]));
      const { request } = await import('node:http');
      const status = await waitFor('agent', () =>
        new Promise<number | undefined>((resolve, reject) => {
          const req = request({ socketPath: real.rt.agentSocket('real1'), path: '/health', timeout: 5000 }, (res) => {
            res.resume();
            resolve(res.statusCode);
          });
          req.on('error', reject);
          req.end();
        }),
      );
      assert.equal(status, 200);
    } finally {
      await real.teardown();
    }
  });
});
