// bench/auto-resume: the first request to a sandbox that sleeps (paused, auto_resume) against the
// same request to it running, in the same run: what waking costs the request that wakes it.
// Goal (issue 12): p50 extra latency ≤ 10 ms.
// Usage (root, after npm run build): node bench/dist/auto-resume.js [SAMPLES=30]
import { performance } from 'node:perf_hooks';
import { agent, api, createSandbox, startServer } from '../../e2e/dist/harness.js';
import { row, summary } from './stats.js';

const SAMPLES = Number(process.argv[2] ?? 30);

const server = await startServer({ templates: ['base'] });
try {
  const sb = await createSandbox(server, { template_name: 'base', auto_resume: true, internet_access: false });
  const timed = async () => {
    const t0 = performance.now();
    const r = await agent(sb, 'GET', '/health');
    const ms = performance.now() - t0;
    if (r.status !== 200) throw new Error(`/health: ${r.status} ${JSON.stringify(r.body)}`);
    return ms;
  };
  for (let i = 0; i < 5; i++) await timed();
  const running: number[] = [];
  const waking: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    running.push(await timed());
    const p = await api(server, 'POST', `/v1/sandboxes/${sb.id}/pause`);
    if (p.status !== 200) throw new Error(`pause: ${p.status} ${JSON.stringify(p.body)}`);
    await new Promise((r) => setTimeout(r, 200));
    waking.push(await timed());
    await new Promise((r) => setTimeout(r, 100));
  }
  const extra = summary(waking).p50 - summary(running).p50;
  console.log(`first request to a sleeping sandbox (auto_resume) vs the same to it running, GET /health through the gateway`);
  console.log(row('running (baseline)', running));
  console.log(row('sleeping: wakes it, then answered', waking, running));
  console.log(`extra p50: ${extra.toFixed(1)} ms (goal ≤ 10 ms: ${extra <= 10 ? 'met' : 'MISSED'})`);
  await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
} finally {
  await server.stop();
}
