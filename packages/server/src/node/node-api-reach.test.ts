// Root test with real containers: code in a sandbox with internet access tries to reach a node API,
// its own node's (on loopback, on the host's addresses, on the bridge's gateway) and another
// node's (a listener in a network namespace of its own at a private address, as a second machine
// on the cluster's private network would be). Every attempt must fail, while the host reaches all
// of them and the sandbox reaches what it may (the apt mirror).
import assert from 'node:assert/strict';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { networkInterfaces } from 'node:os';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { baseLayer } from '../testing/fixtures.js';
import { aptReleaseUrl, assertNoLeaks, createTestRuntime, sh, testSpec, type TestRuntime } from '../testing/runtime-fixtures.js';
import { nodeOver } from '../testing/fake-node.js';
import { nodeApi } from './node-api.js';

const tag = String(process.pid % 100000);
const PEER_NS = `sbdred${tag}`;
const HOST_VETH = `srh${tag}`;
const PEER_VETH = `srp${tag}`;
const PEER_HOST_IP = '172.31.254.1';
const PEER_IP = '172.31.254.2';
const PEER_PORT = 7070;

/** curl's HTTP status inside the sandbox (000 when nothing answered). */
async function curlIn(t: TestRuntime, id: string, url: string, timeoutS = 3): Promise<string> {
  const r = await sh(t.rt, id, `curl -sS -o /dev/null -m ${timeoutS} -w '%{http_code}' '${url}'`, true);
  return r.stdout.trim();
}

describe('a sandbox reaches no node API, on its own node or another', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let lower: string;
  const apps: FastifyInstance[] = [];
  let loopPort = 0;
  let anyPort = 0;
  let peer: ChildProcess | undefined;
  const { verifier } = testClusterKeys();

  before(async () => {
    lower = (await baseLayer()).path;
    t = await createTestRuntime();
    for (const host of ['127.0.0.1', '0.0.0.0']) {
      const app = nodeApi({ node: nodeOver(t.rt, 'node-a'), byReference: false, auth: verifier });
      await app.listen({ host, port: 0 });
      apps.push(app);
    }
    loopPort = (apps[0]!.server.address() as AddressInfo).port;
    anyPort = (apps[1]!.server.address() as AddressInfo).port;
    // "Another node": a machine on a private network the host routes to.
    execFileSync('ip', ['netns', 'add', PEER_NS]);
    execFileSync('ip', ['link', 'add', HOST_VETH, 'type', 'veth', 'peer', 'name', PEER_VETH, 'netns', PEER_NS]);
    execFileSync('ip', ['addr', 'add', `${PEER_HOST_IP}/30`, 'dev', HOST_VETH]);
    execFileSync('ip', ['link', 'set', HOST_VETH, 'up']);
    execFileSync('ip', ['-n', PEER_NS, 'addr', 'add', `${PEER_IP}/30`, 'dev', PEER_VETH]);
    execFileSync('ip', ['-n', PEER_NS, 'link', 'set', PEER_VETH, 'up']);
    execFileSync('ip', ['-n', PEER_NS, 'link', 'set', 'lo', 'up']);
    execFileSync('ip', ['-n', PEER_NS, 'route', 'add', 'default', 'via', PEER_HOST_IP]);
    peer = spawn('ip', ['netns', 'exec', PEER_NS, process.execPath, '-e', `require('node:http').createServer((q, s) => { s.statusCode = 401; s.end(); }).listen(${PEER_PORT}, '${PEER_IP}')`], { stdio: 'ignore' });
    for (let i = 0; i < 50; i++) {
      if (await fetch(`http://${PEER_IP}:${PEER_PORT}/`).then(() => true, () => false)) break;
      await sleep(100);
    }
    await t.rt.create(testSpec('reach1', [lower], { internetAccess: true }));
    await t.rt.create(testSpec('reach2', [lower], { internetAccess: false }));
  });

  after(async () => {
    for (const app of apps) await app.close();
    peer?.kill();
    try {
      execFileSync('ip', ['netns', 'del', PEER_NS], { stdio: 'ignore' }); // takes the veth pair with it
    } catch {
      /* not made */
    }
    if (t) {
      for (const id of await t.rt.list()) await t.rt.destroy(id);
      await assertNoLeaks(t.rt);
      await t.teardown();
    }
  });

  test('with internet: loopback, every host address, the bridge gateway and another node are all out of reach', async () => {
    const hostAddrs = Object.values(networkInterfaces())
      .flat()
      .filter((a) => a && a.family === 'IPv4' && !a.internal && a.address !== PEER_HOST_IP)
      .map((a) => a!.address);
    const targets = [`http://127.0.0.1:${loopPort}/node/v1/health`, ...[...hostAddrs, PEER_HOST_IP].map((a) => `http://${a}:${anyPort}/node/v1/health`), `http://${PEER_IP}:${PEER_PORT}/node/v1/health`];
    assert.ok(hostAddrs.some((a) => a.startsWith(t.rt.subnetCidr.split('.').slice(0, 3).join('.'))), 'the bridge gateway is among the targets');
    // Sanity: each target answers the host (401 without a token), and the sandbox has a network.
    for (const url of targets) assert.equal((await fetch(url)).status, 401, `the host reaches ${url}`);
    assert.equal(await curlIn(t, 'reach1', aptReleaseUrl(), 20), '200', 'the sandbox reaches the apt mirror');
    for (const url of targets) assert.equal(await curlIn(t, 'reach1', url), '000', `the sandbox must not reach ${url}`);
    // The agent relay too: a raw CONNECT to the host's addresses gets nowhere.
    const r = await sh(t.rt, 'reach1', `timeout 3 bash -c 'exec 3<>/dev/tcp/${PEER_HOST_IP}/${anyPort}; printf "CONNECT reach1.agent:1 HTTP/1.1\\r\\n\\r\\n" >&3; head -c 12 <&3'`, true);
    assert.notEqual(r.code, 0);
    assert.equal(r.stdout, '');
  });

  test('without internet: loopback is its own; nothing of the host answers', async () => {
    assert.equal(await curlIn(t, 'reach2', `http://127.0.0.1:${loopPort}/node/v1/health`), '000');
    assert.equal(await curlIn(t, 'reach2', `http://${PEER_IP}:${PEER_PORT}/`), '000');
  });
});
