// bench/burst: a burst of concurrent creates, each followed by its first command, (a) after steady
// demand and (b) out of the blue, next to a single create + command on an idle daemon measured in
// the same run (cold: a daemon without a warm pool; warm: taken from the pool); (c) commands and
// creates while the pool boots its reserve after a template's first create, over the same at rest
// in the same daemon, and what the reserve costs at rest (memory, CPU). Then a profile of
// cold boots: where their time and CPU go, alone and at the daemon's boot concurrency, and how long
// the spawns of a boot hold the runtime's (the daemon's) one thread.
// Usage (root, after npm run build): [BURST_PHASES=abcp] node bench/dist/burst.js [BURST=100] [RATE=2] [STEADY_S=10]
// The daemon's warm-pool settings (SANDBOXD_WARM_POOL_*, SANDBOXD_BOOT_CONCURRENCY) pass through.
import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import childProcess from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';
import { agent, api, crunContainers, startServer, TEST_DATA_DIR, type TestServer } from '../../e2e/dist/harness.js';
import { waitForAgent } from '../../packages/server/dist/node/agent-client.js';
import { loadConfig } from '../../packages/server/dist/config/index.js';
import { baseLayer } from '../../packages/server/dist/testing/fixtures.js';
import { withBenchRuntime } from './bench-runtime.js';
import { fmt, row, summary } from './stats.js';

const BURST = Number(process.argv[2] ?? 100);
const RATE = Number(process.argv[3] ?? 2);
const STEADY_S = Number(process.argv[4] ?? 10);

/** Bursts commit more memory and sandboxes than the default quotas allow: this measures the node. */
const DAEMON_ENV = {
  SANDBOXD_MAX_SANDBOXES: '0',
  SANDBOXD_MAX_TOTAL_MEMORY_MB: '0',
  SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '100000',
  // The daemon's default disk admission (the test harness turns it off: its daemons share a disk).
  SANDBOXD_DISK_ADMISSION: 'on',
  // The daemon's own default reserve (the test harness sets none), unless the caller sets one.
  SANDBOXD_WARM_POOL_RESERVE: process.env.SANDBOXD_WARM_POOL_RESERVE ?? '',
};
const CREATE = { template_name: 'base', internet_access: false };

interface Sample {
  ok: boolean;
  /** Send of the create → answer of its first command. */
  totalMs: number;
  createMs: number;
  error?: string;
}

/** One create and its first command, as a client does. */
async function createAndRun(server: TestServer): Promise<Sample & { id?: string }> {
  const t0 = performance.now();
  try {
    const res = await api(server, 'POST', '/v1/sandboxes', CREATE);
    const createMs = performance.now() - t0;
    if (res.status !== 201) return { ok: false, totalMs: performance.now() - t0, createMs, error: `create ${res.status} ${res.body?.code}` };
    const sb = { publicHost: res.body.public_host, authToken: res.body.auth_token };
    const cmd = await agent(sb, 'POST', '/commands/run', { command: 'echo ready' });
    const totalMs = performance.now() - t0;
    const ok = cmd.status === 200 && cmd.body.exit_code === 0 && cmd.body.stdout === 'ready\n';
    return { ok, totalMs, createMs, id: res.body.id, ...(ok ? {} : { error: `command ${cmd.status} ${JSON.stringify(cmd.body).slice(0, 100)}` }) };
  } catch (err) {
    return { ok: false, totalMs: performance.now() - t0, createMs: NaN, error: String(err) };
  }
}

function containers(server: TestServer): string[] {
  return crunContainers(server.dataDir);
}

/** Mean memory cgroup usage of these containers (what an idle one costs; the pool budgets 10 MiB). */
function meanCgroupMiB(server: TestServer, ids: string[]): number {
  let sum = 0;
  let n = 0;
  for (const id of ids) {
    const f = `/sys/fs/cgroup/memory/${server.env.SANDBOXD_CGROUP_PARENT}/${id}/memory.usage_in_bytes`;
    const v2 = `/sys/fs/cgroup/${server.env.SANDBOXD_CGROUP_PARENT}/${id}/memory.current`;
    const file = existsSync(f) ? f : v2;
    if (!existsSync(file)) continue;
    sum += Number(readFileSync(file, 'utf8')) / 2 ** 20;
    n++;
  }
  return n ? sum / n : NaN;
}

async function burst(server: TestServer): Promise<Sample[]> {
  const samples = await Promise.all(Array.from({ length: BURST }, () => createAndRun(server)));
  for (const s of samples) if (s.id) await api(server, 'DELETE', `/v1/sandboxes/${s.id}`);
  return samples;
}

function report(name: string, samples: Sample[], baseline: number[], goalP99Ms: number): string[] {
  const ok = samples.filter((s) => s.ok);
  const errors = [...new Set(samples.filter((s) => !s.ok).map((s) => s.error))].slice(0, 3);
  const p99 = summary(ok.map((s) => s.totalMs)).p99;
  return [
    row(`${name}: create + command`, ok.map((s) => s.totalMs), baseline),
    row(`${name}: create alone`, ok.map((s) => s.createMs)),
    `  success ${ok.length}/${samples.length} (${((100 * ok.length) / samples.length).toFixed(0)} %)${errors.length ? `; errors: ${errors.join('; ')}` : ''}` +
      `; goal 100 % and p99 ≤ ${goalP99Ms} ms: ${ok.length === samples.length && p99 <= goalP99Ms ? 'met' : 'NOT met'}`,
  ];
}

/** Sequential creates + first command, each deleted after; `gapMs` lets a warm pool refill. */
async function sequential(server: TestServer, n: number, gapMs: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    await new Promise((r) => setTimeout(r, gapMs));
    const s = await createAndRun(server);
    if (!s.ok) throw new Error(`baseline create failed: ${s.error}`);
    out.push(s.totalMs);
    await api(server, 'DELETE', `/v1/sandboxes/${s.id}`);
  }
  return out;
}

async function withServer<T>(env: Record<string, string>, fn: (s: TestServer) => Promise<T>): Promise<T> {
  const server = await startServer({ templates: ['base'], env: { ...DAEMON_ENV, ...env } });
  try {
    return await fn(server);
  } finally {
    await server.stop();
  }
}

/** (b): an idle daemon that has served this template once (its pool holds what one create asks for). */
async function outOfTheBlue(): Promise<{ samples: Sample[]; ready: number }> {
  return withServer({}, async (server) => {
    await sequential(server, 1, 0);
    // At rest: the pool has stopped growing (the floor, or the reserve, is booted).
    let ready = -1;
    for (let stable = 0, t0 = performance.now(); stable < 4 && performance.now() - t0 < 60_000; ) {
      await new Promise((r) => setTimeout(r, 500));
      const n = containers(server).length;
      stable = n === ready ? stable + 1 : 0;
      ready = n;
    }
    return { samples: await burst(server), ready };
  });
}

/** (a): RATE creates + command per second for STEADY_S, each deleted after its command, then the burst. */
async function afterSteadyDemand(): Promise<{ samples: Sample[]; steady: Sample[]; ready: number; readyMiB: number }> {
  return withServer({}, async (server) => {
    const steady: Array<Promise<Sample & { id?: string }>> = [];
    const t0 = performance.now();
    for (let i = 0; i < RATE * STEADY_S; i++) {
      const due = t0 + (i * 1000) / RATE;
      await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now())));
      steady.push(
        createAndRun(server).then(async (s) => {
          if (s.id) await api(server, 'DELETE', `/v1/sandboxes/${s.id}`);
          return s;
        }),
      );
    }
    await new Promise((r) => setTimeout(r, Math.max(0, t0 + STEADY_S * 1000 - performance.now())));
    const done = await Promise.all(steady);
    const ready = containers(server);
    const readyMiB = meanCgroupMiB(server, ready);
    return { samples: await burst(server), steady: done, ready: ready.length, readyMiB };
  });
}

/** MemAvailable of the host, in MiB. */
function memAvailableMiB(): number {
  const m = /MemAvailable:\s+(\d+) kB/.exec(readFileSync('/proc/meminfo', 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** CPU time (ms) of a process, and of the sandboxes' cgroups (v1 cpuacct, or v2 cpu.stat). */
function cpuOf(pid: number | undefined, cgroupParent: string): { daemon: number; sandboxes: number } {
  let daemon = NaN;
  try {
    const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const p = st.slice(st.lastIndexOf(')') + 2).split(' ').map(Number);
    daemon = (p[11]! + p[12]!) * 10;
  } catch {
    /* gone */
  }
  const v1 = `/sys/fs/cgroup/cpuacct/${cgroupParent}/cpuacct.usage`;
  const v2 = `/sys/fs/cgroup/${cgroupParent}/cpu.stat`;
  const sandboxes = existsSync(v1)
    ? Number(readFileSync(v1, 'utf8')) / 1e6
    : existsSync(v2)
      ? Number(/usage_usec (\d+)/.exec(readFileSync(v2, 'utf8'))?.[1] ?? NaN) / 1000
      : NaN;
  return { daemon, sandboxes };
}

interface FirstCreateResult {
  reserve: number;
  bootsDuring: number;
  during: { cmd: number[]; spin: number[]; create: number[] };
  rest: { cmd: number[]; spin: number[]; create: number[] };
  readyMiB: number;
  memDropMiB: number;
  idle: { daemonPct: number; sandboxesPct: number; seconds: number; held: string; eachMs: string };
}

/**
 * (c) A template's first create on a fresh daemon makes the pool boot its whole reserve: the
 * latency of commands (in the first sandbox) and of create + command (each deleted after) while
 * those boots run, against the same at rest once the reserve is booted (the same daemon, the
 * same run). Then what the reserve costs at rest: host memory and CPU over IDLE_S seconds.
 */
async function firstCreate(reserveWanted: number): Promise<FirstCreateResult> {
  const IDLE_S = 10;
  return withServer({}, async (server) => {
    const mem0 = memAvailableMiB();
    const res = await api(server, 'POST', '/v1/sandboxes', CREATE);
    if (res.status !== 201) throw new Error(`first create: ${res.status}`);
    const sb = { publicHost: res.body.public_host, authToken: res.body.auth_token };
    const own = res.body.id as string;
    const command = async (cmd = 'echo ready') => {
      const t0 = performance.now();
      const r = await agent(sb, 'POST', '/commands/run', { command: cmd });
      if (r.status !== 200 || r.body.exit_code !== 0) throw new Error(`command ${r.status} ${JSON.stringify(r.body).slice(0, 100)}`);
      return performance.now() - t0;
    };
    // A fixed amount of CPU work in the foreground sandbox (~100 ms alone): what the pool's boots take from it.
    const SPIN = 'i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done';
    const pooled = () => containers(server).filter((id) => id !== own).length;
    const out = () => ({ cmd: [] as number[], spin: [] as number[], create: [] as number[] });
    /** One command and one CPU-bound command in the first sandbox, then one create + command (deleted after), then a pause. */
    const once = async (into: { cmd: number[]; spin: number[]; create: number[] }) => {
      into.cmd.push(await command());
      into.spin.push(await command(SPIN));
      const s = await createAndRun(server);
      if (!s.ok) throw new Error(`create during the measure: ${s.error}`);
      into.create.push(s.totalMs);
      await api(server, 'DELETE', `/v1/sandboxes/${s.id}`);
      await new Promise((r) => setTimeout(r, 300));
    };
    // While the pool boots its reserve (it started with the first create), until it holds it.
    const before = pooled();
    const during = out();
    for (const t0 = performance.now(); pooled() < reserveWanted && performance.now() - t0 < 60_000; ) await once(during);
    // At rest: no boot for 3 s, then as many samples.
    for (let last = -1, t0 = performance.now(); performance.now() - t0 < 60_000; ) {
      const n = pooled();
      if (n === last) break;
      last = n;
      await new Promise((r) => setTimeout(r, 3000));
    }
    const reserve = pooled();
    const rest = out();
    while (rest.cmd.length < during.cmd.length) await once(rest);
    // The reserve at rest: no boot or shrink for 5 s (at most a minute), then IDLE_S seconds of nothing.
    for (let last = -1, t0 = performance.now(); performance.now() - t0 < 60_000; ) {
      const n = pooled();
      if (n === last) break;
      last = n;
      await new Promise((r) => setTimeout(r, 5000));
    }
    const ids = containers(server).filter((id) => id !== own);
    const parent = server.env.SANDBOXD_CGROUP_PARENT!;
    const each0 = ids.map((id) => cpuOf(undefined, `${parent}/${id}`).sandboxes);
    const c0 = cpuOf(server.pid, parent);
    await new Promise((r) => setTimeout(r, IDLE_S * 1000));
    const c1 = cpuOf(server.pid, parent);
    // Per ready sandbox over the window (ms): spread evenly (the agents at rest) or a few (boots)?
    const each = ids.map((id, i) => cpuOf(undefined, `${parent}/${id}`).sandboxes - each0[i]!).filter(Number.isFinite).sort((x, y) => x - y);
    const idleAfter = pooled();
    const memDropMiB = mem0 - memAvailableMiB();
    await api(server, 'DELETE', `/v1/sandboxes/${own}`);
    return {
      reserve,
      bootsDuring: reserve - before,
      during,
      rest,
      readyMiB: meanCgroupMiB(server, ids),
      memDropMiB,
      idle: { daemonPct: ((c1.daemon - c0.daemon) / (IDLE_S * 1000)) * 100, sandboxesPct: ((c1.sandboxes - c0.sandboxes) / (IDLE_S * 1000)) * 100, seconds: IDLE_S, held: `${ids.length} → ${idleAfter}`, eachMs: each.length ? `median ${each[each.length >> 1]!.toFixed(1)}, max ${each[each.length - 1]!.toFixed(1)}` : 'n/a' },
    };
  });
}

/** Busy CPU time of the host, this process (and the tools it waited for), and the sandboxes' cgroups, in ms. */
function cpuNow(cgroupParent: string): { host: number; self: number; tools: number; inside: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const host = (f[0]! + f[1]! + f[2]! + f[5]! + f[6]! + f[7]!) * 10;
  const st = readFileSync('/proc/self/stat', 'utf8');
  const p = st.slice(st.lastIndexOf(')') + 2).split(' ').map(Number);
  const acct = `/sys/fs/cgroup/cpuacct/${cgroupParent}/cpuacct.usage`;
  // The parent cgroup appears with the first sandbox: none yet is none used.
  const inside = existsSync(acct) ? Number(readFileSync(acct, 'utf8')) / 1e6 : 0;
  return { host, self: (p[11]! + p[12]!) * 10, tools: (p[13]! + p[14]!) * 10, inside };
}

/**
 * Time this process's thread spends inside child_process.spawn (a fork of the whole process, then
 * waiting for the child's exec), which the runtime calls for crun, mkfs, mount and its helpers.
 */
const spawnTime = { calls: 0, ms: 0 };
{
  const original = childProcess.spawn;
  childProcess.spawn = function (this: unknown, ...args: unknown[]) {
    const t0 = performance.now();
    try {
      return (original as (...a: unknown[]) => ReturnType<typeof original>).apply(this, args);
    } finally {
      spawnTime.calls++;
      spawnTime.ms += performance.now() - t0;
    }
  } as typeof original;
  // The runtime imports spawn by name: its binding follows the patched export.
  syncBuiltinESMExports();
}

/**
 * Cold boots straight on the runtime (as the pool's boots run: create, then wait for the agent),
 * alone and `concurrency` at a time: step medians and CPU per boot, split between this process
 * (the daemon's share), the host tools it runs (crun, mkfs, mount, ip...) and the sandbox itself
 * (catatonit + the agent's start). What is left of the host's busy time is the kernel's work in
 * other contexts (and anything else running on the host).
 */
async function profileColdBoots(concurrency: number, n: number): Promise<string[]> {
  const layer = (await baseLayer()).path;
  return withBenchRuntime(`bb${process.pid % 100000}`, `10.99.${process.pid % 250}.0/24`, async ({ rt, steps, cgroupParent }) => {
    const out: string[] = [];
    let seq = 0;
    for (const conc of [1, concurrency]) {
      steps.clear();
      const agentMs: number[] = [];
      const ids: string[] = [];
      const c0 = cpuNow(cgroupParent);
      const s0 = { ...spawnTime };
      const t0 = performance.now();
      let next = 0;
      await Promise.all(
        Array.from({ length: conc }, async () => {
          while (next++ < n) {
            const id = `sbburst${process.pid}x${seq++}`;
            ids.push(id);
            await rt.create({ id, lowerDirs: [layer], resources: { vcpu: 2, memoryMb: 512, diskGb: 2, pidsMax: 512 }, internetAccess: false, hostname: id, env: { SANDBOX_ID: id, PATH: '/usr/bin:/bin' } });
            const a0 = performance.now();
            await waitForAgent(rt.agentSocket(id), 30_000);
            agentMs.push(performance.now() - a0);
          }
        }),
      );
      const wallMs = performance.now() - t0;
      const c1 = cpuNow(cgroupParent);
      const per = (k: keyof typeof c0) => ((c1[k] - c0[k]) / n).toFixed(0);
      const med = (k: string) => fmt(summary(steps.get(k) ?? []).p50);
      out.push(
        `cold boots ${conc} at a time (n=${n}): ${((n * 1000) / wallMs).toFixed(1)} boots/s; p50 prepare ${med('prepare')}, disk ${med('disk')}, crun run ${med('crun-run')}, runtime total ${med('total')}, then agent answering ${fmt(summary(agentMs).p50)}`,
        `  CPU per boot: host ${per('host')} ms = the runtime's process ${per('self')} + tools ${per('tools')} + in the sandbox ${per('inside')} + kernel elsewhere/other load;` +
          ` ${((spawnTime.calls - s0.calls) / n).toFixed(1)} spawns per boot hold the runtime's thread ${((spawnTime.ms - s0.ms) / n).toFixed(1)} ms (RSS ${Math.round(process.memoryUsage().rss / 2 ** 20)} MiB)`,
      );
      for (const id of ids) await rt.destroy(id);
    }
    return out;
  });
}

/** BURST_PHASES: which parts to run (default all): a, b (each with the cold and warm baselines), c, p (the boot profile). */
const PHASES = process.env.BURST_PHASES ?? 'abcp';

async function main(): Promise<void> {
  const config = loadConfig({ ...process.env, SANDBOXD_DATA_DIR: join(TEST_DATA_DIR, 'servers') });
  const ab = /[ab]/.test(PHASES);
  const cold = ab ? await withServer({ SANDBOXD_WARM_POOL_SIZE: '0' }, (s) => sequential(s, 7, 200)) : [];
  const warm = ab ? await withServer({}, (s) => sequential(s, 7, 500)) : [];
  const b = PHASES.includes('b') ? await outOfTheBlue() : undefined;
  const a = PHASES.includes('a') ? await afterSteadyDemand() : undefined;
  const c = PHASES.includes('c') ? await firstCreate(config.warmPool.reserve) : undefined;
  const profile = PHASES.includes('p') ? await profileColdBoots(config.warmPool.bootConcurrency, 24) : [];

  const w = config.warmPool;
  console.log(`\nbench/burst on ${new Date().toISOString()} (${availableParallelism()} cores; burst=${BURST}, steady ${RATE}/s for ${STEADY_S} s)`);
  console.log(
    `daemon: boot concurrency ${w.bootConcurrency}, warm pool floor ${w.minPerKey}/key, horizon ${w.horizonSeconds} s, budget ${w.maxMemoryMb} MiB, reserve ${w.reserve}, shrink after ${w.shrinkAfterSeconds} s`,
  );
  if (ab) {
    console.log(row('baseline: one create + command, cold', cold));
    console.log(row('one create + command, warm pool', warm, cold));
  }
  if (a) {
    console.log(`(a) after ${RATE}/s for ${STEADY_S} s: ${a.ready} sandboxes ready at the burst (idle: ${a.readyMiB.toFixed(1)} MiB each, memory cgroup)`);
    console.log(row('(a) the steady creates + command', a.steady.filter((s) => s.ok).map((s) => s.totalMs), cold));
    for (const line of report('(a) burst', a.samples, cold, 1500)) console.log(line);
  }
  if (b) {
    console.log(`(b) out of the blue: ${b.ready} sandboxes ready at the burst`);
    for (const line of report('(b) burst', b.samples, cold, 1500)) console.log(line);
  }
  if (c) {
    console.log(`(c) a template's first create: the pool booted ${c.bootsDuring} of its reserve (${c.reserve} at rest) while these ran`);
    console.log(row("(c) command in the first sandbox, during the reserve's boots", c.during.cmd, c.rest.cmd));
    console.log(row("(c) CPU-bound command (shell loop), during the boots", c.during.spin, c.rest.spin));
    console.log(row("(c) create + command, during the reserve's boots", c.during.create, c.rest.create));
    console.log(row('(c) the same at rest (baseline of the two lines above): command', c.rest.cmd));
    console.log(row('(c) the same at rest: CPU-bound command', c.rest.spin));
    console.log(row('(c) the same at rest: create + command', c.rest.create));
    console.log(
      `(c) the reserve at rest: ${c.reserve} ready, ${c.readyMiB.toFixed(1)} MiB each (memory cgroup), host MemAvailable −${c.memDropMiB.toFixed(0)} MiB with the first sandbox;` +
        ` CPU over ${c.idle.seconds} s idle (ready ${c.idle.held}): daemon ${c.idle.daemonPct.toFixed(2)} %, the sandboxes ${c.idle.sandboxesPct.toFixed(2)} % of a core (ms per sandbox: ${c.idle.eachMs})`,
    );
  }
  for (const line of profile) console.log(line);
  if (a && b && profile.length) {
    const bootsPerS = Number(/([\d.]+) boots\/s/.exec(profile[2] ?? '')?.[1] ?? NaN);
    console.log(
      `a burst needs ready + cold boots: with ${a.ready} ready and ~${bootsPerS} cold boots/s, the last of ${BURST} waits ≥ ${(Math.max(0, BURST - a.ready) / bootsPerS).toFixed(1)} s (a); with ${b.ready} ready ≥ ${(Math.max(0, BURST - b.ready) / bootsPerS).toFixed(1)} s (b)`,
    );
  }
}

await main();
