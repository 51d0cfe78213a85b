// `sandboxd nodes remove` records the removal, which outlives the node's row and keeps it from
// registering again; `sandboxd nodes admit` forgets it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { admitNode, removeNode } from './cli-nodes.js';
import { SqliteStore } from './store/sqlite.js';

const capacity = { vcpu: 4, memoryMb: 8192, diskGb: 100, maxSandboxes: 10 };

test('remove records when, and returns once that second is over; admit forgets it; bad ids are refused', async () => {
  const store = SqliteStore.open(':memory:');
  await store.nodes.register({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 60_000);
  await removeNode(store, 'node-a', { force: true });
  const at = await store.nodes.removedAt('node-a');
  assert.ok(at);
  // A credential's iat is whole seconds: one made from now on is of a later second than the removal.
  assert.ok(Math.floor(Date.now() / 1000) * 1000 > Date.parse(at), `returned at ${new Date().toISOString()}, removal at ${at}`);
  assert.equal(await store.nodes.registerUnlessRemoved({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 60_000), undefined);
  assert.deepEqual(await admitNode(store, 'node-a'), { admitted: true });
  assert.equal(await store.nodes.removedAt('node-a'), undefined);
  assert.ok(await store.nodes.registerUnlessRemoved({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 60_000));
  await assert.rejects(admitNode(store, 'Bad_Id'), (e: unknown) => e instanceof ServiceError && e.code === 'VALIDATION_ERROR');
  store.close();
});

test('sandboxd nodes remove and admit, as an operator runs them', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-nodes-admit-'));
  try {
    const store = SqliteStore.open(join(dir, 'sandboxd.db'));
    await store.nodes.register({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 60_000);
    store.close();
    const cli = (...args: string[]) => spawnSync(process.execPath, [new URL('./cli.js', import.meta.url).pathname, 'nodes', ...args], { env: { ...process.env, SANDBOXD_DATA_DIR: dir }, encoding: 'utf8' });
    const removed = cli('remove', 'node-a', '--force');
    assert.equal(removed.status, 0, removed.stderr);
    assert.match(removed.stdout, /removed node node-a; .* it cannot register again until admitted: a new credential \(`sandboxd cluster node-credential node-a`\), or `sandboxd nodes admit node-a` for a node on the database/);
    const admitted = cli('admit', 'node-a', '--json');
    assert.equal(admitted.status, 0, admitted.stderr);
    assert.deepEqual(JSON.parse(admitted.stdout), { id: 'node-a', admitted: true });
    assert.equal(cli('admit', 'node-a').stdout.trim(), 'node node-a was not removed: nothing to admit');
    const bad = cli('admit', 'Node_A');
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /"Node_A" is not a node id/);
    assert.equal(cli('admit').status, 2, 'no id: the usage');
    const reopened = SqliteStore.open(join(dir, 'sandboxd.db'));
    assert.equal(await reopened.nodes.removedAt('node-a'), undefined);
    reopened.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
