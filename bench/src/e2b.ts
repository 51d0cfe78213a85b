// bench/e2b: E2B's unmodified clients (`e2b`, `@e2b/code-interpreter`) against sandboxd, next to
// our own SDK doing the same work on the same daemon in the same run (calls interleaved):
//   1. create → first commands.run('true') answered (E2B's control plane + Connect vs our API + /commands/run)
//   2. commands.run('true') in a running sandbox (Connect's process.Process/Start vs /commands/run)
//   3. runCode('1') in a warm context (E2B's /execute vs ours), the same sandbox for both
//   4. host memory of an idle sandbox (its memory cgroup): created through E2B's API vs ours, and
//      before/after the first E2B data-plane call (E2B's protocol is the daemon's: the sandbox
//      keeps only its processes' state).
// Usage (root, after npm run build): node bench/dist/e2b.js [CREATES=20] [RUNS=200] [IDLE=5]
import { existsSync, readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { performance } from 'node:perf_hooks';
import { Sandbox as E2bSandbox } from 'e2b';
import { Sandbox as E2bCodeSandbox } from '@e2b/code-interpreter';
import { Sandbox } from '@sandboxd/sdk';
import { api, startServer, type TestServer } from '../../e2e/dist/harness.js';
import { row, summary } from './stats.js';

const CREATES = Number(process.argv[2] ?? 20);
const RUNS = Number(process.argv[3] ?? 200);
const IDLE = Number(process.argv[4] ?? 5);
const MiB = 2 ** 20;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** The sandbox's memory cgroup: usage (with page cache) and rss (anonymous memory), MiB. */
function cgroupMemory(server: TestServer, id: string): { usage: number; rss: number } {
  const dir = [`/sys/fs/cgroup/memory/${server.env.SANDBOXD_CGROUP_PARENT}/${id}`, `/sys/fs/cgroup/${server.env.SANDBOXD_CGROUP_PARENT}/${id}`].find((d) => existsSync(d));
  if (!dir) throw new Error(`no memory cgroup for ${id} under ${server.env.SANDBOXD_CGROUP_PARENT}`);
  const stat = readFileSync(`${dir}/memory.stat`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(stat)?.[1] ?? NaN);
  if (existsSync(`${dir}/memory.usage_in_bytes`)) {
    return { usage: Number(readFileSync(`${dir}/memory.usage_in_bytes`, 'utf8')) / MiB, rss: (field('total_rss') || field('rss')) / MiB };
  }
  return { usage: Number(readFileSync(`${dir}/memory.current`, 'utf8')) / MiB, rss: field('anon') / MiB };
}

const median = (xs: number[]) => summary(xs).p50;

/** One POST on a kept-alive connection, read to its end (the wire alone: no client library). */
function rawPost(agent: Agent, url: string, headers: Record<string, string>, body: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { ...headers, 'content-length': String(body.length) }, agent }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`${url}: ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** A Connect streaming request's body: one enveloped JSON message. */
function connectEnvelope(msg: unknown): Buffer {
  const payload = Buffer.from(JSON.stringify(msg));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}
const mib = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(2)} MiB`;

async function main(): Promise<void> {
  const server = await startServer({ env: { SANDBOXD_REGISTRY_URL: 'none' }, templates: ['base', 'code-interpreter'] });
  const ours = { apiKey: server.apiKey, baseUrl: server.baseUrl };
  const made: string[] = [];
  try {
    const key = await api(server, 'POST', '/v1/admin/keys', { org: 'default', name: 'bench-e2b', format: 'e2b' });
    if (key.status !== 201) throw new Error(`e2b key: ${key.status} ${JSON.stringify(key.body)}`);
    process.env.E2B_API_URL = `${server.baseUrl}/e2b`;
    process.env.E2B_SANDBOX_URL = `${server.baseUrl}/e2b/sandbox`;
    process.env.E2B_API_KEY = key.body.secret;
    process.env.E2B_DOMAIN = 'invalid';

    // 1. create → first command, interleaved (each sandbox deleted after, untimed). Its parts too:
    //    the create alone, the first call alone, and a second call.
    const first = { e2b: [] as number[], ours: [] as number[], e2bCreate: [] as number[], oursCreate: [] as number[], e2bRun1: [] as number[], e2bRun2: [] as number[], oursRun1: [] as number[] };
    for (let i = 0; i < CREATES + 2; i++) {
      // The first two warm both paths up. Each create starts on a quiet daemon: the warm pool's
      // refill after the previous create (a boot, ~70 ms of CPU) must not land on one side only.
      await sleep(400);
      const t0 = performance.now();
      const e = await E2bSandbox.create('base', { timeoutMs: 300_000 });
      const t1 = performance.now();
      await e.commands.run('true');
      const t2 = performance.now();
      await e.commands.run('true');
      const t3 = performance.now();
      await api(server, 'DELETE', `/v1/sandboxes/${e.sandboxId}`);
      await sleep(400);
      const u0 = performance.now();
      const s = await Sandbox.create({ ...ours, template: 'base', timeoutSeconds: 300 });
      const u1 = performance.now();
      const r = await s.commands.run('true');
      const u2 = performance.now();
      if (r.exitCode !== 0) throw new Error(`our first command: ${JSON.stringify(r)}`);
      await api(server, 'DELETE', `/v1/sandboxes/${s.id}`);
      if (i >= 2) {
        first.e2b.push(t2 - t0);
        first.e2bCreate.push(t1 - t0);
        first.e2bRun1.push(t2 - t1);
        first.e2bRun2.push(t3 - t2);
        first.ours.push(u2 - u0);
        first.oursCreate.push(u1 - u0);
        first.oursRun1.push(u2 - u1);
      }
    }

    // 2. commands.run('true') in one running sandbox, both clients on it, interleaved.
    const sb = await Sandbox.create({ ...ours, template: 'base', timeoutSeconds: 1800 });
    made.push(sb.id);
    const e2bSb = await E2bSandbox.connect(sb.id);
    const runE2b: number[] = [];
    const runOurs: number[] = [];
    // The same work on both paths: E2B's client runs every command as `/bin/bash -l -c <cmd>` (a
    // login shell) and as `user` by default; ours execs `true` directly, as root.
    const runE2bRoot: number[] = [];
    const runOursLogin: number[] = [];
    for (let i = 0; i < RUNS + 10; i++) {
      const te = await timed(() => e2bSb.commands.run('true'));
      const to = await timed(() => sb.commands.run('true'));
      const tr = await timed(() => e2bSb.commands.run('true', { user: 'root' }));
      const tl = await timed(() => sb.commands.run('/bin/bash -l -c true'));
      if (i >= 10) {
        runE2b.push(te);
        runOurs.push(to);
        runE2bRoot.push(tr);
        runOursLogin.push(tl);
      }
    }

    // 2b. The wire alone, no client library: the same command (`/bin/bash -l -c true` as root) as a
    //     Connect Start through E2B_SANDBOX_URL and as a /commands/run to the sandbox's route.
    const token = (await api(server, 'POST', `/v1/sandboxes/${sb.id}/token/refresh`, {})).body.auth_token as string;
    const publicHost = (await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).body.public_host as string;
    const keep = new Agent({ keepAlive: true });
    const wireConnect: number[] = [];
    const wireOurs: number[] = [];
    const startBody = connectEnvelope({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'true'] } });
    const runBody = Buffer.from(JSON.stringify({ command: '/bin/bash', args: ['-l', '-c', 'true'] }));
    const e2bHeaders = {
      'content-type': 'application/connect+json',
      'connect-protocol-version': '1',
      'e2b-sandbox-id': sb.id,
      'e2b-sandbox-port': '49983',
      'x-access-token': token,
      authorization: `Basic ${Buffer.from('root:').toString('base64')}`,
    };
    for (let i = 0; i < RUNS + 10; i++) {
      const tc = await timed(() => rawPost(keep, `${server.baseUrl}/e2b/sandbox/process.Process/Start`, e2bHeaders, startBody));
      const to = await timed(() => rawPost(keep, `${publicHost}/commands/run`, { 'content-type': 'application/json', authorization: `Bearer ${token}` }, runBody));
      if (i >= 10) {
        wireConnect.push(tc);
        wireOurs.push(to);
      }
    }
    keep.destroy();

    // 3. runCode('1') in a warm context: the default python context, one code-interpreter sandbox.
    const ci = await E2bCodeSandbox.create({ timeoutMs: 1_800_000 });
    made.push(ci.sandboxId);
    const ciOurs = await Sandbox.connect(ci.sandboxId, ours);
    const codeE2b: number[] = [];
    const codeOurs: number[] = [];
    for (let i = 0; i < RUNS + 10; i++) {
      const te = await timed(async () => {
        const r = await ci.runCode('1');
        if (r.text !== '1') throw new Error(`e2b runCode: ${JSON.stringify(r.toJSON())}`);
      });
      const to = await timed(async () => {
        const r = await ciOurs.runCode('1');
        if (!r.success || r.result !== '1') throw new Error(`our runCode: ${JSON.stringify(r)}`);
      });
      if (i >= 10) {
        codeE2b.push(te);
        codeOurs.push(to);
      }
    }
    await api(server, 'DELETE', `/v1/sandboxes/${ci.sandboxId}`);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);

    // 4. Idle memory: IDLE sandboxes through our API and IDLE through E2B's, all idle 5 s; then one
    //    E2B commands.run('true') in each of ours, idle 5 s again (the same sandboxes, paired).
    const idleOurs: string[] = [];
    const idleE2b: string[] = [];
    for (let i = 0; i < IDLE; i++) {
      const s = await Sandbox.create({ ...ours, template: 'base', timeoutSeconds: 1800 });
      await s.commands.run('true');
      idleOurs.push(s.id);
      const e = await E2bSandbox.create('base', { timeoutMs: 1_800_000 });
      idleE2b.push(e.sandboxId);
    }
    made.push(...idleOurs, ...idleE2b);
    await sleep(5000);
    const before = idleOurs.map((id) => cgroupMemory(server, id));
    const viaE2bApi = idleE2b.map((id) => cgroupMemory(server, id));
    for (const id of idleOurs) await (await E2bSandbox.connect(id)).commands.run('true');
    await sleep(5000);
    const afterCall = idleOurs.map((id) => cgroupMemory(server, id));
    const deltaUsage = afterCall.map((a, i) => a.usage - before[i]!.usage);
    const deltaRss = afterCall.map((a, i) => a.rss - before[i]!.rss);

    console.log(`bench/e2b: ${CREATES} creates, ${RUNS} runs, ${IDLE} idle sandboxes per side; p50s, interleaved, same daemon`);
    console.log(row('create → first run (e2b client)', first.e2b, first.ours));
    console.log(row('create → first run (our SDK)', first.ours));
    console.log(row('  create alone (e2b client)', first.e2bCreate, first.oursCreate));
    console.log(row('  create alone (our SDK)', first.oursCreate));
    console.log(row('  first run (e2b client)', first.e2bRun1, first.oursRun1));
    console.log(row('  first run (our SDK)', first.oursRun1));
    console.log(row('  second run (e2b client)', first.e2bRun2));
    console.log(row("commands.run('true') via Connect", runE2b, runOurs));
    console.log(row("commands.run('true') via our SDK", runOurs));
    console.log(row('  the same work: Connect, root', runE2bRoot, runOursLogin));
    console.log(row("  ours: run /bin/bash -l -c true", runOursLogin));
    console.log(row('  the wire alone: Connect Start', wireConnect, wireOurs));
    console.log(row('  the wire alone: /commands/run', wireOurs));
    console.log(row("runCode('1') via @e2b/code-interp.", codeE2b, codeOurs));
    console.log(row("runCode('1') via our SDK", codeOurs));
    console.log(
      `idle sandbox memory (cgroup, median of ${IDLE}): created through our API ${median(before.map((m) => m.usage)).toFixed(2)} MiB (rss ${median(before.map((m) => m.rss)).toFixed(2)}),` +
        ` through E2B's ${median(viaE2bApi.map((m) => m.usage)).toFixed(2)} MiB (rss ${median(viaE2bApi.map((m) => m.rss)).toFixed(2)});` +
        ` after its first E2B call: ${mib(median(deltaUsage))} usage, ${mib(median(deltaRss))} rss (per-sandbox deltas ${deltaUsage.map((d) => d.toFixed(1)).join(', ')})`,
    );
    const ratio = (a: number[], b: number[]) => median(a) / median(b);
    const createDiff = median(viaE2bApi.map((m) => m.usage)) - median(before.map((m) => m.usage));
    console.log(
      `goals: create → first run ≤ 1.3x (${ratio(first.e2b, first.ours).toFixed(2)}x); commands.run ≤ 1.2x (${ratio(runE2b, runOurs).toFixed(2)}x; the same work ${ratio(runE2bRoot, runOursLogin).toFixed(2)}x, on the wire alone ${ratio(wireConnect, wireOurs).toFixed(2)}x);` +
        ` runCode ≤ 1.2x (${ratio(codeE2b, codeOurs).toFixed(2)}x); idle memory unchanged ±0.5 MiB (E2B-created vs ours ${mib(createDiff)})`,
    );
  } finally {
    for (const id of made) await api(server, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
    await server.stop();
  }
}

await main();
