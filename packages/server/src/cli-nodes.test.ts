import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { drainNode, listNodes, removeNode, setNodeStatus } from './cli-nodes.js';
import { SqliteStore } from './store/sqlite.js';
import type { SandboxRow, Store } from './store/types.js';

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

test('nodes drain waits for the sandboxes on it to end; remove marks what is left deleted, and refuses a node that is up', async () => {
  const store = SqliteStore.open(':memory:');
  await store.nodes.register({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 60_000);
  await sandbox(store, 'a1', 'node-a');
  await sandbox(store, 'a2', 'node-a');
  const progress: number[] = [];
  assert.equal(await drainNode(store, 'node-a', { timeoutMs: 50, everyMs: 10, onProgress: (n) => progress.push(n) }), false, 'still two');
  assert.equal((await store.nodes.byId('node-a'))!.status, 'draining');
  // The sandboxes end (their owners delete them); the drain sees it.
  const ending = (async () => {
    await new Promise((r) => setTimeout(r, 30));
    for (const id of ['a1', 'a2']) {
      const r = (await store.sandboxes.byId(id))!;
      await store.sandboxes.update(id, r.version, { status: 'deleted', deletedAt: new Date().toISOString() });
    }
  })();
  assert.equal(await drainNode(store, 'node-a', { timeoutMs: 5000, everyMs: 10, onProgress: (n) => progress.push(n) }), true);
  await ending;
  assert.equal(progress.at(-1), 0);

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
