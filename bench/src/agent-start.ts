// bench/agent-start: where a cold boot's time goes, straight on the runtime (no API, no pool). Cold
// boots one at a time with the real agent, then with the smallest Node agent there is (an HTTP
// server answering `{}` on the socket the runtime passes in), next to a bare `crun run -d` of the
// same rootfs, all in the same run. The second row is the floor of any agent written for Node:
// what is left above it is the agent's own start.
// Usage (root, after npm run build): node bench/dist/agent-start.js [N=20]
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { TEST_DATA_DIR } from '../../e2e/dist/harness.js';
import { loadConfig } from '../../packages/server/dist/config/index.js';
import { agentJson, waitForAgent } from '../../packages/server/dist/node/agent-client.js';
import { baseLayer } from '../../packages/server/dist/testing/fixtures.js';
import { bareCrunSamples } from './baselines.js';
import { withBenchRuntime } from './bench-runtime.js';
import { fmt, row, summary } from './stats.js';

const N = Number(process.argv[2] ?? 20);

const MINIMAL_AGENT = `require('node:http').createServer((req, res) => res.end('{}')).listen({ fd: Number(process.env.SANDBOXD_AGENT_LISTEN_FD) });\n`;

interface Boots {
  steps: Map<string, number[]>;
  answer: number[];
  total: number[];
  firstCommand: number[];
  privateMiB: number[];
}

/** Private dirty memory of the agent (the init's child), MiB. */
function agentPrivateMiB(initPid: number): number {
  const child = readFileSync(`/proc/${initPid}/task/${initPid}/children`, 'utf8').trim().split(/\s+/)[0];
  const m = /Private_Dirty:\s+(\d+)/.exec(readFileSync(`/proc/${child}/smaps_rollup`, 'utf8'));
  return Number(m?.[1] ?? NaN) / 1024;
}

async function coldBoots(label: string, agentBundlePath: string, layer: string): Promise<Boots> {
  const tag = `as${process.pid % 10000}${label}`;
  return withBenchRuntime(
    tag,
    `10.97.${(process.pid + label.length) % 250}.0/24`,
    async ({ rt, steps }) => {
      const out: Boots = { steps, answer: [], total: [], firstCommand: [], privateMiB: [] };
      for (let i = 0; i < N; i++) {
        const id = `sb${tag}x${i}`;
        const t0 = performance.now();
        await rt.create({ id, lowerDirs: [layer], resources: { vcpu: 1, memoryMb: 512, diskGb: 1, pidsMax: 512 }, internetAccess: false, hostname: id, env: { SANDBOX_ID: id, PATH: '/usr/bin:/bin' } });
        const a0 = performance.now();
        // The boot probe a cold create waits for (the first responder answers it while Node starts)...
        await waitForAgent(rt.agentSocket(id), 30_000, true);
        out.answer.push(performance.now() - a0);
        out.total.push(performance.now() - t0);
        // ...then a command sent at once: answered by Node.
        const r = await agentJson(rt.agentSocket(id), 'POST', '/commands/run', { command: 'true' }, 10_000);
        if (r.status !== 200) throw new Error(`${label}: /commands/run answered ${r.status}`);
        out.firstCommand.push(performance.now() - t0);
        const pid = await rt.initPid(id);
        if (pid) out.privateMiB.push(agentPrivateMiB(pid));
        await rt.destroy(id);
      }
      return out;
    },
    agentBundlePath,
  );
}

async function main(): Promise<void> {
  const layer = (await baseLayer()).path;
  const minimalDir = join(TEST_DATA_DIR, `bench-minimal-agent-${process.pid}`);
  mkdirSync(minimalDir, { recursive: true, mode: 0o755 });
  writeFileSync(join(minimalDir, 'agent.cjs'), MINIMAL_AGENT, { mode: 0o644 });
  try {
    const real = await coldBoots('a', loadConfig({ SANDBOXD_DATA_DIR: TEST_DATA_DIR }).agentBundlePath, layer);
    const floor = await coldBoots('m', join(minimalDir, 'agent.cjs'), layer);
    const bare = bareCrunSamples(layer, N).run;
    const med = (b: Boots, step: string) => fmt(summary(b.steps.get(step) ?? []).p50);
    console.log(`\nbench/agent-start on ${new Date().toISOString()} (N=${N}, cold boots one at a time, straight on the runtime)`);
    console.log(row('bare crun run -d (baseline)', bare));
    for (const [name, b] of [
      ['real agent', real],
      ['minimal Node HTTP agent', floor],
    ] as const) {
      console.log(row(`${name}: create → boot probe answered`, b.total, bare));
      if (b === real) console.log(row(`${name}: create → first /commands/run true`, b.firstCommand, bare));
      console.log(`  runtime steps p50: prepare ${med(b, 'prepare')} (disk ${med(b, 'disk')}), config ${med(b, 'config')}, crun run ${med(b, 'crun-run')}; then the probe ${fmt(summary(b.answer).p50)}`);
      const mem = summary(b.privateMiB).p50;
      console.log(`  agent private memory ${mem.toFixed(1)} MiB`);
    }
    console.log(`the floor (a Node agent answering the probe itself) is ${(summary(floor.total).p50 / summary(bare).p50).toFixed(2)}x bare crun run; goal ≤ 2x for the real agent`);
  } finally {
    rmSync(minimalDir, { recursive: true, force: true });
  }
}

await main();
