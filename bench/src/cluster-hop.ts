// bench/cluster-hop: what the node hop costs a call to an agent. One sandbox, `/commands/run` of
// `true` over keep-alive connections (as the gateway pools them), first straight to the agent's unix
// socket (what the all-in-one daemon does: the baseline), then through the node API's relay on
// loopback (what control or an edge does for a sandbox on a node: RemoteNode.dialAgent), then
// with a new relayed connection for every call (a pool's cold start). Same run, same sandbox.
// Usage (root, after npm run build): node bench/dist/cluster-hop.js [N=300]
import { Agent, request, type ClientRequestArgs } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { performance } from 'node:perf_hooks';
import { nodeApi } from '../../packages/server/dist/node/node-api.js';
import { RemoteNode } from '../../packages/server/dist/node/remote-node.js';
import { nodeOver } from '../../packages/server/dist/testing/fake-node.js';
import { testClusterKeys } from '../../packages/server/dist/testing/cluster-keys.js';
import { baseLayer } from '../../packages/server/dist/testing/fixtures.js';
import { withBenchRuntime } from './bench-runtime.js';
import { row } from './stats.js';

const N = Number(process.argv[2] ?? 300);

class Dialing extends Agent {
  constructor(
    private readonly dial: () => Promise<Socket>,
    keepAlive: boolean,
  ) {
    super({ keepAlive, maxSockets: 1 });
  }
  override createConnection(_o: ClientRequestArgs, cb?: (err: Error | null, s: Duplex) => void): undefined {
    this.dial().then(
      (s) => cb!(null, s),
      (e: Error) => cb!(e, undefined as unknown as Duplex),
    );
    return undefined;
  }
}

function run(agent: Agent): Promise<number> {
  const body = JSON.stringify({ command: 'true' });
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({ agent, method: 'POST', path: '/commands/run', headers: { host: 'agent', 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(performance.now() - t0) : reject(new Error(`answered ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function samples(agent: Agent): Promise<number[]> {
  for (let i = 0; i < 20; i++) await run(agent);
  const out: number[] = [];
  for (let i = 0; i < N; i++) out.push(await run(agent));
  agent.destroy();
  return out;
}

await withBenchRuntime(`hop${process.pid % 1000}`, `10.93.${process.pid % 250}.0/24`, async ({ rt }) => {
  const { signer, verifier } = testClusterKeys();
  const app = nodeApi({ node: nodeOver(rt, 'bench-node'), byReference: false, auth: verifier });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const remote = new RemoteNode({ id: 'bench-node', url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, auth: signer });
  const id = `hop${process.pid % 10000}`;
  await rt.create({ id, lowerDirs: [(await baseLayer()).path], resources: { vcpu: 1, memoryMb: 512, diskGb: 1, pidsMax: 256 }, internetAccess: false, hostname: id, env: { PATH: '/usr/bin:/bin' } });
  try {
    const straight = await samples(new Dialing(() => rt.dialAgent(id), true));
    const relayed = await samples(new Dialing(() => remote.dialAgent(id), true));
    const fresh = await samples(new Dialing(() => remote.dialAgent(id), false));
    console.log(`\nbench/cluster-hop on ${new Date().toISOString()} (N=${N}, /commands/run of \`true\`, one at a time)`);
    console.log(row('straight to the agent socket (baseline)', straight));
    console.log(row('through the node relay, keep-alive', relayed, straight));
    console.log(row('through the node relay, new each call', fresh, straight));
    const p50 = (a: number[]) => a.slice().sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
    console.log(`extra latency of the hop, p50: ${(p50(relayed) - p50(straight)).toFixed(2)} ms kept alive, ${(p50(fresh) - p50(straight)).toFixed(2)} ms with a new connection (goal ≤ 1 ms)`);
  } finally {
    await rt.destroy(id);
    await app.close();
  }
});
