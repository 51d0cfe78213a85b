import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { drainNode, drainSummary, listNodes, removeNode, setNodeStatus, type DrainAnswer, type DrainProgress } from './cli-nodes.js';
import { SqliteStore } from './store/sqlite.js';
import type { SandboxRow, Store } from './store/types/index.js';

const capacity = { vcpu: 4, memoryMb: 8192, diskGb: 100, maxSandboxes: 10 };

async function sandbox(store: Store, id: string, nodeId: string, status: SandboxRow['status'] = 'running'): Promise<void> {
  const now = new Date().toISOString();
  await store.sandboxes.insert({
    id, orgId: 'org_a', templateId: 't', templateName: 'base', status, region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
    vcpu: 2, memoryMb: 1024, diskGb: 5, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId, version: 0, deletedReason: null, createdAt: now, updatedAt: now,
    deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
  });
}

test('nodes: list with what each holds and whether it is up; cordon and uncordon; bad and unknown ids', async () => {
  const store = SqliteStore.open(':memory:');
  await store.nodes.register({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 60_000);
  await store.nodes.register({ id: 'node-b', url: 'http://10.0.0.2:7070', capacity }, 1);
  await sandbox(store, 'a1', 'node-a');
  await sandbox(store, 'a2', 'node-a', 'stopped');
  await store.nodes.heartbeat('node-a', { usage: { sandboxes: 5, vcpu: 2, memoryMb: 1024, diskGb: 10 }, warm: { k1: 2, k2: 1 }, layersDigest: null }, 60_000);
  await new Promise((r) => setTimeout(r, 5));
  const list = await listNodes(store);
  assert.deepEqual(
    list.map((n) => [n.id, n.status, n.up, n.committed.active, n.committed.stopped, n.committed.activeVcpu, n.committed.diskGb, n.warmReady]),
    [
      ['node-a', 'active', true, 1, 1, 2, 10, 3],
      ['node-b', 'active', false, 0, 0, 0, 0, 0],
    ],
  );
  assert.equal((await setNodeStatus(store, 'node-a', 'cordoned')).status, 'cordoned');
  assert.equal((await setNodeStatus(store, 'node-a', 'active')).status, 'active');
  await assert.rejects(setNodeStatus(store, 'nosuch', 'cordoned'), (e: unknown) => e instanceof ServiceError && e.code === 'NOT_FOUND');
  await assert.rejects(setNodeStatus(store, 'Bad_Id', 'cordoned'), (e: unknown) => e instanceof ServiceError && e.code === 'VALIDATION_ERROR');
  store.close();
});

test('nodes drain asks control while anything is left to move, then every everyMs while running ones remain; it ends drained, at its timeout, or when only failures are left', async () => {
  const sb = (id: string) => ({ id, organization_id: 'org_a' });
  const answer = (o: Partial<DrainAnswer>): DrainAnswer => ({ moved: [], failed: [], running: [], left: 0, drained: false, ...o });
  const failed = { ...sb('f1'), status: 'stopped', error: { code: 'RUNTIME_ERROR', message: 'the node refused it' } };
  const running = { ...sb('r1'), expires_at: null };
  const script = [
    // The first call's time ran out with one left: the next call comes at once.
    answer({ moved: [{ ...sb('s1'), status: 'stopped', node_id: 'node-b' }], running: [running], left: 1 }),
    answer({ moved: [{ ...sb('p1'), status: 'paused', node_id: 'node-b' }], failed: [failed], running: [running] }),
    // everyMs later: the failure moves; the running one was stopped by its owner and moves too.
    answer({ moved: [{ ...sb('f1'), status: 'stopped', node_id: 'node-c' }, { ...sb('r1'), status: 'stopped', node_id: 'node-b' }], drained: true }),
  ];
  const bodies: unknown[] = [];
  const at: number[] = [];
  const progress: DrainProgress[] = [];
  const r = await drainNode(
    async (body) => {
      bodies.push(body);
      at.push(Date.now());
      return script.shift()!;
    },
    { everyMs: 200, onProgress: (p) => progress.push(p) },
  );
  assert.deepEqual(bodies, [{ stop_running: false }, { stop_running: false }, { stop_running: false }]);
  assert.ok(at[1]! - at[0]! < 150 && at[2]! - at[1]! >= 190, `calls at ${at.map((t) => t - at[0]!).join(', ')} ms`);
  assert.deepEqual(progress, [
    { moved: 1, of: 2, failed: 0, running: 1 },
    { moved: 2, of: 3, failed: 1, running: 1 },
    { moved: 4, of: 4, failed: 0, running: 0 },
  ]);
  assert.deepEqual([r.drained, r.moved.map((m) => m.id), r.failed, r.running], [true, ['s1', 'p1', 'f1', 'r1'], [], []]);
  assert.match(drainSummary('node-a', r), /^node node-a is drained/);

  // Running ones that do not end: it gives up at its timeout, the node still draining.
  let calls = 0;
  const t0 = Date.now();
  const timedOut = await drainNode(
    async (body) => {
      calls++;
      assert.deepEqual(body, { stop_running: true });
      return answer({ running: [running] });
    },
    { stopRunning: true, timeoutMs: 100, everyMs: 20 },
  );
  assert.ok(Date.now() - t0 >= 100 && calls >= 3, `${calls} calls in ${Date.now() - t0} ms`);
  assert.deepEqual([timedOut.drained, timedOut.running], [false, [running]]);
  assert.match(drainSummary('node-a', timedOut), /r1 {2}organization org_a {2}no deadline/);

  // Only sandboxes that cannot move are left: said at once, not waited on.
  calls = 0;
  const stuck = await drainNode(async () => (calls++, answer({ failed: [failed] })), { everyMs: 10_000 });
  assert.deepEqual([calls, stuck.drained, stuck.failed], [1, false, [failed]]);
  assert.match(drainSummary('node-a', stuck), /could not move f1 \(organization org_a, stopped; it stays where it was\): RUNTIME_ERROR: the node refused it/);
});

test('nodes remove marks what is left deleted, and refuses a node that is up', async () => {
  const store = SqliteStore.open(':memory:');
  await store.nodes.register({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 60_000);
  await sandbox(store, 'a3', 'node-a');
  await assert.rejects(removeNode(store, 'node-a'), (e: unknown) => e instanceof ServiceError && e.code === 'INVALID_STATE' && /is up/.test(e.message));
  assert.deepEqual(await removeNode(store, 'node-a', { force: true }), { sandboxes: 1 });
  const a3 = (await store.sandboxes.byId('a3'))!;
  assert.deepEqual([a3.status, a3.deletedReason], ['deleted', 'node_removed']);
  assert.equal(await store.nodes.byId('node-a'), undefined);
  await assert.rejects(removeNode(store, 'node-a'), (e: unknown) => e instanceof ServiceError && e.code === 'NOT_FOUND');
  store.close();
});

test('sandboxd nodes, as an operator runs it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-nodes-'));
  try {
    const store = SqliteStore.open(join(dir, 'sandboxd.db'));
    await store.nodes.register({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 60_000);
    store.close();
    const cli = (...args: string[]) => spawnSync(process.execPath, [new URL('./cli.js', import.meta.url).pathname, 'nodes', ...args], { env: { ...process.env, SANDBOXD_DATA_DIR: dir }, encoding: 'utf8' });
    const listed = cli('list');
    assert.equal(listed.status, 0, listed.stderr);
    assert.match(listed.stdout, /^ID\s+STATUS\s+UP\s+SANDBOXES/m);
    assert.match(listed.stdout, /node-a\s+active\s+yes\s+0\/10\s+0\/4/);
    assert.equal(cli('cordon', 'node-a').stdout.trim(), 'node node-a is cordoned');
    assert.equal((JSON.parse(cli('list', '--json').stdout) as Array<{ status: string }>)[0]!.status, 'cordoned');
    const bad = cli('remove', 'node-a');
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /node node-a is up/);
    assert.equal(cli('remove', 'node-a', '--force').status, 0);
    assert.match(cli('list').stdout, /no nodes/);
    assert.equal(cli('frobnicate').status, 2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('sandboxd nodes drain, as an operator runs it: it asks control (--url) with the bootstrap key, shows the moves and what runs there still', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-drain-'));
  const asked: Array<{ method?: string; url?: string; key?: unknown; body: string }> = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      asked.push({ method: req.method, url: req.url, key: req.headers['x-api-key'], body });
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          object: 'node_drain', node_id: 'node-a', status: 'draining', left: 0, drained: false, failed: [],
          moved: [{ id: 'sbstopped', organization_id: 'org_a', status: 'stopped', node_id: 'node-b' }],
          running: [{ id: 'sbrunning', organization_id: 'org_b', expires_at: '2030-01-01T00:00:00.000Z' }],
        }),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const env = { ...process.env, SANDBOXD_DATA_DIR: dir, SANDBOXD_BOOTSTRAP_API_KEY: 'sbd_operator' };
    const child = spawn(process.execPath, [new URL('./cli.js', import.meta.url).pathname, 'nodes', 'drain', 'node-a', '--timeout', '0', '--url', url], { env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise((r) => child.once('close', r));
    assert.equal(code, 1, `still draining: ${stderr}`);
    assert.deepEqual(asked, [{ method: 'POST', url: '/v1/admin/nodes/node-a/drain', key: 'sbd_operator', body: '{"stop_running":false}' }]);
    assert.match(stderr, /node node-a: draining: moved 1 of 1; 1 running left/);
    assert.match(stdout, /^node node-a is still draining/);
    assert.match(stdout, /moved 1 sandbox\(es\): sbstopped \(stopped\) to node-b/);
    assert.match(stdout, /sbrunning {2}organization org_b {2}expires 2030-01-01T00:00:00.000Z/);
  } finally {
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
