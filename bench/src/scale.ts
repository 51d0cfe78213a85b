// bench/scale: a node holding many idle sandboxes. Creates N (default 1,000) idle `base` sandboxes
// with bounded concurrency, then measures what the issue "node at scale" asks: the daemon's CPU
// while all of them sit idle, host memory per sandbox, create and delete latency with N alive next
// to the same measured on the same daemon with none alive (the baseline, same run), and the time to
// create and to delete them all.
// Usage (root, after npm run build): node bench/dist/scale.js [N=1000] [CONCURRENCY=8] [IDLE_SECONDS=30]
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync as spawnProc } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { api, startServer, type TestServer } from '../../e2e/dist/harness.js';
import { MANY_SANDBOXES_ENV, row, summary } from './stats.js';

const N = Number(process.argv[2] ?? 1000);
const CONCURRENCY = Number(process.argv[3] ?? 8);
const IDLE_SECONDS = Number(process.argv[4] ?? 30);
const SAMPLES = 20;
const CLK_TCK = 100;

function memAvailableKiB(): number {
  return Number(/MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))![1]);
}

/** utime + stime of a process, in seconds. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

function rssMiB(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
}

async function create(server: TestServer): Promise<[number, string]> {
  const t0 = performance.now();
  const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false, timeout_seconds: 86400 });
  const ms = performance.now() - t0;
  if (res.status !== 201) throw new Error(`create: ${res.status} ${JSON.stringify(res.body)}`);
  return [ms, res.body.id as string];
}

async function del(server: TestServer, id: string): Promise<number> {
  const t0 = performance.now();
  const res = await api(server, 'DELETE', `/v1/sandboxes/${id}`);
  if (res.status !== 204 && res.status !== 200) throw new Error(`delete: ${res.status} ${JSON.stringify(res.body)}`);
  return performance.now() - t0;
}

/** Create → delete, one at a time at a client's pace (the warm pool refills in between). */
async function createDeleteSamples(server: TestServer): Promise<{ create: number[]; del: number[] }> {
  const out = { create: [] as number[], del: [] as number[] };
  for (let i = 0; i < SAMPLES; i++) {
    await new Promise((r) => setTimeout(r, 300));
    const [ms, id] = await create(server);
    out.create.push(ms);
    out.del.push(await del(server, id));
  }
  return out;
}

async function idleCpu(pid: number, seconds: number): Promise<number> {
  const c0 = cpuSeconds(pid);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  return (cpuSeconds(pid) - c0) / ((performance.now() - t0) / 1000);
}

/** 30 scrapes of /metrics (after 3 to warm up): their times and the size of the last one. */
async function scrapes(server: { baseUrl: string; apiKey: string }): Promise<{ ms: number[]; bytes: number }> {
  const ms: number[] = [];
  let bytes = 0;
  for (let i = 0; i < 33; i++) {
    const t0 = performance.now();
    const r = await fetch(`${server.baseUrl}/metrics`, { headers: { 'x-api-key': server.apiKey } });
    const text = await r.text();
    if (r.status !== 200) throw new Error(`/metrics answered ${r.status}: ${text.slice(0, 200)}`);
    if (i >= 3) ms.push(performance.now() - t0);
    bytes = Buffer.byteLength(text);
  }
  return { ms, bytes };
}

async function main(): Promise<void> {
  const server = await startServer({
    templates: ['base'],
    env: { ...MANY_SANDBOXES_ENV, SANDBOXD_SWEEP_INTERVAL_MS: '1000' },
  });
  const ids: string[] = [];
  try {
    const pid = server.pid!;
    const empty = await createDeleteSamples(server);
    const idleEmpty = await idleCpu(pid, Math.min(IDLE_SECONDS, 10));
    const scrapeEmpty = await scrapes(server);

    spawnProc('sh', ['-c', 'sync; echo 3 > /proc/sys/vm/drop_caches']);
    const memBefore = memAvailableKiB();
    const rssBefore = rssMiB(pid);
    const fillStart = performance.now();
    const fillMs: number[] = [];
    let next = 0;
    let lastReport = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < N) {
          next++;
          const [ms, id] = await create(server);
          fillMs.push(ms);
          ids.push(id);
          if (performance.now() - lastReport > 10_000) {
            lastReport = performance.now();
            const recent = summary(fillMs.slice(-200));
            process.stderr.write(`  ${ids.length}/${N} alive after ${((performance.now() - fillStart) / 1000).toFixed(0)} s; last 200 creates p50 ${recent.p50.toFixed(0)} ms p99 ${recent.p99.toFixed(0)} ms\n`);
          }
        }
      }),
    );
    const fillSeconds = (performance.now() - fillStart) / 1000;
    // At rest: the fill's rate made the warm pool grow toward its budget, and it shrinks back to
    // its floor once the rate has decayed (~30 s of excess); the idle figures are taken after that,
    // when no more than the floor (2) and a few spares are beside the N sandboxes, for 10 s.
    const settleStart = performance.now();
    for (let stable = 0; stable < 10 && performance.now() - settleStart < 300_000; ) {
      await new Promise((r) => setTimeout(r, 1000));
      const n = readdirSync(join(server.dataDir, 'crun')).length;
      stable = n <= ids.length + 4 ? stable + 1 : 0;
    }
    process.stderr.write(`  at rest ${((performance.now() - settleStart) / 1000).toFixed(0)} s after the fill\n`);
    spawnProc('sh', ['-c', 'sync; echo 3 > /proc/sys/vm/drop_caches']);
    const perSandboxMiB = (memBefore - memAvailableKiB()) / 1024 / ids.length;
    const rssAfter = rssMiB(pid);

    const idleFull = await idleCpu(pid, IDLE_SECONDS);
    const scrapeFull = await scrapes(server);
    const full = await createDeleteSamples(server);
    const delFull: number[] = [];
    for (const id of ids.splice(0, SAMPLES)) delFull.push(await del(server, id));

    const drainStart = performance.now();
    const drained = [...ids];
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        for (let id = ids.pop(); id; id = ids.pop()) await del(server, id);
      }),
    );
    const drainSeconds = (performance.now() - drainStart) / 1000;
    // A delete answers before the host teardown ends: the drain is over when every directory is gone.
    const leftOnHost = () => drained.filter((id) => existsSync(join(server.dataDir, 'sandboxes', id))).length;
    while (leftOnHost() > 0 && performance.now() - drainStart < 600_000) await new Promise((r) => setTimeout(r, 100));
    const teardownSeconds = (performance.now() - drainStart) / 1000;

    console.log(`\nbench/scale on ${new Date().toISOString()} (N=${N}, concurrency=${CONCURRENCY}, idle window ${IDLE_SECONDS} s)`);
    console.log(row('create, none alive (baseline)', empty.create));
    console.log(row(`create, ${N} alive`, full.create, empty.create));
    console.log(row('delete, none alive (baseline)', empty.del));
    console.log(row(`delete, ${N} alive`, delFull, empty.del));
    console.log(row(`fill: creates at concurrency ${CONCURRENCY}`, fillMs));
    console.log(`fill: ${N} sandboxes in ${fillSeconds.toFixed(1)} s; delete all: ${drainSeconds.toFixed(1)} s answered, ${teardownSeconds.toFixed(1)} s until the host held none of them (${leftOnHost()} left)`);
    console.log(row(`GET /metrics, ${N} alive`, scrapeFull.ms, scrapeEmpty.ms) + `   ${(scrapeFull.bytes / 1024).toFixed(1)} KiB (none alive: ${(scrapeEmpty.bytes / 1024).toFixed(1)} KiB; goal ≤ 50 ms, size independent of N)`);
    console.log(`idle daemon CPU: ${(idleFull * 100).toFixed(2)} % of a core with ${N} idle sandboxes (baseline, none alive: ${(idleEmpty * 100).toFixed(2)} %)`);
    console.log(`host memory per idle sandbox: ${perSandboxMiB.toFixed(2)} MiB (MemAvailable drop); daemon RSS ${rssBefore.toFixed(0)} → ${rssAfter.toFixed(0)} MiB`);
    const ratio = summary(full.create).p50 / summary(empty.create).p50;
    console.log(
      `targets: idle CPU ≤ 2 % (${(idleFull * 100).toFixed(2)}); create p50 ≤ 1.2x empty (${ratio.toFixed(2)}x); fill ≤ 60 s (${fillSeconds.toFixed(0)}); ≤ 9 MiB each (${perSandboxMiB.toFixed(1)}); delete p50 ≤ 30 ms (${summary(delFull).p50.toFixed(1)})`,
    );
  } finally {
    await server.stop();
  }
}

await main();
