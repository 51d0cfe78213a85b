// A drain drill on a cluster as on separate machines: PostgreSQL, `sandboxd control`, and two
// `sandboxd node` processes, each in a network namespace of its own. Node A holds a stopped, a
// paused and a running sandbox (files written in the first two) and a warm pool. `sandboxd nodes
// drain A` (through control's admin API) moves the stopped and the paused one to node B, which
// fetches their files from control as a layer; the stopped one starts there and the paused one
// resumes there, their files intact; the running one is reported and left on A, whose warm pool
// empties (no container left on A but the running one). Run again with --stop-running, the drain
// finishes: the last one moves stopped, and A holds nothing.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { agent, api, createSandbox, crunContainers, freePort, REPO_ROOT, startServer, stopAll, type CreatedSandbox, type TestServer } from './harness.js';
import { startNode, type TestNode } from './harness-node.js';
import { NODE_NETNS_RANGE } from './node-netns.js';

/** Heartbeats every 2 s: a node learns within that that it drains. */
const LEASE_SECONDS = 6;
const FETCHED_RE = /fetched layer ([0-9a-f]{12}) /g;

describe('a drain moves a node\'s stopped and paused sandboxes to another node and empties its warm pool', { timeout: 600_000 }, () => {
  let pg: TestPostgres | undefined;
  let dbUrl = '';
  let a: TestNode | undefined;
  let b: TestNode | undefined;
  let control: TestServer | undefined;
  const keys = testClusterKeyFiles();

  /** `sandboxd ARGS` as the operator runs it on control's machine (the database, control's port and key); not a spawnSync, which would hold the daemons' logs in their pipes. */
  const cli = (...args: string[]) =>
    new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args], {
        env: { ...process.env, SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_PORT: String(control!.port), SANDBOXD_BOOTSTRAP_API_KEY: control!.apiKey, SANDBOXD_DATA_DIR: control!.dataDir },
        timeout: 120_000,
      });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
      child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
      child.once('error', reject);
      child.once('close', (status) => resolve({ status, stdout, stderr }));
    });
  const sh = async (sb: CreatedSandbox, command: string) => {
    const r = await agent<{ stdout: string; stderr: string; exit_code: number }>(sb, 'POST', '/commands/run', { command });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.stdout;
  };
  const act = async (sb: CreatedSandbox, verb: string) => {
    const r = await api(control!, 'POST', `/v1/sandboxes/${sb.id}/${verb}`);
    assert.equal(r.status, 200, `${verb} ${sb.id}: ${JSON.stringify(r.body)}`);
  };
  const statusOf = async (sb: CreatedSandbox) => (await api<{ status: string }>(control!, 'GET', `/v1/sandboxes/${sb.id}`)).body.status;
  /** The sandboxes whose files the node holds (containers or not). */
  const disks = (n: TestNode) => (existsSync(join(n.dataDir, 'sandboxes')) ? readdirSync(join(n.dataDir, 'sandboxes')).filter((e) => /^sb[a-z0-9]+$/.test(e)).sort() : []);
  const until = async (what: string, ok: () => boolean | Promise<boolean>, ms = 20_000) => {
    for (const deadline = Date.now() + ms; !(await ok()); await new Promise((r) => setTimeout(r, 200))) {
      if (Date.now() > deadline) assert.fail(`${what}: not within ${ms / 1000} s\n--- node A:\n${readFileSync(a!.logFile, 'utf8').slice(-2000)}`);
    }
  };

  before(async () => {
    pg = await startPostgres({ clients: [NODE_NETNS_RANGE] });
    dbUrl = await pg.createDatabase();
    a = await startNode({ id: 'e2e-drain-a', verifyKey: keys.verifyPem, databaseUrl: dbUrl, netns: true, leaseSeconds: LEASE_SECONDS, env: { SANDBOXD_WARM_POOL_SIZE: '1' } });
    // Control on every address: the nodes reach it from their namespaces at the host's end of a
    // link, where they fetch the layers they lack (a moved sandbox's files among them).
    const port = await freePort();
    control = await startServer({
      command: 'control',
      templates: ['base'],
      port,
      env: {
        SANDBOXD_DATABASE_URL: dbUrl,
        SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile,
        SANDBOXD_HOST: '0.0.0.0',
        SANDBOXD_GATEWAY_BIND: '0.0.0.0',
        SANDBOXD_CONTROL_URL: `http://${a.netns!.hostAddress}:${port}`,
      },
    });
  });

  after(async () => {
    await stopAll(
      () => control?.stop(),
      () => a?.stop(),
      () => b?.stop(),
      () => pg?.stop(),
      () => keys.remove(),
    );
  });

  test('drain: stopped and paused move with their files, the running one is reported and left, the warm pool empties; again with --stop-running, the node is empty', async () => {
    // Node A is the cluster's only node: everything lands there.
    const stopped = await createSandbox(control!, { template_name: 'base' });
    const paused = await createSandbox(control!, { template_name: 'base' });
    const running = await createSandbox(control!, { template_name: 'base' });
    await sh(stopped, 'mkdir -p /workspace && echo "kept through the drain" > /workspace/drill.txt && rm -f /etc/motd');
    await sh(paused, 'echo "paused, then moved" > /root/drill.txt');
    await act(stopped, 'stop');
    await act(paused, 'pause');
    const ours = [stopped.id, paused.id, running.id];
    await until("node A's warm pool holding a ready sandbox", () => crunContainers(a!.dataDir).some((id) => !ours.includes(id)));

    b = await startNode({ id: 'e2e-drain-b', verifyKey: keys.verifyPem, databaseUrl: dbUrl, netns: true, leaseSeconds: LEASE_SECONDS });
    await until('node B registered', async () => {
      const r = await cli('nodes', 'list', '--json');
      return r.status === 0 && (JSON.parse(r.stdout) as Array<{ id: string; up: boolean }>).some((n) => n.id === b!.id && n.up);
    });
    // Control reads the registry every 2 s (placement/registered-nodes.ts).
    await new Promise((r) => setTimeout(r, 2500));

    const t0 = performance.now();
    const first = await cli('nodes', 'drain', a!.id, '--timeout', '0', '--json');
    const drainS = (performance.now() - t0) / 1000;
    assert.equal(first.status, 1, `still draining (one runs there): ${first.stderr}`);
    const r1 = JSON.parse(first.stdout) as {
      drained: boolean;
      moved: Array<{ id: string; status: string; node_id: string }>;
      failed: unknown[];
      running: Array<{ id: string; organization_id: string }>;
    };
    assert.deepEqual(
      r1.moved.map((m) => [m.id, m.status, m.node_id]).sort(),
      [
        [stopped.id, 'stopped', b!.id],
        [paused.id, 'paused', b!.id],
      ].sort(),
      first.stdout,
    );
    assert.deepEqual([r1.failed, r1.drained], [[], false]);
    assert.deepEqual(r1.running.map((x) => x.id), [running.id], 'the running one is reported');
    assert.equal(r1.running[0]!.organization_id, running.body.organization_id);
    assert.match(first.stderr, /moved 2 of 2; 1 running left/);

    // Node B fetched their files from control, as a layer each.
    const fetched = [...readFileSync(b!.logFile, 'utf8').matchAll(FETCHED_RE)].map((m) => m[1]!);
    const moveLayers = readdirSync(join(control!.dataDir, 'snapshot-layers')).filter((n) => /^[0-9a-f]{64}$/.test(n));
    assert.equal(moveLayers.length, 2, 'one layer per moved sandbox');
    for (const l of moveLayers) assert.ok(fetched.includes(l.slice(0, 12)), `node B fetched ${l.slice(0, 12)} (it fetched ${fetched.join(', ')})\n--- node B:\n${readFileSync(b!.logFile, 'utf8').slice(-3000)}`);

    // They are B's now, in their states: the stopped one starts there, the paused one resumes there.
    assert.deepEqual([await statusOf(stopped), await statusOf(paused)], ['stopped', 'paused']);
    assert.ok(crunContainers(b!.dataDir).includes(paused.id), 'the paused one is paused on node B');
    await act(stopped, 'start');
    await act(paused, 'resume');
    assert.ok(crunContainers(b!.dataDir).includes(stopped.id), 'the stopped one runs on node B');
    assert.equal(await sh(stopped, 'cat /workspace/drill.txt; test -e /etc/motd && echo motd || echo no-motd'), 'kept through the drain\nno-motd\n');
    assert.equal(await sh(paused, 'cat /root/drill.txt'), 'paused, then moved\n');
    assert.equal((await sh(running, 'echo still here')).trim(), 'still here');

    // Node A: its heartbeat said it drains, and its pool emptied; the moved ones' disks are gone.
    await until("node A's warm pool emptied", () => JSON.stringify(crunContainers(a!.dataDir)) === JSON.stringify([running.id]));
    assert.deepEqual(disks(a!), [running.id]);
    assert.match(readFileSync(a!.logFile, 'utf8'), /the node is draining: its warm pool empties/);
    await new Promise((r) => setTimeout(r, 2 * 2000));
    assert.deepEqual(crunContainers(a!.dataDir), [running.id], 'and it boots none again');

    // Run again, with the running one stopped first: nothing is left on A.
    const second = await cli('nodes', 'drain', a!.id, '--stop-running', '--json');
    assert.equal(second.status, 0, `${second.stdout}\n${second.stderr}`);
    const r2 = JSON.parse(second.stdout) as { drained: boolean; moved: Array<{ id: string; status: string; node_id: string }> };
    assert.deepEqual([r2.drained, r2.moved.map((m) => [m.id, m.status, m.node_id])], [true, [[running.id, 'stopped', b!.id]]]);
    assert.equal(await statusOf(running), 'stopped');
    await until('node A empty', () => crunContainers(a!.dataDir).length === 0 && disks(a!).length === 0);
    const listed = JSON.parse((await cli('nodes', 'list', '--json')).stdout) as Array<{ id: string; status: string; committed: { active: number; stopped: number } }>;
    const rowA = listed.find((n) => n.id === a!.id)!;
    assert.deepEqual([rowA.status, rowA.committed.active + rowA.committed.stopped], ['draining', 0]);
    process.stdout.write(`# figure: a drain that moved 2 sandboxes (a stopped and a paused one) to another node: ${drainS.toFixed(1)} s\n`);
  });
});
