// A drain (evacuate.ts) on two fake nodes: what moves where, what is reported and left, what stays
// as it was when a move fails part-way (the new node refuses it, the old one cannot copy its files,
// the store's answer is lost), and a drain called again finishing the job.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { buildSandboxHarness, rejectsWith, type SandboxHarness } from '../../testing/sandbox-harness.js';

const capacity = { vcpu: 8, memoryMb: 16_384, diskGb: 100, maxSandboxes: 100 };

describe('draining a node on the fake nodes', () => {
  let h: SandboxHarness;
  let org: string;
  const a = () => h.nodes[0]!.runtime;
  const b = () => h.nodes[1]!.runtime;
  /** A sandbox on node-a (placement puts every create there: the first of two equal nodes). */
  const onA = async (state: 'running' | 'paused' | 'stopped', file?: string) => {
    const { sandbox } = await h.create(org, { env_vars: { GREETING: 'hi' } });
    assert.equal((await h.row(sandbox.id)).nodeId, 'node-a');
    if (file) a().writeFile(sandbox.id, '/workspace/kept.txt', file);
    if (state === 'paused') await h.sandboxes.pause(org, sandbox.id);
    if (state === 'stopped') await h.sandboxes.stop(org, sandbox.id);
    return sandbox.id;
  };

  before(async () => {
    h = await buildSandboxHarness({ nodeIds: ['node-a', 'node-b'], snapshots: true, agentReadyTimeoutMs: 2000 });
    org = h.orgs.a;
    for (const [i, id] of ['node-a', 'node-b'].entries()) await h.store.nodes.register({ id, url: `http://10.0.0.${i + 1}:7070`, capacity }, 60_000);
  });
  after(() => h?.close());

  test('stopped and paused sandboxes move with their id, token, env, files and state; running ones are listed and left; again, nothing more moves; stop_running moves the rest', async () => {
    const stopped = await onA('stopped', 'stopped one');
    const paused = await onA('paused', 'paused one');
    const running = await onA('running');
    const before = { stopped: await h.row(stopped), paused: await h.row(paused) };
    const token = (await h.sandboxes.refreshToken(org, stopped)).token;

    const r = await h.sandboxes.drain('node-a');
    assert.equal((await h.store.nodes.byId('node-a'))!.status, 'draining');
    assert.deepEqual(
      r.moved.map((m) => [m.id, m.status, m.to]).sort(),
      [
        [stopped, 'stopped', 'node-b'],
        [paused, 'paused', 'node-b'],
      ].sort(),
    );
    assert.deepEqual([r.failed, r.running.map((x) => x.id), r.left, r.drained], [[], [running], 0, false]);
    for (const [id, was] of [
      [stopped, before.stopped],
      [paused, before.paused],
    ] as const) {
      const row = await h.row(id);
      assert.equal(row.nodeId, 'node-b');
      assert.equal(row.status, was.status);
      // Its own files went as a layer on top of its template's, which stay.
      assert.deepEqual(row.layers.slice(1), was.layers);
      assert.equal(readFileSync(join(h.snapshotLayers!.path(row.layers[0]!), 'workspace/kept.txt'), 'utf8'), id === stopped ? 'stopped one' : 'paused one');
      assert.deepEqual([row.envVars, row.gatewayPort, row.expiresAt], [was.envVars, was.gatewayPort, was.expiresAt]);
      assert.equal(await b().status(id), was.status, 'in its state on the new node');
      assert.equal(await a().status(id), 'missing', 'gone from the old one');
      assert.equal(h.routes.get(id)?.nodeId, 'node-b', 'routed to its new node');
    }
    await h.tokens.verify(token, stopped);
    assert.equal(await a().status(running), 'running');

    // It runs on its new node, as it was.
    assert.equal((await h.sandboxes.start(org, stopped)).status, 'running');
    assert.equal((await h.sandboxes.resume(org, paused)).status, 'running');
    assert.deepEqual([await b().status(stopped), await b().status(paused)], ['running', 'running']);

    const again = await h.sandboxes.drain('node-a');
    assert.deepEqual([again.moved, again.failed, again.running.map((x) => x.id), again.drained], [[], [], [running], false]);

    const last = await h.sandboxes.drain('node-a', { stopRunning: true });
    assert.deepEqual([last.moved.map((m) => [m.id, m.status, m.to]), last.running, last.drained], [[[running, 'stopped', 'node-b']], [], true]);
    assert.ok(h.events.some((e) => e.kind === 'stopped' && e.data.id === running), 'stopped as its owner would have');
    assert.deepEqual(await a().list(), [], 'nothing left on the drained node');
    for (const id of [stopped, paused, running]) await h.sandboxes.delete(org, id);
    await h.store.nodes.setStatus('node-a', 'active');
  });

  test('a move that fails part-way leaves the sandbox where it was, as it was, and nothing elsewhere; the drain called again moves it', async () => {
    const id = await onA('stopped', 'precious');
    const was = await h.row(id);
    const layersBefore = await h.snapshotLayers!.list();
    const unchanged = async (what: string) => {
      const row = await h.row(id);
      assert.deepEqual([row.nodeId, row.version, row.layers, row.status], [was.nodeId, was.version, was.layers, was.status], `${what}: the row`);
      assert.deepEqual([await a().status(id), a().readFile(id, '/workspace/kept.txt')], ['stopped', 'precious'], `${what}: the old node's copy`);
      assert.equal(await b().status(id), 'missing', `${what}: nothing on the new node`);
      assert.deepEqual((await h.snapshotLayers!.list()).filter((l) => !layersBefore.includes(l)), [], `${what}: no layer left`);
    };

    // The new node refuses it: its boot fails (and there is no third node to try).
    let heal = b().failOn('create');
    let r = await h.sandboxes.drain('node-a');
    heal();
    assert.deepEqual(r.failed.map((f) => [f.id, f.status, f.error.code]), [[id, 'stopped', 'RUNTIME_ERROR']]);
    assert.deepEqual([r.moved, r.drained], [[], false]);
    await unchanged('the new node refused');

    // Its files cannot be copied out of the old node.
    heal = a().failOn('exportLayer');
    r = await h.sandboxes.drain('node-a');
    heal();
    assert.deepEqual(r.failed.map((f) => f.id), [id]);
    await unchanged('the copy failed');

    // It boots on the new node, and cannot be stopped there.
    heal = b().failOn('stop');
    r = await h.sandboxes.drain('node-a');
    heal();
    assert.deepEqual(r.failed.map((f) => f.id), [id]);
    await unchanged('the new node could not stop it');

    // The store refuses the switch (it is down).
    const update = h.store.sandboxes.update;
    h.store.sandboxes.update = async () => {
      throw new ServiceError('STORE_UNAVAILABLE', 'the store is down');
    };
    try {
      r = await h.sandboxes.drain('node-a');
    } finally {
      h.store.sandboxes.update = update;
    }
    assert.deepEqual(r.failed.map((f) => [f.id, f.error.code]), [[id, 'STORE_UNAVAILABLE']]);
    await unchanged('the store refused the switch');

    // Resumed: it moves, its files with it.
    r = await h.sandboxes.drain('node-a');
    assert.deepEqual([r.moved.map((m) => m.id), r.failed, r.drained], [[id], [], true]);
    const row = await h.row(id);
    assert.equal(row.nodeId, 'node-b');
    assert.equal(readFileSync(join(h.snapshotLayers!.path(row.layers[0]!), 'workspace/kept.txt'), 'utf8'), 'precious');
    await h.sandboxes.delete(org, id);
    await h.store.nodes.setStatus('node-a', 'active');
  });

  test("the store's answer to the switch is lost: the row is read again, and the move stands as it was written", async () => {
    const id = await onA('stopped', 'written');
    const update = h.store.sandboxes.update.bind(h.store.sandboxes);
    h.store.sandboxes.update = async (...args) => {
      await update(...args);
      throw new Error('connection reset while the answer came');
    };
    let r;
    try {
      r = await h.sandboxes.drain('node-a');
    } finally {
      h.store.sandboxes.update = update;
    }
    assert.deepEqual([r.moved.map((m) => m.id), r.failed], [[id], []]);
    assert.deepEqual([(await h.row(id)).nodeId, await b().status(id), await a().status(id)], ['node-b', 'stopped', 'missing']);
    await h.sandboxes.delete(org, id);
    await h.store.nodes.setStatus('node-a', 'active');
  });

  test('a call moves only what its time allows and says what is left; an unknown node is NOT_FOUND', async () => {
    const ids = [await onA('stopped'), await onA('paused')];
    const r = await h.sandboxes.drain('node-a', { budgetMs: 0 });
    assert.deepEqual([r.moved, r.left, r.drained], [[], 2, false]);
    assert.deepEqual(await Promise.all(ids.map(async (id) => (await h.row(id)).nodeId)), ['node-a', 'node-a']);
    const rest = await h.sandboxes.drain('node-a');
    assert.deepEqual([rest.moved.length, rest.left, rest.drained], [2, 0, true]);
    for (const id of ids) await h.sandboxes.delete(org, id);
    await rejectsWith(h.sandboxes.drain('node-z'), 'NOT_FOUND');
  });
});
