// A cluster as on separate machines: three `sandboxd node` processes, each in a network namespace of
// its own (its own address, bridge, subnet, cgroup parent and data dir), PostgreSQL and `sandboxd
// control` on the host. Control places sandboxes on the nodes and serves them through its gateway
// across the namespaces; a sandbox with internet access reaches outside its node (the host's apt
// mirror) and no role's API on any node: no node API (its own or another's), not control's API or
// gateway, not PostgreSQL, though its node's namespace reaches every one of them.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Sandbox } from '@sandboxd/sdk';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { aptReleaseUrl } from '../../packages/server/dist/testing/runtime-fixtures.js';
import { clientFor } from './sdk-support.js';
import { agent, api, createSandbox, crunContainers, REPO_ROOT, startServer, type CreatedSandbox, type TestServer } from './harness.js';
import { startNode, type TestNode } from './harness-node.js';
import { NODE_NETNS_RANGE } from './node-netns.js';

const IDS = ['e2e-ns-node-a', 'e2e-ns-node-b', 'e2e-ns-node-c'];

/** Runs a shell script in a sandbox through control's gateway; its stdout. */
async function inSandbox(sb: CreatedSandbox, command: string, timeoutS = 60): Promise<string> {
  const r = await agent<{ stdout: string; stderr: string; exit_code: number }>(sb, 'POST', '/commands/run', { command, timeout: timeoutS });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.stdout;
}

/**
 * A bash script that tries a TCP connection to every `address:port` at once (3 s each) and prints
 * `open` or `closed` for each: a connection made is reachable, whatever the service answers.
 */
function probeScript(targets: string[]): string {
  const one = (t: string) => {
    const [a, p] = t.split(':');
    return `(timeout 3 bash -c 'exec 3<>/dev/tcp/${a}/${p}' 2>/dev/null && echo "open ${t}" || echo "closed ${t}") &`;
  };
  return `${targets.map(one).join('\n')}\nwait\n`;
}

function parseProbe(out: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const line of out.split('\n').filter(Boolean)) {
    const [state, target] = line.split(' ');
    m.set(target!, state!);
  }
  return m;
}

/** The same probe from a node's namespace (not from a sandbox): the paths exist. */
function probeFromNode(n: TestNode, targets: string[]): Promise<Map<string, string>> {
  return new Promise((resolve, reject) => {
    const child = spawn('nsenter', [`--net=/run/netns/${n.netns!.name}`, 'bash', '-c', probeScript(targets)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    child.once('error', reject);
    child.once('close', () => resolve(parseProbe(out)));
  });
}

describe('a cluster of three nodes, each in a network namespace of its own', { timeout: 900_000 }, () => {
  let pg: TestPostgres | undefined;
  let dbUrl: string;
  const nodes: TestNode[] = [];
  let control: TestServer | undefined;
  const keys = testClusterKeyFiles();

  const nodesList = () => {
    const r = spawnSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'nodes', 'list', '--json'], { env: { ...process.env, SANDBOXD_DATABASE_URL: dbUrl }, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout) as Array<{ id: string; url: string; up: boolean }>;
  };
  /** The node whose runtime holds sandbox `id`. */
  const holderOf = (id: string) => nodes.find((n) => crunContainers(n.dataDir).includes(id));

  before(async () => {
    pg = await startPostgres({ clients: [NODE_NETNS_RANGE] });
    dbUrl = await pg.createDatabase();
    // One at a time: each start claims a slot and sets up its host side.
    for (const id of IDS) nodes.push(await startNode({ id, verifyKey: keys.verifyPem, databaseUrl: dbUrl, netns: true }));
    control = await startServer({
      command: 'control',
      templates: ['base'],
      // On every address, as in a deployment (the manifests): from the nodes' namespaces control's
      // API and gateway are reachable at the host's addresses, which the sandboxes must not be.
      env: { SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile, SANDBOXD_HOST: '0.0.0.0', SANDBOXD_GATEWAY_BIND: '0.0.0.0' },
    });
  });

  after(async () => {
    // Each part is stopped even when another fails. A namespaced node's stop fails when anything of
    // its namespace, link, rule, mounts or cgroup parent is left (checked while its slot is its own).
    const errors: unknown[] = [];
    const attempt = async (fn: () => Promise<void>) => fn().catch((err: unknown) => errors.push(err));
    await attempt(async () => control?.stop());
    for (const n of nodes) await attempt(() => n.stop());
    await attempt(async () => pg?.stop());
    keys.remove();
    for (const n of nodes) if (existsSync(n.dataDir)) errors.push(new Error(`node ${n.id} left its data dir ${n.dataDir}`));
    if (errors.length > 0) throw new AggregateError(errors, errors.map(String).join('\n'));
  });

  test('each node has its own namespace, address, bridge, subnet, cgroup parent and data dir, and registers its own URL', () => {
    const distinct = (f: (n: TestNode) => string) => assert.equal(new Set(nodes.map(f)).size, nodes.length);
    distinct((n) => n.netns!.name);
    distinct((n) => n.netns!.address);
    distinct((n) => n.env.SANDBOXD_BRIDGE!);
    distinct((n) => n.env.SANDBOXD_SUBNET!);
    distinct((n) => n.env.SANDBOXD_CGROUP_PARENT!);
    distinct((n) => n.dataDir);
    assert.deepEqual(
      nodesList().map((r) => [r.id, r.url, r.up]),
      nodes.map((n) => [n.id, `http://${n.netns!.address}:7070`, true]),
    );
    for (const n of nodes) {
      const inside = (argv: string[]) => spawnSync('nsenter', [`--net=/run/netns/${n.netns!.name}`, ...argv], { encoding: 'utf8' });
      // The node's bridge, with its subnet's gateway, and its nftables table are in its namespace.
      const gateway = n.env.SANDBOXD_SUBNET!.replace(/\.0\/16$/, '.1');
      assert.match(inside(['ip', '-4', '-o', 'addr', 'show', 'dev', n.env.SANDBOXD_BRIDGE!]).stdout, new RegExp(`inet ${gateway.replace(/\./g, '\\.')}/16`));
      assert.equal(inside(['nft', 'list', 'table', 'inet', `sandboxd_${n.env.SANDBOXD_BRIDGE}`]).status, 0, `${n.id}'s table is inside its namespace`);
      // It listens on its own address, not on the host's loopback.
      assert.match(inside(['ss', '-Htln']).stdout, new RegExp(`${n.netns!.address.replace(/\./g, '\\.')}:7070\\b`));
    }
  });

  test('creates land on all three nodes and run commands through control, with the API, the gateway and the SDK', async () => {
    const sbs: CreatedSandbox[] = [];
    try {
      for (let i = 0; i < 6; i++) sbs.push(await createSandbox(control!, { template_name: 'base' }));
      const held = new Map<string, number>();
      for (const sb of sbs) {
        assert.equal((await inSandbox(sb, 'echo "$((6 * 7))"')).trim(), '42');
        const n = holderOf(sb.id);
        assert.ok(n, `a node holds ${sb.id}`);
        held.set(n.id, (held.get(n.id) ?? 0) + 1);
      }
      assert.deepEqual([...held.keys()].sort(), [...IDS].sort(), `every node holds some: ${JSON.stringify([...held])}`);

      const ours = await Sandbox.create({ client: clientFor(control!), template: 'base', envVars: { GREETING: 'across namespaces' } });
      try {
        assert.equal((await ours.commands.run('echo "$GREETING"')).stdout, 'across namespaces\n');
        await ours.files.write('/tmp/f.txt', 'written');
        assert.equal(await ours.files.read('/tmp/f.txt'), 'written');
      } finally {
        await ours.kill();
      }
    } finally {
      for (const sb of sbs) assert.equal((await api(control!, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    }
  });

  test("a sandbox with internet access reaches outside its node, and no role's API on any node", async () => {
    // One sandbox on each node.
    const byNode = new Map<string, CreatedSandbox>();
    const made: CreatedSandbox[] = [];
    try {
      for (let i = 0; i < 12 && byNode.size < nodes.length; i++) {
        const sb = await createSandbox(control!, { template_name: 'base', internet_access: true });
        made.push(sb);
        const n = holderOf(sb.id);
        if (n && !byNode.has(n.id)) byNode.set(n.id, sb);
      }
      assert.equal(byNode.size, nodes.length, 'a sandbox on each node');

      const pgPort = new URL(dbUrl).port;
      const controlPorts = [String(control!.port), new URL(made[0]!.publicHost).port];
      // The host's addresses: its own (on its default route's interface) and every node's link's end.
      const defaultDev = /\bdev (\S+)/.exec(spawnSync('ip', ['-4', 'route', 'show', 'default'], { encoding: 'utf8' }).stdout)?.[1];
      const hostAddresses = [
        ...(networkInterfaces()[defaultDev ?? ''] ?? []).filter((a) => a.family === 'IPv4').map((a) => a.address),
        ...nodes.map((n) => n.netns!.hostAddress),
      ];
      const targets = [
        ...nodes.map((n) => `${n.netns!.address}:7070`),
        ...hostAddresses.flatMap((a) => [...controlPorts, pgPort].map((p) => `${a}:${p}`)),
      ];

      const release = aptReleaseUrl();
      await Promise.all(
        nodes.map(async (n) => {
          const sb = byNode.get(n.id)!;
          // Out through its node's NAT and the host's.
          const status = (await inSandbox(sb, `curl -sS -o /dev/null -m 15 -w '%{http_code}' '${release}'`)).trim();
          assert.equal(status, '200', `from ${n.id}'s sandbox, ${release}`);
          const fromNode = await probeFromNode(n, targets);
          const fromSandbox = parseProbe(await inSandbox(sb, probeScript(targets)));
          for (const t of targets) {
            assert.equal(fromNode.get(t), 'open', `${n.id}'s namespace reaches ${t}`);
            assert.equal(fromSandbox.get(t), 'closed', `${n.id}'s sandbox does not reach ${t}`);
          }
        }),
      );
    } finally {
      for (const sb of made) await api(control!, 'DELETE', `/v1/sandboxes/${sb.id}`);
    }
  });
});
