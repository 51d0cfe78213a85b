// bench/logging: what logging every request costs. Two daemons side by side, one logging each
// request at info (the default), one at warn (no request lines): /commands/run through the gateway
// and GET /v1/sandboxes/{id} on the API, sampled in alternation so that both see the same machine.
// Usage (root, after npm run build): node bench/dist/logging.js [N=300]
import { performance } from 'node:perf_hooks';
import { agent, api, createSandbox, startServer, type TestServer } from '../../e2e/dist/harness.js';
import { row, summary } from './stats.js';

const N = Number(process.argv[2] ?? 300);

async function main(): Promise<void> {
  const servers: TestServer[] = [];
  try {
    const logged = await startServer({ templates: ['base'], env: { SANDBOXD_LOG_LEVEL: 'info', SANDBOXD_LOG_FORMAT: 'json' } });
    servers.push(logged);
    const quiet = await startServer({ templates: ['base'], env: { SANDBOXD_LOG_LEVEL: 'warn', SANDBOXD_LOG_FORMAT: 'json' } });
    servers.push(quiet);
    const pair = await Promise.all(servers.map(async (s) => ({ s, sb: await createSandbox(s, { template_name: 'base', timeout_seconds: 3600, internet_access: false }) })));
    const cmd: number[][] = [[], []];
    const get: number[][] = [[], []];
    for (let i = 0; i < N + 20; i++) {
      for (const [k, { s, sb }] of pair.entries()) {
        let t0 = performance.now();
        const r = await agent(sb, 'POST', '/commands/run', { command: 'true' });
        if (r.status !== 200) throw new Error(`commands/run: ${r.status}`);
        if (i >= 20) cmd[k]!.push(performance.now() - t0);
        t0 = performance.now();
        if ((await api(s, 'GET', `/v1/sandboxes/${sb.id}`)).status !== 200) throw new Error('get failed');
        if (i >= 20) get[k]!.push(performance.now() - t0);
      }
    }
    console.log(`bench/logging on ${new Date().toISOString()} (N=${N}): each request logged at info vs no request lines (warn), same machine, alternating`);
    console.log(row('/commands/run true, logged', cmd[0]!, cmd[1]!));
    console.log(row('/commands/run true, not logged', cmd[1]!));
    console.log(row('GET /v1/sandboxes/{id}, logged', get[0]!, get[1]!));
    console.log(row('GET /v1/sandboxes/{id}, not logged', get[1]!));
    const cost = (a: number[], b: number[]) => ((summary(a).p50 / summary(b).p50 - 1) * 100).toFixed(1);
    console.log(`logging cost per request (p50): /commands/run ${cost(cmd[0]!, cmd[1]!)} %, API GET ${cost(get[0]!, get[1]!)} % (goal ≤ 5 % on /commands/run)`);
    for (const { s, sb } of pair) await api(s, 'DELETE', `/v1/sandboxes/${sb.id}`);
  } finally {
    for (const s of servers) await s.stop();
  }
}

await main();
