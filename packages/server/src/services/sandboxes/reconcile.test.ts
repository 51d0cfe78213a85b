// The reconcile at start (reconcile.ts) on the fake node: it makes the node match the store, with
// replicas and without, and gives each preview its gateway port back.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import type { SandboxRow } from '../../store/types/index.js';
import { buildSandboxHarness, rejectsWith, type SandboxHarness, type SandboxHarnessOptions } from '../../testing/sandbox-harness.js';
import { ABANDONED_CREATE_MS } from './index.js';

async function on(o: SandboxHarnessOptions, fn: (h: SandboxHarness) => Promise<void>): Promise<void> {
  const h = await buildSandboxHarness(o);
  try {
    await fn(h);
  } finally {
    await h.close();
  }
}

/** A create's placeholder row (a create cut short), written `ageMs` ago. */
async function placeholder(h: SandboxHarness, like: SandboxRow, ageMs: number): Promise<string> {
  const id = `sbplaceholder${String(ageMs).padStart(11, '0')}`;
  await h.store.sandboxes.insert({ ...like, id, status: 'creating', nodeId: '', createdAt: new Date(Date.now() - ageMs).toISOString() });
  return id;
}

const REPLICAS = { shared: true, used: () => undefined, interrupted: () => undefined, changed: () => undefined };

test('reconcile makes the node match the store: lost, booted again, paused and resumed, stopped; leftovers and placeholders go; every live one is routed on its port', () =>
  on({}, async (h) => {
    const org = h.orgs.a;
    const make = async () => (await h.create(org)).sandbox.id;
    const [lost, rebooted, pausedGone, toResume, toPause, toStop, fine, leftover] = [await make(), await make(), await make(), await make(), await make(), await make(), await make(), await make()];
    for (const id of [pausedGone, toPause]) await h.sandboxes.pause(org, id);
    await h.sandboxes.stop(org, toStop);
    // What a host reboot, a crash or another program did while the service was down.
    await h.runtime.destroy(lost);
    await h.runtime.stop(rebooted);
    await h.runtime.stop(pausedGone);
    await h.runtime.pause(toResume);
    await h.runtime.resume(toPause);
    await h.runtime.start(h.sandboxes.spec(await h.row(toStop)));
    await h.store.sandboxes.remove(leftover);
    const cut = await placeholder(h, await h.row(fine), 1000);
    const ports = new Map<string, number | null>();
    for (const id of [rebooted, pausedGone, toResume, toPause, toStop, fine]) ports.set(id, (await h.row(id)).gatewayPort);
    // A new process: no route, no port open.
    for (const id of [lost, ...ports.keys()]) h.routes.delete(id);
    h.gateway.opened.clear();

    const stats = await h.sandboxes.reconcile();
    assert.deepEqual(stats, { restored: 6, cleaned: 2, rebooted: 2, lost: 1, unknown: 0 });
    const lostRow = await h.row(lost);
    assert.deepEqual([lostRow.status, lostRow.deletedReason], ['deleted', 'lost']);
    await rejectsWith(h.sandboxes.get(org, lost), 'NOT_FOUND');
    const expected: Record<string, string> = { [rebooted]: 'running', [pausedGone]: 'paused', [toResume]: 'running', [toPause]: 'paused', [toStop]: 'stopped', [fine]: 'running' };
    for (const [id, status] of Object.entries(expected)) {
      assert.equal((await h.row(id)).status, status, `row ${id}`);
      assert.equal(await h.runtime.status(id), status, `node ${id}`);
      assert.equal(h.routes.get(id)?.status, status, `route ${id}`);
      assert.equal(h.gateway.opened.get(id), ports.get(id), `${id} is served on its own port again`);
    }
    assert.equal(await h.runtime.status(leftover), 'missing', 'what no row names is destroyed');
    assert.equal(await h.store.sandboxes.byId(cut), undefined, "a create's placeholder is removed");
    assert.equal(h.routes.get(lost), undefined);
  }));

test('reconcile: a sandbox that cannot be booted again is stopped (and said so); one whose node is away is left as it is, and routed; one whose node cannot tell them all at once is asked alone', () =>
  on({ agentReadyTimeoutMs: 300 }, async (h) => {
    const org = h.orgs.a;
    const broken = (await h.create(org)).sandbox.id;
    const away = (await h.create(org)).sandbox.id;
    await h.runtime.stop(broken);
    const dial = h.runtime.dialAgent.bind(h.runtime);
    h.runtime.dialAgent = (id, t) => (id === broken ? Promise.reject(new Error('connect ECONNREFUSED')) : dial(id, t));
    const statuses = h.node.statuses.bind(h.node);
    try {
      const stats = await h.sandboxes.reconcile();
      assert.deepEqual([stats.restored, stats.rebooted, stats.lost], [1, 0, 0]);
      assert.equal((await h.row(broken)).status, 'stopped');
      assert.equal(await h.runtime.status(broken), 'stopped');
      assert.equal(h.routes.get(broken)?.status, 'stopped');
      const said = h.events.find((e) => e.data.id === broken && e.kind === 'stopped');
      assert.match(said?.data.reason ?? '', /could not be restarted/);

      h.node.statuses = async () => {
        throw new ServiceError('NODE_UNAVAILABLE', 'the node does not answer');
      };
      await h.runtime.stop(away);
      h.routes.delete(away);
      const again = await h.sandboxes.reconcile();
      assert.equal(again.unknown, 2, 'neither state could be known');
      assert.equal((await h.row(away)).status, 'running', 'left as the store says');
      assert.equal(await h.runtime.status(away), 'stopped', 'and not booted: nothing is done on a guess');
      assert.equal(h.routes.get(away)?.status, 'running', 'routed as it is');
      assert.equal(again.cleaned, 0, 'what the node holds is not taken for leftovers');

      // The node answers, but not for all at once (one state it cannot read): each is asked alone.
      h.node.statuses = async () => {
        throw new Error('crun state failed for one sandbox');
      };
      const third = await h.sandboxes.reconcile();
      assert.equal(third.rebooted, 1, JSON.stringify(third));
      assert.equal(await h.runtime.status(away), 'running', 'booted again on its disk');
    } finally {
      h.runtime.dialAgent = dial;
      h.node.statuses = statuses;
    }
  }));

test('reconcile with replicas: a young placeholder is another replica\'s create under way and stays; an abandoned one goes; leftovers are the nodes\' to collect', () =>
  on({ replicas: REPLICAS }, async (h) => {
    const org = h.orgs.a;
    const stopped = (await h.create(org)).sandbox.id;
    const leftover = (await h.create(org)).sandbox.id;
    await h.store.sandboxes.remove(leftover);
    await h.runtime.stop(stopped);
    const like = await h.row(stopped);
    const young = await placeholder(h, like, 1000);
    const old = await placeholder(h, like, ABANDONED_CREATE_MS + 60_000);
    const stats = await h.sandboxes.reconcile();
    assert.equal((await h.row(young)).status, 'creating');
    assert.equal(await h.store.sandboxes.byId(old), undefined);
    assert.equal(await h.runtime.status(leftover), 'running', 'not destroyed by this start');
    assert.deepEqual([stats.cleaned, stats.rebooted], [1, 1]);
    assert.equal(await h.runtime.status(stopped), 'running', 'a row that says running is booted again all the same');
  }));

test('reconcile gives each preview its gateway port back, or a new one when another program took it', () =>
  on({}, async (h) => {
    const org = h.orgs.a;
    const id = (await h.create(org)).sandbox.id;
    await h.sandboxes.preview(org, id, 3000, { mayWake: false });
    await h.sandboxes.preview(org, id, 8080, { setPublic: true, mayWake: false });
    const before = new Map((await h.store.previews.forSandbox(id)).map((p) => [p.port, p.gatewayPort]));
    h.gateway.previews.clear();
    h.gateway.taken.add(before.get(8080)!);
    await h.sandboxes.reconcile();
    assert.deepEqual(h.gateway.previews.get(`${id}:3000`), { isPublic: false, gatewayPort: before.get(3000) });
    const moved = h.gateway.previews.get(`${id}:8080`);
    assert.equal(moved?.isPublic, true);
    assert.notEqual(moved?.gatewayPort, before.get(8080));
    assert.equal((await h.store.previews.get(id, 8080))?.gatewayPort, moved?.gatewayPort, 'the new port is recorded');
  }));

