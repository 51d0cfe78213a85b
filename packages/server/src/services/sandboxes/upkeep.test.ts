// Upkeep (upkeep.ts) on the fake node: the sweep enforces deadlines, idle timeouts and the
// tombstones' age, a gone agent's sandbox is said stopped only when its container is gone, and OOM
// kills are reported for the sandboxes they hit.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { SandboxRow } from '../../store/types/index.js';
import { buildSandboxHarness, rejectsWith, until, type SandboxHarness, type SandboxHarnessOptions } from '../../testing/sandbox-harness.js';
import { ABANDONED_CREATE_MS } from './index.js';

async function on(o: SandboxHarnessOptions, fn: (h: SandboxHarness) => Promise<void>): Promise<void> {
  const h = await buildSandboxHarness(o);
  try {
    await fn(h);
  } finally {
    await h.close();
  }
}

/** Changes a stored row behind the service's back (time passing, another process's write). */
async function patch(h: SandboxHarness, id: string, p: Partial<SandboxRow>): Promise<void> {
  assert.ok(await h.store.sandboxes.update(id, (await h.row(id)).version, p), `row ${id} updated`);
}

/** A create's placeholder row (a create cut short), written `ageMs` ago. */
async function placeholder(h: SandboxHarness, like: SandboxRow, ageMs: number): Promise<string> {
  const id = `sbplaceholder${String(ageMs).padStart(11, '0')}`;
  await h.store.sandboxes.insert({ ...like, id, status: 'creating', nodeId: '', createdAt: new Date(Date.now() - ageMs).toISOString() });
  return id;
}

const ago = (ms: number) => new Date(Date.now() - ms).toISOString();
const REPLICAS = { shared: true, used: () => undefined, interrupted: () => undefined, changed: () => undefined };

test('sweep deletes a sandbox past its deadline (SANDBOX_EXPIRED after); on_timeout "pause" sleeps first, cut at the gateway, and is deleted past its retention', () =>
  on({ pausedRetentionSeconds: 3600 }, async (h) => {
    const org = h.orgs.a;
    const expires = (await h.create(org, { timeout_seconds: 600 })).sandbox.id;
    const sleeps = (await h.create(org, { timeout_seconds: 600, on_timeout: 'pause' })).sandbox.id;
    const lives = (await h.create(org, { timeout_seconds: 600 })).sandbox.id;
    await patch(h, expires, { expiresAt: ago(1000) });
    await patch(h, sleeps, { expiresAt: ago(1000) });
    assert.equal(await h.sandboxes.sweep(), 2);
    await rejectsWith(h.sandboxes.get(org, expires), 'SANDBOX_EXPIRED', { sandbox_id: expires });
    assert.equal(h.events.find((e) => e.data.id === expires && e.kind === 'expired')?.data.reason, 'expired');
    const asleep = await h.row(sleeps);
    assert.equal(asleep.status, 'paused');
    assert.ok(Date.parse(asleep.expiresAt!) > Date.now() + 3500_000, 'kept for its retention');
    assert.deepEqual(h.gateway.interrupted, [sleeps]);
    assert.equal((await h.row(lives)).status, 'running', 'one not due is left alone');
    await patch(h, sleeps, { expiresAt: ago(1000) });
    assert.equal(await h.sandboxes.sweep(), 1);
    await rejectsWith(h.sandboxes.get(org, sleeps), 'SANDBOX_EXPIRED');
    assert.equal((await h.row(sleeps)).deletedReason, 'retention');
    await h.sandboxes.settle();
    assert.equal(await h.runtime.status(expires), 'missing');
    assert.equal(await h.runtime.status(sleeps), 'missing');
  }));

test('sweep passes over a sandbox a verb works on, and takes it at the next sweep', () =>
  on({}, async (h) => {
    const org = h.orgs.a;
    const id = (await h.create(org, { timeout_seconds: 600 })).sandbox.id;
    await patch(h, id, { expiresAt: ago(1000) });
    let release!: () => void;
    const held = h.locks.run(id, () => new Promise<void>((r) => (release = r)));
    await h.sandboxes.sweep();
    assert.equal((await h.row(id)).status, 'running', 'not waited for, not deleted');
    release();
    await held;
    await h.sandboxes.sweep();
    assert.equal((await h.row(id)).status, 'deleted');
  }));

test('sweep pauses a sandbox unused for its idle timeout, but not one with a request in flight or one used since', () =>
  on({}, async (h) => {
    const org = h.orgs.a;
    const idle = (await h.create(org, { idle_timeout_seconds: 1 })).sandbox.id;
    const busy = (await h.create(org, { idle_timeout_seconds: 1 })).sandbox.id;
    const used = (await h.create(org, { idle_timeout_seconds: 1 })).sandbox.id;
    const never = (await h.create(org)).sandbox.id;
    h.gateway.busyIds.add(busy);
    await new Promise((r) => setTimeout(r, 500));
    const usedAt = Date.now();
    h.sandboxes.touch(used);
    await new Promise((r) => setTimeout(r, 600));
    await h.sandboxes.sweep();
    assert.equal((await h.row(idle)).status, 'paused');
    assert.equal(await h.runtime.status(idle), 'paused');
    assert.equal(h.events.find((e) => e.data.id === idle && e.kind === 'paused')?.data.reason, 'idle');
    for (const id of [busy, used, never]) assert.equal((await h.row(id)).status, 'running', `${id} runs on`);
    const next = Date.parse((await h.row(used)).idleCheckAt!);
    assert.ok(Math.abs(next - (usedAt + 1000)) < 200, 'looked at again an idle timeout after its last use');
    assert.ok(Date.parse((await h.row(busy)).idleCheckAt!) > Date.now(), 'the busy one is looked at again later');
  }));

test('sweep purges tombstones older than tombstoneSeconds, and keeps the younger ones', () =>
  on({ tombstoneSeconds: 60 }, async (h) => {
    const org = h.orgs.a;
    const old = (await h.create(org)).sandbox.id;
    const young = (await h.create(org)).sandbox.id;
    await h.sandboxes.delete(org, old);
    await h.sandboxes.delete(org, young);
    await patch(h, old, { deletedAt: ago(120_000) });
    await h.sandboxes.sweep();
    assert.equal(await h.store.sandboxes.byId(old), undefined);
    assert.equal((await h.row(young)).status, 'deleted');
  }));

test('sweep with replicas removes the placeholders of creates a replica abandoned, not those under way', () =>
  on({ replicas: REPLICAS }, async (h) => {
    const like = await h.row((await h.create(h.orgs.a)).sandbox.id);
    const young = await placeholder(h, like, 1000);
    const old = await placeholder(h, like, ABANDONED_CREATE_MS + 60_000);
    await h.sandboxes.sweep();
    assert.equal(await h.store.sandboxes.byId(old), undefined);
    assert.equal((await h.row(young)).status, 'creating');
  }));

test("agentGone marks a running sandbox stopped when its container is gone, and only then", () =>
  on({}, async (h) => {
    const org = h.orgs.a;
    const exited = (await h.create(org)).sandbox.id;
    const alive = (await h.create(org)).sandbox.id;
    const paused = (await h.create(org)).sandbox.id;
    await h.sandboxes.pause(org, paused);
    await h.runtime.stop(exited);
    h.gateway.opened.delete(exited);
    h.sandboxes.agentGone(exited);
    h.sandboxes.agentGone(alive);
    h.sandboxes.agentGone(paused);
    await until(async () => (await h.row(exited)).status === 'stopped', 'the exited sandbox marked stopped');
    assert.match(h.events.find((e) => e.data.id === exited && e.kind === 'stopped')?.data.reason ?? '', /agent exited/);
    assert.equal(h.routes.get(exited)?.status, 'stopped');
    assert.ok(h.gateway.opened.has(exited), 'its URL is served, to say it is stopped');
    // Its container runs: the agent may only be busy. Watched until something else settles it.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal((await h.row(alive)).status, 'running');
    await h.sandboxes.pause(org, alive);
    await new Promise((r) => setTimeout(r, 250));
    assert.equal((await h.row(alive)).status, 'paused', 'a pause meanwhile is not undone');
    assert.equal((await h.row(paused)).status, 'paused');
    assert.deepEqual(h.events.filter((e) => e.kind === 'stopped').map((e) => e.data.id), [exited]);
  }));

test('watchOom reports oom_killed for a running sandbox, only from the node that holds it, until unwatched', () =>
  on({ nodeIds: ['node-a', 'node-b'] }, async (h) => {
    const org = h.orgs.a;
    const runtimeOf = async (id: string) => {
      const nodeId = (await h.row(id)).nodeId;
      return h.nodes.find((n) => n.node.id === nodeId)!.runtime;
    };
    const id = (await h.create(org)).sandbox.id;
    const holder = await runtimeOf(id);
    const other = h.nodes.find((n) => n.runtime !== holder)!.runtime;
    // A sandbox of the same id on the other node (a node that lies, or a stale one).
    await other.create(h.sandboxes.spec(await h.row(id)));
    const rowless = (await h.create(org)).sandbox.id;
    const rowlessRuntime = await runtimeOf(rowless);
    await h.store.sandboxes.remove(rowless);
    const unwatch = h.sandboxes.watchOom();
    const ooms = () => h.events.filter((e) => e.kind === 'oom_killed');
    try {
      other.triggerOom(id, 5);
      rowlessRuntime.triggerOom(rowless, 4);
      // The row says paused while the node runs it (a pause under way): not reported.
      await h.sandboxes.pause(org, id);
      await holder.resume(id);
      holder.triggerOom(id, 3);
      await holder.pause(id);
      await h.sandboxes.resume(org, id);
      holder.triggerOom(id, 2);
      await until(() => ooms().length > 0, 'the oom_killed event');
      await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(
        ooms().map((e) => [e.data.id, e.data.reason]),
        [[id, '2 process(es) killed: out of memory']],
      );
    } finally {
      unwatch();
    }
    holder.triggerOom(id, 1);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(ooms().length, 1, 'nothing after unwatching');
  }));
