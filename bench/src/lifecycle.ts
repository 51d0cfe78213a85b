// bench/lifecycle: create → agent-ready, pause, resume, delete through the real API, next to a bare
// `crun run -d` of the same rootfs measured in the same run; and idle host memory per sandbox.
// Usage (root, after npm run build): node bench/dist/lifecycle.js [N=30] [BURST=20] [DENSITY=50]
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { agent, api, startServer } from '../../e2e/dist/harness.js';
import { baseLayer } from '../../packages/server/dist/testing/fixtures.js';
import { bareCrunSamples } from './baselines.js';
import { row, summary } from './stats.js';

const N = Number(process.argv[2] ?? 30);
const BURST = Number(process.argv[3] ?? 20);
const DENSITY = Number(process.argv[4] ?? 50);

function memAvailableKiB(): number {
  const m = /MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'));
  return Number(m![1]);
}

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const v = await fn();
  return [performance.now() - t0, v];
}

/**
 * Sequential creates (each then deleted) on a daemon without a warm pool: every create boots. Also
 * create → its first `/commands/run true` answered through the gateway, sent the instant the
 * create answers: what a user waits for (the create may answer while the agent's Node starts).
 */
async function coldCreates(n: number): Promise<{ create: number[]; firstCommand: number[] }> {
  const cold = await startServer({ templates: ['base'], env: { SANDBOXD_WARM_POOL_SIZE: '0' } });
  try {
    const out = { create: [] as number[], firstCommand: [] as number[] };
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      const res = await api(cold, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false });
      if (res.status !== 201) throw new Error(`cold create: ${res.status} ${JSON.stringify(res.body)}`);
      out.create.push(performance.now() - t0);
      const run = await agent({ publicHost: res.body.public_host, authToken: res.body.auth_token }, 'POST', '/commands/run', { command: 'true' });
      if (run.status !== 200 || run.body.exit_code !== 0) throw new Error(`first command: ${run.status} ${JSON.stringify(run.body)}`);
      out.firstCommand.push(performance.now() - t0);
      await api(cold, 'DELETE', `/v1/sandboxes/${res.body.id}`);
    }
    return out;
  } finally {
    await cold.stop();
  }
}

async function main(): Promise<void> {
  const cold = await coldCreates(N);
  const coldMs = cold.create;
  // The density phase commits more memory than a small host has (idle sandboxes use ~10 MiB of their
  // 512 MB limit) and may hold more sandboxes than the default quota: it measures the runtime.
  const server = await startServer({ templates: ['base'], env: { SANDBOXD_MAX_TOTAL_MEMORY_MB: '0', SANDBOXD_MAX_SANDBOXES: '0' } });
  try {
    const layerDir = (await baseLayer()).path;

    const create: number[] = [];
    const pause: number[] = [];
    const resume: number[] = [];
    const del: number[] = [];
    for (let i = 0; i < N; i++) {
      // Sandboxes are created at a steady pace (as a client would), letting the warm pool refill.
      await new Promise((r) => setTimeout(r, 150));
      const [ms, res] = await timed(() => api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false }));
      if (res.status !== 201) throw new Error(`create: ${res.status} ${JSON.stringify(res.body)}`);
      create.push(ms);
      const id = res.body.id;
      pause.push((await timed(() => api(server, 'POST', `/v1/sandboxes/${id}/pause`)))[0]);
      resume.push((await timed(() => api(server, 'POST', `/v1/sandboxes/${id}/resume`)))[0]);
      del.push((await timed(() => api(server, 'DELETE', `/v1/sandboxes/${id}`)))[0]);
    }
    const net: number[] = [];
    for (let i = 0; i < Math.min(N, 10); i++) {
      await new Promise((r) => setTimeout(r, 150));
      const [ms, res] = await timed(() => api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: true }));
      net.push(ms);
      await api(server, 'DELETE', `/v1/sandboxes/${res.body.id}`);
    }

    const burst = await Promise.all(
      Array.from({ length: BURST }, () => timed(() => api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false }))),
    );
    const burstMs = burst.map(([ms]) => ms);
    for (const [, res] of burst) if (res.status === 201) await api(server, 'DELETE', `/v1/sandboxes/${res.body.id}`);

    const bare = bareCrunSamples(layerDir, N);

    // Idle memory: MemAvailable drop over DENSITY idle sandboxes (page cache dropped before both reads).
    spawnSync('sh', ['-c', 'sync; echo 3 > /proc/sys/vm/drop_caches']);
    const memBefore = memAvailableKiB();
    const ids: string[] = [];
    for (let i = 0; i < DENSITY; i++) {
      const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false });
      if (res.status === 201) ids.push(res.body.id);
    }
    await new Promise((r) => setTimeout(r, 2000));
    spawnSync('sh', ['-c', 'sync; echo 3 > /proc/sys/vm/drop_caches']);
    const memAfter = memAvailableKiB();
    for (const id of ids) await api(server, 'DELETE', `/v1/sandboxes/${id}`);

    console.log(`\nbench/lifecycle on ${new Date().toISOString()} (N=${N}, burst=${BURST}, density=${DENSITY})`);
    console.log(row('create → agent ready (warm pool)', create, bare.run));
    console.log(row('create → agent ready (cold boot)', coldMs, bare.run));
    console.log(row('cold create → first /commands/run true', cold.firstCommand, bare.run));
    console.log(row('create → agent ready (internet)', net, bare.run));
    console.log(row(`burst of ${BURST} concurrent creates`, burstMs, bare.run));
    console.log(row('pause', pause));
    console.log(row('resume', resume));
    console.log(row('delete', del, bare.del));
    console.log(row('bare crun run -d (baseline)', bare.run));
    console.log(row('bare crun delete -f (baseline)', bare.del));
    const perSandboxMiB = (memBefore - memAfter) / 1024 / Math.max(1, ids.length);
    console.log(`idle host memory per sandbox: ${perSandboxMiB.toFixed(1)} MiB (MemAvailable drop over ${ids.length} sandboxes)`);
    const s = summary(create);
    console.log(`targets: create p50 ≤ 60 ms (warm ${s.p50.toFixed(1)}, cold ${summary(coldMs).p50.toFixed(1)}), ≤ 2.5x bare (warm ${(s.p50 / summary(bare.run).p50).toFixed(2)}x, cold ${(summary(coldMs).p50 / summary(bare.run).p50).toFixed(2)}x); pause/resume p50 ≤ 10 ms (${summary(pause).p50.toFixed(1)}/${summary(resume).p50.toFixed(1)}); ≤ 12 MiB/sandbox (${perSandboxMiB.toFixed(1)})`);
  } finally {
    await server.stop();
  }
}

await main();
