// `sandboxd node` as the process an operator runs: its runtime served over the node API, driven
// from here as control drives it (RemoteNode), through a kill -9 and a restart of the node.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { basename, dirname, join } from 'node:path';
import type { Duplex } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { CrunRuntime } from '../../packages/server/dist/runtime/index.js';
import { RemoteNode } from '../../packages/server/dist/node/remote-node.js';
import type { LayerSource } from '../../packages/server/dist/runtime/types.js';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { baseLayer } from '../../packages/server/dist/testing/fixtures.js';
import { freePort, REPO_ROOT, TEST_DATA_DIR } from './harness.js';

/** This test is control: it signs with the private key; the node reads the public key's file only. */
const keys = testClusterKeyFiles();
const tag = `${process.pid % 1000}`;

/** One JSON request to an agent over a connection the node relayed. */
function agentCall(stream: Duplex, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const req = request({ createConnection: () => stream, method, path, headers: { host: 'agent', ...(text ? { 'content-type': 'application/json' } : {}) } }, (res) => {
      let out = '';
      res.setEncoding('utf8').on('data', (c: string) => (out += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: out ? JSON.parse(out) : undefined }));
    });
    req.on('error', reject);
    req.end(text);
  });
}

describe('sandboxd node: a machine of a cluster, driven over the network', { timeout: 600_000 }, () => {
  const dataDir = join(TEST_DATA_DIR, `node-${tag}`);
  let port: number;
  let child: ChildProcess | undefined;
  let remote: RemoteNode;
  let lower: string;
  const env = () => ({
    ...(process.env as Record<string, string>),
    SANDBOXD_DATA_DIR: dataDir,
    SANDBOXD_LAYERS_DIR: join(TEST_DATA_DIR, 'layers'),
    SANDBOXD_CGROUP_PARENT: `sandboxd-testnode${tag}`,
    SANDBOXD_BRIDGE: `sbnode${tag}`,
    SANDBOXD_SUBNET: `10.94.${(process.pid % 200) + 1}.0/24`,
    SANDBOXD_NODE_ID: `node-${tag}`,
    SANDBOXD_NODE_LISTEN: `127.0.0.1:${port}`,
    SANDBOXD_CLUSTER_VERIFY_KEY_FILE: keys.verifyKeyFile,
  });
  const launch = async () => {
    const out = createWriteStream(join(dataDir, 'node.log'), { flags: 'a' });
    child = spawn(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'node'], { env: env(), stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.pipe(out);
    child.stderr!.pipe(out);
    for (let i = 0; i < 600; i++) {
      if (child.exitCode !== null) throw new Error(`sandboxd node exited during start; see ${dataDir}/node.log`);
      try {
        await remote.ping();
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    throw new Error('sandboxd node did not answer');
  };
  const exit = (signal: NodeJS.Signals) =>
    new Promise<number | null>((res) => {
      if (!child || child.exitCode !== null || child.signalCode !== null) return res(child?.exitCode ?? null);
      child.once('exit', (code) => res(code));
      child.kill(signal);
    });

  before(async () => {
    mkdirSync(dataDir, { recursive: true });
    lower = (await baseLayer()).path;
    port = await freePort();
    // The node takes layers by reference; it has this one already (the suite's shared layers
    // directory), so the reference is never fetched (e2e/cluster-layers fetches for real).
    const present: LayerSource = {
      refs: async (ids) => ids.map((id) => ({ id, digest: `sha256:${'0'.repeat(64)}`, bytes: 4096, url: 'http://127.0.0.1:9/unused', token: 'unused' })),
    };
    remote = new RemoteNode({ id: `node-${tag}`, url: `http://127.0.0.1:${port}`, auth: keys.signer, layers: present });
    await launch();
  });

  after(async () => {
    await exit('SIGKILL');
    // What the node made on this host goes with its own runtime's teardown.
    const e = env();
    const rt = new CrunRuntime({ dataDir, agentBundlePath: join(REPO_ROOT, 'packages/agent/bundle/agent.cjs'), cgroupParent: e.SANDBOXD_CGROUP_PARENT, bridgeName: e.SANDBOXD_BRIDGE, subnetCidr: e.SANDBOXD_SUBNET });
    for (const id of await rt.list()) await rt.destroy(id);
    await rt.teardownHost();
    rmSync(dataDir, { recursive: true, force: true });
    keys.remove();
  });

  test('take, run a command through the relay, survive a kill -9 of the node, destroy', async () => {
    const spec = { id: '', lowerDirs: [lower], layerIds: [basename(dirname(lower))], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 256 }, internetAccess: true, hostname: '', env: {} };
    const { id } = await remote.take({ spec, poolId: 'base', label: 'base', env: { FROM: 'control' }, egress: null });
    const ran = await agentCall(await remote.dialAgent(id), 'POST', '/commands/run', { command: 'echo hello from $(hostname) $FROM; echo note > /tmp/kept' });
    assert.equal(ran.status, 200);
    assert.match(ran.body.stdout, new RegExp(`hello from sandbox-${id.slice(2, 10)} control`));

    // The node dies; its sandbox does not. A new node process serves it again.
    assert.equal(await exit('SIGKILL'), null);
    await assert.rejects(remote.status(id), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE');
    await launch();
    assert.equal(await remote.status(id), 'running');
    const again = await agentCall(await remote.dialAgent(id), 'POST', '/commands/run', { command: 'cat /tmp/kept' });
    assert.equal(again.body.stdout.trim(), 'note', 'the same sandbox, its processes and files as they were');

    await remote.destroy(id);
    assert.equal(await remote.status(id), 'missing');
    // What is left is the node's warm pool, booted ahead for the key asked.
    for (const left of await remote.list()) assert.notEqual(left, id);
  });

  test('SIGTERM ends the node cleanly within 10 s, though control holds its event stream open', async () => {
    const unwatch = remote.watchOom(() => undefined);
    try {
      await new Promise((r) => setTimeout(r, 500));
      const t0 = Date.now();
      assert.equal(await exit('SIGTERM'), 0);
      assert.ok(Date.now() - t0 < 10_000, `exited after ${Date.now() - t0} ms`);
    } finally {
      unwatch();
    }
  });
});
