// bench/disk-admission: create p50 with the host disk admission on (the default) over the same
// daemon with it off (SANDBOXD_DISK_ADMISSION=off), both alive at once, creates interleaved one by
// one so that both see the same machine; ALIVE sandboxes kept in each (the admission reads their
// disks' blocks).
// Usage (root, after npm run build): node bench/dist/disk-admission.js [N=40] [ALIVE=20]
import { performance } from 'node:perf_hooks';
import { api, startServer, type TestServer } from '../../e2e/dist/harness.js';
import { summary } from './stats.js';

const N = Number(process.argv[2] ?? 40);
const ALIVE = Number(process.argv[3] ?? 20);

async function create(server: TestServer): Promise<[number, string]> {
  const t0 = performance.now();
  const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false, timeout_seconds: 900 });
  const ms = performance.now() - t0;
  if (res.status !== 201) throw new Error(`create: ${res.status} ${JSON.stringify(res.body)}`);
  return [ms, res.body.id as string];
}

async function main(): Promise<void> {
  const env = { SANDBOXD_MAX_SANDBOXES: '0', SANDBOXD_MAX_TOTAL_MEMORY_MB: '0', SANDBOXD_MAX_TOTAL_DISK_GB: '0' };
  // (The test harness turns the admission off for test daemons: on here, explicitly.)
  const on = await startServer({ templates: ['base'], env: { ...env, SANDBOXD_DISK_ADMISSION: 'on' } });
  const off = await startServer({ templates: ['base'], env: { ...env, SANDBOXD_DISK_ADMISSION: 'off' } });
  try {
    for (const s of [on, off]) for (let i = 0; i < ALIVE; i++) await create(s);
    const ms: Record<'on' | 'off', number[]> = { on: [], off: [] };
    for (let i = 0; i < N; i++) {
      // Alternate which goes first; a steady pace lets each warm pool refill.
      for (const [name, s] of i % 2 ? ([['off', off], ['on', on]] as const) : ([['on', on], ['off', off]] as const)) {
        await new Promise((r) => setTimeout(r, 150));
        const [t, id] = await create(s);
        ms[name].push(t);
        await api(s, 'DELETE', `/v1/sandboxes/${id}`);
      }
    }
    const a = summary(ms.on);
    const b = summary(ms.off);
    console.log(`create p50 with ${ALIVE} alive: admission on ${a.p50.toFixed(1)} ms, off ${b.p50.toFixed(1)} ms; ratio ${(a.p50 / b.p50).toFixed(3)}× (p95 ${a.p95.toFixed(1)} / ${b.p95.toFixed(1)} ms, n=${a.n})`);
  } finally {
    await Promise.allSettled([on.stop(), off.stop()]);
  }
}

await main();
