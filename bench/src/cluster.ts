// bench/cluster: a cluster on this machine (PostgreSQL, NODES `sandboxd node` processes, `sandboxd
// control` and `sandboxd edge`, both in host mode on one domain) next to the all-in-one daemon
// (`sandboxd serve`, its default port mode) in the same run. Figures (issue 10's table):
//   - create → first command, p50, one at a time with the warm pools on (the cluster's: each node's,
//     with how many of control's creates a node's pool served ready): the all-in-one daemon
//     through its own gateway (the baseline); the same daemon on PostgreSQL; created through control
//     and run through control's gateway; created through control and run through the edge (the
//     issue's figure). Every first command goes on a new connection, by Host header, with one client;
//   - the edge hop: `/commands/run` of `true`, kept-alive connections, one sandbox: straight to its
//     agent's unix socket (the baseline), through its node's relay (what the edge dials), through
//     the edge, through control's gateway; the p50 difference edge − straight in ms; and, for
//     comparison, the all-in-one daemon's own gateway hop (a sandbox of its own: gateway − socket)
//     and the raw baseline of any hop here: a bare Node proxy in a process of its own
//     (bare-proxy.ts) in front of the same agent socket;
//   - a burst of BURST concurrent creates through control: success, and how they spread over the
//     nodes (each node's share against an even one);
//   - a node lost (kill -9): seconds until control's API answers 503 NODE_UNAVAILABLE for one of its
//     sandboxes, first at all (a refused connection, on one machine at once) and then because its
//     lease ran out (what a machine that is gone gets), and until `sandboxd nodes list` shows it not
//     up; as multiples of the lease (LEASE_SECONDS). The node is restarted after.
// Usage (root, after npm run build): node bench/dist/cluster.js [N=30] [BURST=100] [NODES=3] [HOPS=300]
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { Agent, request, type ClientRequestArgs } from 'node:http';
import type { Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import type { Duplex } from 'node:stream';
import { promisify } from 'node:util';
import { api, freePort, startServer, type TestServer } from '../../e2e/dist/harness.js';
import { startNode, type TestNode } from '../../e2e/dist/harness-node.js';
import { RemoteNode } from '../../packages/server/dist/node/remote-node.js';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres } from '../../packages/server/dist/testing/postgres.js';
import { percentile, row } from './stats.js';

const N = Number(process.argv[2] ?? 30);
const BURST = Number(process.argv[3] ?? 100);
const NODES = Number(process.argv[4] ?? 3);
const HOPS = Number(process.argv[5] ?? 300);
const LEASE_SECONDS = 3;
const DOMAIN = 'bench.test';
const LIMITS = { SANDBOXD_MAX_SANDBOXES: '0', SANDBOXD_MAX_TOTAL_MEMORY_MB: '0', SANDBOXD_MAX_TOTAL_DISK_GB: '0', SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '100000' };
const CREATE = { template_name: 'base', internet_access: false };
const RUN = { command: 'true' };
const p50 = (a: number[]) => percentile(a, 50);

/** Where a first command goes: a gateway's port on loopback and the Host it is asked for. */
interface Via {
  port: number;
  host: string;
}

/** One call to a gateway by Host header (host mode needs DNS otherwise); `agent` false: a new connection. */
function call(via: Via, token: string, path: string, body: unknown, agent: Agent | false = false): Promise<{ status: number; text: string }> {
  const data = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: via.port,
        method: 'POST',
        path,
        agent,
        headers: { host: via.host, authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.setTimeout(30_000, () => req.destroy(new Error('timed out')));
    req.end(data);
  });
}

/** A sandbox's public_host as a gateway port and Host header. */
function viaPublicHost(publicHost: string): Via {
  const u = new URL(publicHost);
  return { port: Number(u.port), host: u.host };
}

/** One create → first command: its whole time, and the create's and the first command's parts. */
interface Sample {
  ms: number;
  createMs: number;
  firstMs: number;
  id: string;
}

async function createAndRun(server: TestServer, firstVia: (id: string, publicHost: string) => Via): Promise<Sample> {
  const t0 = performance.now();
  const res = await api(server, 'POST', '/v1/sandboxes', CREATE);
  if (res.status !== 201) throw new Error(`create answered ${res.status} ${JSON.stringify(res.body)}`);
  const t1 = performance.now();
  const ran = await call(firstVia(res.body.id, res.body.public_host), res.body.auth_token, '/commands/run', RUN);
  if (ran.status !== 200) throw new Error(`first command answered ${ran.status} ${ran.text.slice(0, 300)}`);
  const t2 = performance.now();
  return { ms: t2 - t0, createMs: t1 - t0, firstMs: t2 - t1, id: res.body.id };
}

/** Control's creates of `base` so far, by source (a node's pool had one ready, or it booted). */
async function createsBySource(server: TestServer): Promise<{ warm: number; cold: number }> {
  const text = await (await fetch(`${server.baseUrl}/metrics`, { headers: { 'x-api-key': server.apiKey } })).text();
  const count = (source: string) => Number(new RegExp(`^sandboxd_sandbox_creates_total\\{template="base",source="${source}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  return { warm: count('warm_pool'), cold: count('cold') };
}

/** A series of create → first command, one at a time. */
interface Series {
  name: string;
  server: TestServer;
  firstVia: (id: string, publicHost: string) => Via;
  samples: Sample[];
}

/**
 * N + 5 creates of each series (the first 5 are not counted), taken in turn (in a rotating
 * order), so that the machine's other work (tests run beside) weighs on each alike; after each, a pause in which the warm pool
 * that served it refills, as between the creates of a client.
 */
async function interleaved(all: Series[]): Promise<void> {
  for (let i = 0; i < N + 5; i++) {
    // Each round starts with the next series: none always follows the same one.
    for (const s of [...all.slice(i % all.length), ...all.slice(0, i % all.length)]) {
      const x = await createAndRun(s.server, s.firstVia);
      if (i >= 5) s.samples.push(x);
      await api(s.server, 'DELETE', `/v1/sandboxes/${x.id}`);
      await new Promise((r) => setTimeout(r, 300));
    }
  }
}

/** An HTTP agent whose connections are opened by `dial` (as the gateway's DialAgent), kept alive. */
class Dialing extends Agent {
  constructor(private readonly dial: () => Promise<Socket>) {
    super({ keepAlive: true, maxSockets: 1 });
  }
  override createConnection(_o: ClientRequestArgs, cb?: (err: Error | null, s: Duplex) => void): undefined {
    this.dial().then(
      (s) => cb!(null, s),
      (e: Error) => cb!(e, undefined as unknown as Duplex),
    );
    return undefined;
  }
}

/** `/commands/run` straight to an agent, on `agent`'s connections (a unix socket, or a relayed one). */
function runOnAgent(agent: Agent, socketPath?: string): Promise<number> {
  const data = JSON.stringify(RUN);
  return new Promise((resolve, reject) => {
    const req = request({ agent, socketPath, method: 'POST', path: '/commands/run', headers: { host: 'agent', 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(data);
  });
}

/** One way to an agent: a pool of one kept-alive connection, and how a call goes on it. */
interface Hop {
  agent: Agent;
  send: (agent: Agent) => Promise<number>;
  samples: number[];
}

/**
 * `HOPS` timed calls each way (after 20 to warm up), one at a time, taking the ways in turn so that
 * the machine's other work weighs on each alike.
 */
async function hops(ways: Hop[]): Promise<void> {
  const one = async (w: Hop): Promise<number> => {
    const t0 = performance.now();
    const status = await w.send(w.agent);
    if (status !== 200) throw new Error(`a hop answered ${status}`);
    return performance.now() - t0;
  };
  try {
    for (let i = 0; i < 20 + HOPS; i++) {
      for (const w of ways) {
        const ms = await one(w);
        if (i >= 20) w.samples.push(ms);
      }
    }
  } finally {
    for (const w of ways) w.agent.destroy();
  }
}

/** The node whose data dir holds the sandbox's agent socket. */
function holderOf(nodes: TestNode[], id: string): TestNode {
  const n = nodes.find((x) => existsSync(join(x.dataDir, 'sandboxes', id, 'agent.sock')));
  if (!n) throw new Error(`no node holds sandbox ${id}`);
  return n;
}

const run = promisify(execFile);
async function nodesList(dbUrl: string): Promise<Array<{ id: string; up: boolean; committed: { active: number } }>> {
  const { stdout } = await run(process.execPath, ['packages/server/dist/cli.js', 'nodes', 'list', '--json'], { env: { ...process.env, SANDBOXD_DATABASE_URL: dbUrl }, encoding: 'utf8' });
  return JSON.parse(stdout) as Array<{ id: string; up: boolean; committed: { active: number } }>;
}

const pg = await startPostgres();
// Control and the edge sign with the private key; the nodes get the public key only.
const keys = testClusterKeyFiles();
const nodes: TestNode[] = [];
let control: TestServer | undefined;
let edge: TestServer | undefined;
let single: TestServer | undefined;
let singlePg: TestServer | undefined;
let bare: ChildProcess | undefined;
try {
  const dbUrl = await pg.createDatabase();
  for (let i = 0; i < NODES; i++) nodes.push(await startNode({ id: `bench-node-${i}`, verifyKey: keys.verifyPem, databaseUrl: dbUrl, leaseSeconds: LEASE_SECONDS }));
  const gw = { control: await freePort(), edge: await freePort() };
  const cluster = { SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile, SANDBOXD_GATEWAY_DOMAIN: DOMAIN };
  // The nodes share this machine's cores, and each reports them all: placement's default 16× of 2
  // cores per node holds fewer than a burst and the warm pool's refill (a real node has its own).
  control = await startServer({ command: 'control', templates: ['base'], env: { ...LIMITS, ...cluster, SANDBOXD_GATEWAY_PORT: String(gw.control), SANDBOXD_OVERCOMMIT_CPU: '64' } });
  edge = await startServer({ command: 'edge', env: { ...cluster, SANDBOXD_GATEWAY_PORT: String(gw.edge) }, readyTimeoutMs: 60_000 });
  single = await startServer({ templates: ['base'], env: LIMITS });
  // The same daemon on the cluster's PostgreSQL: what the store alone adds.
  singlePg = await startServer({ templates: ['base'], env: { ...LIMITS, SANDBOXD_DATABASE_URL: await pg.createDatabase() } });
  const onEdge = (id: string): Via => ({ port: gw.edge, host: `${id}.${DOMAIN}` });
  const own = (_id: string, publicHost: string) => viaPublicHost(publicHost);
  const [allInOne, onPostgres, throughControl, throughEdge] = [
    { name: 'all-in-one: create → first command (baseline)', server: single, firstVia: own, samples: [] },
    { name: 'all-in-one on PostgreSQL', server: singlePg, firstVia: own, samples: [] },
    { name: "control, first command via control's gateway", server: control, firstVia: own, samples: [] },
    { name: 'control, first command via the edge', server: control, firstVia: onEdge, samples: [] },
  ] as Series[];
  const sourcesBefore = await createsBySource(control);
  await interleaved([allInOne!, onPostgres!, throughControl!, throughEdge!]);
  const sourcesAfter = await createsBySource(control);
  const served = { warm: sourcesAfter.warm - sourcesBefore.warm, cold: sourcesAfter.cold - sourcesBefore.cold };
  // The edge hop, on one sandbox.
  const sb = (await api(control, 'POST', '/v1/sandboxes', CREATE)).body;
  const holder = holderOf(nodes, sb.id);
  const socketPath = join(holder.dataDir, 'sandboxes', sb.id, 'agent.sock');
  const remote = new RemoteNode({ id: holder.id, url: holder.url, auth: keys.signer });
  const keptAlive = () => new Agent({ keepAlive: true, maxSockets: 1 });
  const [straight, relayed, viaEdge, viaControl] = [
    { agent: keptAlive(), send: (a: Agent) => runOnAgent(a, socketPath), samples: [] },
    { agent: new Dialing(() => remote.dialAgent(sb.id)), send: (a: Agent) => runOnAgent(a), samples: [] },
    { agent: keptAlive(), send: async (a: Agent) => (await call(onEdge(sb.id), sb.auth_token, '/commands/run', RUN, a)).status, samples: [] },
    { agent: keptAlive(), send: async (a: Agent) => (await call(viaPublicHost(sb.public_host), sb.auth_token, '/commands/run', RUN, a)).status, samples: [] },
  ] as Hop[];
  // What a client of the all-in-one daemon pays for its gateway, on a sandbox of its own.
  const local = (await api(single, 'POST', '/v1/sandboxes', CREATE)).body;
  const viaSingle = { agent: keptAlive(), send: async (a: Agent) => (await call(viaPublicHost(local.public_host), local.auth_token, '/commands/run', RUN, a)).status, samples: [] } as Hop;
  const singleStraight = { agent: keptAlive(), send: (a: Agent) => runOnAgent(a, join(single!.dataDir, 'sandboxes', local.id, 'agent.sock')), samples: [] } as Hop;
  // What any proxy in a process of its own pays here, in front of the same socket.
  const barePort = await freePort();
  bare = spawn(process.execPath, [join(dirname(fileURLToPath(import.meta.url)), 'bare-proxy.js'), socketPath, String(barePort)], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    bare!.stdout!.once('data', () => resolve());
    bare!.once('exit', (code) => reject(new Error(`the bare proxy exited (${code})`)));
  });
  const viaBare = { agent: keptAlive(), send: async (a: Agent) => (await call({ port: barePort, host: 'agent' }, sb.auth_token, '/commands/run', RUN, a)).status, samples: [] } as Hop;
  await hops([straight!, relayed!, viaEdge!, viaControl!, singleStraight, viaSingle, viaBare]);
  bare.kill();
  bare = undefined;
  await api(single, 'DELETE', `/v1/sandboxes/${local.id}`);
  await singlePg.stop();
  singlePg = undefined;
  await single.stop();
  single = undefined;
  await api(control, 'DELETE', `/v1/sandboxes/${sb.id}`);

  const t0 = performance.now();
  const results = await Promise.allSettled(Array.from({ length: BURST }, () => createAndRun(control!, own)));
  const burstS = (performance.now() - t0) / 1000;
  const ok = results.filter((r) => r.status === 'fulfilled').length;
  const list = await nodesList(dbUrl);
  const even = ok / NODES;
  const spread = list.map((n) => `${n.id} ${n.committed.active} (${(((n.committed.active - even) / even) * 100).toFixed(0)} %)`);
  const worst = Math.max(...list.map((n) => Math.abs(n.committed.active - even) / even)) * 100;
  const why = new Map<string, number>();
  for (const r of results) if (r.status === 'rejected') why.set(String(r.reason).slice(0, 300), (why.get(String(r.reason).slice(0, 300)) ?? 0) + 1);
  for (const r of results) if (r.status === 'fulfilled') await api(control, 'DELETE', `/v1/sandboxes/${r.value.id}`);

  // A node lost: kill -9 the node of a sandbox, then watch control's API and the node list.
  const lostSb = (await api(control, 'POST', '/v1/sandboxes', CREATE)).body;
  const lostNode = holderOf(nodes, lostSb.id);
  const ports = () => api(control!, 'GET', `/v1/sandboxes/${lostSb.id}/ports`);
  if ((await ports()).status !== 200) throw new Error('the sandbox to lose does not answer before its node is killed');
  await lostNode.kill9();
  const k0 = performance.now();
  let firstUnavailable: number | undefined;
  let leaseUnavailable: number | undefined;
  let listedDown: number | undefined;
  const deadline = k0 + 10 * LEASE_SECONDS * 1000;
  const watchList = (async () => {
    while (listedDown === undefined && performance.now() < deadline) {
      const l = await nodesList(dbUrl);
      if (l.find((n) => n.id === lostNode.id)?.up === false) listedDown = (performance.now() - k0) / 1000;
      else await new Promise((r) => setTimeout(r, 50));
    }
  })();
  while (leaseUnavailable === undefined && performance.now() < deadline) {
    const r = await ports();
    const at = (performance.now() - k0) / 1000;
    if (r.status === 503 && r.body?.code === 'NODE_UNAVAILABLE') {
      firstUnavailable ??= at;
      // The lease's answer (cluster-runtime.ts holder) says the node is not answering; a refused connection, that it cannot be reached.
      if (/not answering/.test(String(r.body?.message))) leaseUnavailable = at;
    }
    if (leaseUnavailable === undefined) await new Promise((r) => setTimeout(r, 50));
  }
  await watchList;
  await lostNode.restart();
  for (let i = 0; i < 200 && (await ports()).status !== 200; i++) await new Promise((r) => setTimeout(r, 100));
  await api(control, 'DELETE', `/v1/sandboxes/${lostSb.id}`);

  const s = (x: number | undefined) => (x === undefined ? 'never (within 10 leases)' : `${x.toFixed(2)} s (${(x / LEASE_SECONDS).toFixed(2)}× the lease)`);
  console.log(`\nbench/cluster on ${new Date().toISOString()} (${NODES} nodes on this machine, N=${N}, burst ${BURST}, hops ${HOPS}, lease ${LEASE_SECONDS} s)`);
  const base = allInOne!.samples.map((x) => x.ms);
  for (const x of [allInOne!, onPostgres!, throughControl!, throughEdge!]) console.log(row(x.name, x.samples.map((y) => y.ms), x === allInOne ? undefined : base));
  for (const x of [allInOne!, onPostgres!, throughControl!, throughEdge!]) {
    console.log(`  ${x.name}: of which the create p50 ${p50(x.samples.map((y) => y.createMs)).toFixed(1)} ms, the first command p50 ${p50(x.samples.map((y) => y.firstMs)).toFixed(1)} ms`);
  }
  console.log(`create → first command through control + edge: ${(p50(throughEdge!.samples.map((y) => y.ms)) / p50(base)).toFixed(2)}× the all-in-one (goal ≤ 1.3×)`);
  console.log(`  control's creates in those series: ${served.warm} of ${served.warm + served.cold} served ready by a node's warm pool`);
  console.log(row('hop: straight to the agent socket (baseline)', straight!.samples));
  console.log(row('hop: through the node relay', relayed!.samples, straight!.samples));
  console.log(row('hop: through the edge', viaEdge!.samples, straight!.samples));
  console.log(row("hop: through control's gateway", viaControl!.samples, straight!.samples));
  console.log(row('hop: all-in-one, straight to its socket', singleStraight.samples, straight!.samples));
  console.log(row("hop: all-in-one, through its gateway", viaSingle.samples, straight!.samples));
  console.log(`extra latency of the edge hop, p50: ${(p50(viaEdge!.samples) - p50(straight!.samples)).toFixed(2)} ms (the node relay alone ${(p50(relayed!.samples) - p50(straight!.samples)).toFixed(2)} ms; goal ≤ 1 ms); over the all-in-one's own gateway hop ${(p50(viaEdge!.samples) - p50(straight!.samples) - (p50(viaSingle.samples) - p50(singleStraight.samples))).toFixed(2)} ms`);
  console.log(row('hop: a bare Node proxy process in front of the socket (raw baseline of any hop)', viaBare.samples, straight!.samples));
  const bareExtra = p50(viaBare.samples) - p50(straight!.samples);
  const edgeExtra = p50(viaEdge!.samples) - p50(straight!.samples);
  console.log(`a bare proxy process costs ${bareExtra.toFixed(2)} ms here; the edge hop ${edgeExtra.toFixed(2)} ms, ${(edgeExtra - bareExtra).toFixed(2)} ms over it (${(edgeExtra / bareExtra).toFixed(2)}×)`);
  console.log(`burst of ${BURST} through control: ${ok}/${BURST} served in ${burstS.toFixed(1)} s; spread ${spread.join(', ')}; worst ${worst.toFixed(0)} % from even (goal 100 % and ±20 %)`);
  for (const [reason, n] of why) console.log(`  failed ×${n}: ${reason}`);
  console.log(`node lost (kill -9): 503 NODE_UNAVAILABLE first after ${s(firstUnavailable)}; for its lease after ${s(leaseUnavailable)}; not up in nodes list after ${s(listedDown)} (goal ≤ 2× the lease)`);
} finally {
  bare?.kill();
  await edge?.stop();
  await single?.stop();
  await singlePg?.stop();
  await control?.stop();
  for (const n of nodes) await n.stop();
  await pg.stop();
  keys.remove();
}
