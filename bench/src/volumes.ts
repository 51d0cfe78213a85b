// bench/volumes: volumes (issue 32) through a real daemon and real containers, each next to a
// baseline measured in the same run:
//
//   1. sequential write, then read, of 1 GiB inside a sandbox: on a volume mounted at /vol (its ext4
//      image, loop-mounted on the host once, bind-mounted idmapped into the sandbox) against the
//      sandbox's own disk (/root: overlayfs over its own ext4 image). dd with 1 MiB blocks, the write
//      with conv=fsync (on the disk, not in the page cache), the read after the host's page cache is
//      dropped; timed inside the sandbox (date +%s%N around dd). ROUNDS of each, alternated; the
//      figure is the ratio of the medians' throughputs. Goal ≥ 0.9×.
//   2. create p50 (POST /v1/sandboxes → 201, its agent answering) with one volume mounted against
//      without, alternated, on a daemon with its warm pool (the default: sandboxes with volumes are
//      pooled under a key that names them, so both are pool hits once the pool has seen both) and
//      on one without (both cold boots). Goal ≤ +5 ms.
//
// Usage (root, after npm run build): node bench/dist/volumes.js [ROUNDS=5]
import { execFileSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { agent, api, createSandbox, startServer, type CreatedSandbox, type TestServer } from '../../e2e/dist/harness.js';
import { fmt, row, summary } from './stats.js';

const ROUNDS = Number(process.argv[2] ?? 5);
if (!Number.isInteger(ROUNDS) || ROUNDS < 1) throw new Error(`ROUNDS must be a positive integer, got ${process.argv[2]}`);
const CREATES = 2 * ROUNDS;

async function sh(sb: CreatedSandbox, cmd: string): Promise<string> {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', cmd], timeout: 600 });
  if (r.status !== 200 || r.body.exit_code !== 0) throw new Error(`${cmd}: ${r.status} ${JSON.stringify(r.body)}`);
  return String(r.body.stdout);
}

/** Seconds dd took inside the sandbox, timed there. */
async function timedDd(sb: CreatedSandbox, dd: string): Promise<number> {
  const out = await sh(sb, `a=$(date +%s%N); ${dd} 2>/dev/null; b=$(date +%s%N); echo $((b-a))`);
  return Number(out.trim()) / 1e9;
}

const dropCaches = () => execFileSync('sh', ['-c', 'sync && echo 3 > /proc/sys/vm/drop_caches']);
const GIB = 1024 ** 3;

async function io(server: TestServer): Promise<void> {
  const made = await api(server, 'POST', '/v1/volumes', { name: 'bench-io', size_gb: 3 });
  if (made.status !== 201) throw new Error(`volume: ${made.status} ${JSON.stringify(made.body)}`);
  const sb = await createSandbox(server, { volumes: [{ name: 'bench-io', path: '/vol' }] });
  const targets = { volume: '/vol/bench.bin', 'own disk': '/root/bench.bin' } as const;
  const write: Record<string, number[]> = { volume: [], 'own disk': [] };
  const read: Record<string, number[]> = { volume: [], 'own disk': [] };
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? (['volume', 'own disk'] as const) : (['own disk', 'volume'] as const);
    for (const k of order) {
      const f = targets[k];
      await sh(sb, `rm -f ${f}`);
      dropCaches();
      write[k]!.push(await timedDd(sb, `dd if=/dev/zero of=${f} bs=1M count=1024 conv=fsync`));
      dropCaches();
      read[k]!.push(await timedDd(sb, `dd if=${f} of=/dev/null bs=1M`));
      await sh(sb, `rm -f ${f}`);
    }
  }
  const mibs = (s: number[]) => GIB / (1024 * 1024) / summary(s).p50;
  console.log('\n1 GiB sequential, MiB/s of the median (dd bs=1M; write conv=fsync; read after drop_caches)');
  for (const [what, m] of [['write', write], ['read', read]] as const) {
    const vol = mibs(m.volume!);
    const own = mibs(m['own disk']!);
    console.log(`  ${what.padEnd(6)} volume ${vol.toFixed(0).padStart(6)} MiB/s   own disk ${own.toFixed(0).padStart(6)} MiB/s   ratio ${(vol / own).toFixed(2)}x (goal >= 0.9x)   samples volume [${m.volume!.map((s) => s.toFixed(2)).join(' ')}] s, own [${m['own disk']!.map((s) => s.toFixed(2)).join(' ')}] s`);
  }
  await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  await api(server, 'DELETE', '/v1/volumes/bench-io');
}

async function creates(server: TestServer, label: string): Promise<{ with: number[]; without: number[] }> {
  const made = await api(server, 'POST', '/v1/volumes', { name: 'bench-create', size_gb: 1 });
  if (made.status !== 201) throw new Error(`volume: ${made.status} ${JSON.stringify(made.body)}`);
  const out = { with: [] as number[], without: [] as number[] };
  // One of each first, not counted: the daemon's first-boot costs, and the pool learns the key.
  for (const body of [{}, { volumes: [{ name: 'bench-create', path: '/data' }] }]) await api(server, 'DELETE', `/v1/sandboxes/${(await createSandbox(server, body)).id}`);
  for (let i = 0; i < CREATES; i++) {
    for (const kind of i % 2 === 0 ? (['without', 'with'] as const) : (['with', 'without'] as const)) {
      // Teardowns and refills of the last create settle first, so that neither kind pays for them.
      await new Promise((r) => setTimeout(r, 1500));
      const t0 = performance.now();
      const sb = await createSandbox(server, kind === 'with' ? { volumes: [{ name: 'bench-create', path: '/data' }] } : {});
      out[kind].push(performance.now() - t0);
      await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  }
  await api(server, 'DELETE', '/v1/volumes/bench-create');
  console.log(`\ncreate → 201 (agent answering), ${label}`);
  console.log(`  ${row('with one volume', out.with, out.without)}`);
  console.log(`  ${row('without', out.without)}`);
  console.log(`  difference of the medians: ${fmt(summary(out.with).p50 - summary(out.without).p50)}`);
  return out;
}

async function main(): Promise<void> {
  const cold = await startServer({ templates: ['base'], env: { SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0' } });
  try {
    await io(cold);
    const c = await creates(cold, 'no warm pool (both cold): goal with - without <= +5 ms');
    console.log(`  => ${(summary(c.with).p50 - summary(c.without).p50).toFixed(1)} ms`);
  } finally {
    await cold.stop();
  }
  const warm = await startServer({ templates: ['base'] });
  try {
    await creates(warm, 'with the warm pool (default): goal with - without <= +5 ms');
  } finally {
    await warm.stop();
  }
}

await main();
