// bench/desktop: the built-in `desktop` template (issue 31), each figure beside a baseline of the
// same run:
//   create a desktop sandbox → first screenshot, from the warm pool, p50 (goal ≤ 1.5 s)
//     vs create a `base` sandbox → first command, from the warm pool;
//   GET /desktop/screenshot 1024x768, p50 (goal ≤ 100 ms) vs a bare `scrot` in the sandbox;
//   mouse move round trip, p50 (goal ≤ 15 ms) vs the agent's GET /health round trip;
//   host memory of an idle desktop sandbox (goal ≤ 200 MiB), with its parts.
// Usage (root, after npm run build, under the e2e lock): node bench/dist/desktop.js [CREATES=10] [SAMPLES=100]
import { existsSync, readFileSync } from 'node:fs';
import { agent, api, createSandbox, startServer, type CreatedSandbox } from '../../e2e/dist/harness.js';
import { row, summary } from './stats.js';

const CREATES = Number(process.argv[2] ?? 10);
const SAMPLES = Number(process.argv[3] ?? 100);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The pool floor (2 per template once asked for) refills between samples: each create is a warm one. */
const server = await startServer({ templates: ['base', 'desktop'], env: { SANDBOXD_WARM_POOL_SIZE: '2' } });

async function screenshotPng(sb: CreatedSandbox): Promise<Buffer> {
  const res = await fetch(`${sb.publicHost}/desktop/screenshot`, { headers: { authorization: `Bearer ${sb.authToken}`, accept: 'image/png' } });
  const body = Buffer.from(await res.arrayBuffer());
  if (res.status !== 200 || body.subarray(1, 4).toString() !== 'PNG') throw new Error(`screenshot: ${res.status} ${body.subarray(0, 200).toString()}`);
  return body;
}

/** create → first answer of `first`, for `n` creates, each after the pool refilled. */
async function createThen(template: string, n: number, first: (sb: CreatedSandbox) => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  // One create announces the demand; the pool then keeps two ready.
  const warm = await createSandbox(server, { template_name: template, timeout_seconds: 600 });
  await first(warm);
  await api(server, 'DELETE', `/v1/sandboxes/${warm.id}`);
  for (let i = 0; i < n; i++) {
    await sleep(template === 'desktop' ? 6000 : 2000);
    const t0 = performance.now();
    const sb = await createSandbox(server, { template_name: template, timeout_seconds: 600 });
    await first(sb);
    out.push(performance.now() - t0);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  }
  return out;
}

function cgroupMemory(id: string): { totalMiB: number; rssMiB: number; cacheMiB: number } | null {
  const parent = server.env.SANDBOXD_CGROUP_PARENT!;
  const v1 = `/sys/fs/cgroup/memory/${parent}/${id}`;
  const v2 = `/sys/fs/cgroup/${parent}/${id}`;
  const mib = (n: number) => Math.round((n / 1048576) * 10) / 10;
  if (existsSync(`${v1}/memory.usage_in_bytes`)) {
    const stat = Object.fromEntries(readFileSync(`${v1}/memory.stat`, 'utf8').trim().split('\n').map((l) => l.split(' ') as [string, string]));
    return { totalMiB: mib(Number(readFileSync(`${v1}/memory.usage_in_bytes`, 'utf8'))), rssMiB: mib(Number(stat.total_rss)), cacheMiB: mib(Number(stat.total_cache)) };
  }
  if (existsSync(`${v2}/memory.current`)) {
    const stat = Object.fromEntries(readFileSync(`${v2}/memory.stat`, 'utf8').trim().split('\n').map((l) => l.split(' ') as [string, string]));
    return { totalMiB: mib(Number(readFileSync(`${v2}/memory.current`, 'utf8'))), rssMiB: mib(Number(stat.anon)), cacheMiB: mib(Number(stat.file)) };
  }
  return null;
}

try {
  const firstCommand = async (sb: CreatedSandbox) => {
    const r = await agent(sb, 'POST', '/commands/run', { command: 'true' });
    if (r.status !== 200) throw new Error(`first command: ${r.status}`);
  };
  const desktopCreate = await createThen('desktop', CREATES, screenshotPng);
  const baseCreate = await createThen('base', CREATES, firstCommand);

  const sb = await createSandbox(server, { template_name: 'desktop', timeout_seconds: 900 });
  await screenshotPng(sb);
  // Idle: let the session settle before the memory is read.
  await sleep(10_000);
  const mem = cgroupMemory(sb.id);
  const procs = (await agent(sb, 'GET', '/desktop/debug/processes')).body.processes as Array<{ name: string; rss_kb: number }>;

  for (let i = 0; i < 5; i++) await screenshotPng(sb);
  const shots: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const t0 = performance.now();
    await screenshotPng(sb);
    shots.push(performance.now() - t0);
  }
  // The same capture by scrot alone, timed inside the sandbox (no request, no transfer).
  const script = `for i in $(seq ${SAMPLES}); do s=$(date +%s%N); scrot -o -z /tmp/bench.png; e=$(date +%s%N); echo $(( (e - s) / 1000 )); done`;
  const bare = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', script], env: { DISPLAY: ':0' }, timeout: 600 });
  const scrot = String(bare.body.stdout).trim().split('\n').map((us) => Number(us) / 1000);

  const moves: number[] = [];
  const health: number[] = [];
  for (let i = 0; i < SAMPLES + 10; i++) {
    let t0 = performance.now();
    const m = await agent(sb, 'POST', '/desktop/mouse/move', { x: 100 + (i % 500), y: 200 });
    if (m.status !== 200) throw new Error(`mouse move: ${m.status} ${JSON.stringify(m.body)}`);
    if (i >= 10) moves.push(performance.now() - t0);
    t0 = performance.now();
    await agent(sb, 'GET', '/health');
    if (i >= 10) health.push(performance.now() - t0);
  }
  const clicks: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const t0 = performance.now();
    await agent(sb, 'POST', '/desktop/mouse/click', { x: 600, y: 400 });
    clicks.push(performance.now() - t0);
  }
  await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);

  const goal = (ok: boolean) => (ok ? 'met' : 'MISSED');
  console.log(`desktop template, ${CREATES} creates each from the warm pool, ${SAMPLES} samples of each call`);
  console.log(row('create desktop → first screenshot', desktopCreate, baseCreate));
  console.log(row('create base → first command (baseline)', baseCreate));
  console.log(`  goal p50 ≤ 1.5 s: ${goal(summary(desktopCreate).p50 <= 1500)}`);
  console.log(row('GET /desktop/screenshot (PNG)', shots, scrot));
  console.log(row('scrot alone in the sandbox (baseline)', scrot));
  console.log(`  goal p50 ≤ 100 ms: ${goal(summary(shots).p50 <= 100)}`);
  console.log(row('POST /desktop/mouse/move', moves, health));
  console.log(row('POST /desktop/mouse/click', clicks, health));
  console.log(row('GET /health (baseline)', health));
  console.log(`  goal p50 ≤ 15 ms: move ${goal(summary(moves).p50 <= 15)}, click ${goal(summary(clicks).p50 <= 15)}`);
  if (mem) console.log(`idle desktop sandbox, cgroup memory: ${mem.totalMiB} MiB (rss ${mem.rssMiB}, page cache ${mem.cacheMiB}); goal ≤ 200 MiB: ${goal(mem.totalMiB <= 200)}`);
  const top = [...procs].sort((a, b) => b.rss_kb - a.rss_kb).slice(0, 8);
  console.log(`  largest processes (RSS, shared pages counted in each): ${top.map((p) => `${p.name} ${(p.rss_kb / 1024).toFixed(0)} MiB`).join(', ')}`);
} finally {
  await server.stop();
}
