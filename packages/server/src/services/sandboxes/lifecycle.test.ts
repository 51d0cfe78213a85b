// The lifecycle verbs (lifecycle.ts) on the fake node, called on the service: which states each
// verb takes a sandbox from, what it tells the node, the route and the events, who may call it,
// the quota a start is admitted against, and what is left when the node fails part-way.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { buildSandboxHarness, rejectsWith, until, type SandboxHarness } from '../../testing/sandbox-harness.js';

/** Asserts that an ISO time is within 5 s of `expectedMs`. */
function near(iso: string | null, expectedMs: number, what: string): void {
  assert.ok(iso !== null, `${what}: no time`);
  assert.ok(Math.abs(Date.parse(iso) - expectedMs) < 5000, `${what}: ${iso} is not near ${new Date(expectedMs).toISOString()}`);
}

const callsOf = (h: SandboxHarness, verb: string, id: string) => h.runtime.calls.filter((c) => c.verb === verb && c.id === id).length;

describe('lifecycle verbs on the fake node', () => {
  let h: SandboxHarness;
  let org: string;
  before(async () => {
    h = await buildSandboxHarness({ pausedRetentionSeconds: 3600, agentReadyTimeoutMs: 300 });
    org = h.orgs.a;
  });
  after(() => h?.close());

  test('each verb moves a sandbox only from its states (INVALID_STATE with current_state otherwise); the node, the route and the events follow', async () => {
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    const s = h.sandboxes;
    const steps: Array<[string, () => Promise<unknown>, string | null, string]> = [
      // [what, call, the state it moves to (null: refused), the state it is in then]
      ['resume a running one', () => s.resume(org, id), null, 'running'],
      ['start a running one', () => s.start(org, id), null, 'running'],
      ['pause', () => s.pause(org, id), 'paused', 'paused'],
      ['pause a paused one', () => s.pause(org, id), null, 'paused'],
      ['start a paused one', () => s.start(org, id), null, 'paused'],
      ['resume', () => s.resume(org, id), 'running', 'running'],
      ['stop', () => s.stop(org, id), 'stopped', 'stopped'],
      ['pause a stopped one', () => s.pause(org, id), null, 'stopped'],
      ['resume a stopped one', () => s.resume(org, id), null, 'stopped'],
      ['stop a stopped one', () => s.stop(org, id), null, 'stopped'],
      ['start', () => s.start(org, id), 'running', 'running'],
      ['pause again', () => s.pause(org, id), 'paused', 'paused'],
      ['stop a paused one', () => s.stop(org, id), 'stopped', 'stopped'],
    ];
    for (const [what, call, to, state] of steps) {
      if (to === null) await rejectsWith(call(), 'INVALID_STATE', { id, current_state: state });
      else assert.equal(((await call()) as { status: string }).status, to, what);
      assert.equal((await h.row(id)).status, state, `the row after: ${what}`);
      assert.equal(await h.runtime.status(id), state, `the node after: ${what}`);
      assert.equal(h.routes.get(id)?.status, state, `the route after: ${what}`);
    }
    const deleted = await s.delete(org, id);
    assert.equal(deleted.status, 'deleted');
    assert.equal(h.routes.get(id), undefined, 'a deleted sandbox has no route');
    assert.ok(h.gateway.closed.includes(id), 'its public_host is closed');
    for (const call of [() => s.pause(org, id), () => s.resume(org, id), () => s.stop(org, id), () => s.start(org, id), () => s.delete(org, id), () => s.setTimeout(org, id, 60)]) {
      await rejectsWith(call(), 'NOT_FOUND', { id });
    }
    await s.settle();
    assert.equal(await h.runtime.status(id), 'missing', 'the node lets go of it');
    const kinds = h.events.filter((e) => e.data.id === id).map((e) => e.kind);
    assert.deepEqual(kinds, ['created', 'paused', 'resumed', 'stopped', 'started', 'paused', 'stopped', 'deleted']);
  });

  test("another organization's sandbox is PERMISSION_DENIED to every verb and left as it was; an unknown id and a create under way are NOT_FOUND", async () => {
    const { sandbox } = await h.create(h.orgs.b);
    const id = sandbox.id;
    const s = h.sandboxes;
    const verbs = [() => s.get(org, id), () => s.pause(org, id), () => s.stop(org, id), () => s.delete(org, id), () => s.setTimeout(org, id, 60), () => s.refreshToken(org, id)];
    for (const call of verbs) await rejectsWith(call(), 'PERMISSION_DENIED', { id });
    assert.equal((await h.row(id)).status, 'running');
    assert.equal(await h.runtime.status(id), 'running');
    await rejectsWith(s.pause(org, 'sbnosuchsandbox000000000'), 'NOT_FOUND');
    // A create's placeholder row is no sandbox yet.
    const placeholder = { ...(await h.row(id)), id: 'sbplaceholder0000000000', orgId: org, status: 'creating' as const };
    await h.store.sandboxes.insert(placeholder);
    await rejectsWith(s.get(org, placeholder.id), 'NOT_FOUND');
    await h.store.sandboxes.remove(placeholder.id);
  });

  test('a deleted sandbox is NOT_FOUND; one deleted by its deadline (or past its retention) is SANDBOX_EXPIRED, and readable with allowDeleted', async () => {
    const s = h.sandboxes;
    const deleted = (await h.create(org)).sandbox.id;
    const expired = (await h.create(org, { timeout_seconds: 600 })).sandbox.id;
    const retained = (await h.create(org, { on_timeout: 'pause' })).sandbox.id;
    await s.delete(org, deleted);
    await s.delete(org, expired, 'expired');
    await s.delete(org, retained, 'retention');
    await rejectsWith(s.get(org, deleted), 'NOT_FOUND', { id: deleted });
    const row = await h.row(expired);
    await rejectsWith(s.get(org, expired), 'SANDBOX_EXPIRED', { sandbox_id: expired, expires_at: row.expiresAt, status: 'deleted' });
    await rejectsWith(s.resume(org, expired), 'SANDBOX_EXPIRED');
    await rejectsWith(s.get(org, retained), 'SANDBOX_EXPIRED', { sandbox_id: retained });
    assert.equal((await s.get(org, expired, { allowDeleted: true })).deletedReason, 'expired');
    assert.deepEqual(
      h.events.filter((e) => [deleted, expired, retained].includes(e.data.id) && e.kind !== 'created').map((e) => [e.kind, e.data.reason]),
      [
        ['deleted', 'deleted'],
        ['expired', 'expired'],
        ['deleted', 'retention'],
      ],
    );
  });

  test('delete answers before its teardown; settle() waits for the teardown to end', async () => {
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const destroy = h.node.destroy.bind(h.node);
    h.node.destroy = async (sid) => {
      if (sid === id) await gate;
      return destroy(sid);
    };
    try {
      assert.equal((await h.sandboxes.delete(org, id)).status, 'deleted');
      assert.equal((await h.row(id)).status, 'deleted', 'the row says deleted at once');
      assert.equal(await h.runtime.status(id), 'running', 'the node still holds it: the teardown waits');
      let settled = false;
      const settling = h.sandboxes.settle().then(() => (settled = true));
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(settled, false, 'settle waits for the teardown');
      release();
      await settling;
      assert.equal(await h.runtime.status(id), 'missing');
    } finally {
      release();
      h.node.destroy = destroy;
    }
  });

  test('a teardown that fails is tried again, and the sandbox goes', async () => {
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    const heal = h.runtime.failOn('destroy', new Error('device busy'), (sid) => sid === id);
    try {
      await h.sandboxes.delete(org, id);
      await until(() => callsOf(h, 'destroy', id) >= 1, 'the first teardown');
      // Failed: the sandbox is still on the node, and the next try comes a second later.
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(await h.runtime.status(id), 'running');
    } finally {
      heal();
    }
    await h.sandboxes.settle();
    assert.equal(await h.runtime.status(id), 'missing', 'the second try removed it');
    assert.equal(callsOf(h, 'destroy', id), 2);
  });

  test("start is admitted against the organization's quota: at max_sandboxes a stopped sandbox stays stopped, and is never booted", async () => {
    const q = (await h.store.orgs.byName('quota-org')) ?? (await h.store.orgs.create('quota-org'));
    await h.store.orgs.setLimits(q.id, { max_sandboxes: 1 });
    const first = (await h.create(q.id)).sandbox.id;
    await h.sandboxes.stop(q.id, first);
    // A stopped sandbox holds no slot: another may run.
    const second = (await h.create(q.id)).sandbox.id;
    await rejectsWith(h.sandboxes.start(q.id, first), 'ORG_QUOTA_EXCEEDED', { limit: 'max_sandboxes', max: 1 });
    assert.equal((await h.row(first)).status, 'stopped');
    assert.equal(await h.runtime.status(first), 'stopped');
    assert.equal(callsOf(h, 'start', first), 0, 'the node was not asked to boot it');
    await h.sandboxes.delete(q.id, second);
    assert.equal((await h.sandboxes.start(q.id, first)).status, 'running', 'room again: it starts');
    assert.equal(await h.runtime.status(first), 'running');
  });

  test('a start whose agent never answers leaves the sandbox stopped, on the node too, with AGENT_UNAVAILABLE; one the node refuses stays stopped', async () => {
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    await h.sandboxes.stop(org, id);
    const dial = h.runtime.dialAgent.bind(h.runtime);
    h.runtime.dialAgent = (sid, t) => (sid === id ? Promise.reject(new Error('connect ECONNREFUSED')) : dial(sid, t));
    try {
      await rejectsWith(h.sandboxes.start(org, id), 'AGENT_UNAVAILABLE', { id });
    } finally {
      h.runtime.dialAgent = dial;
    }
    assert.equal((await h.row(id)).status, 'stopped');
    assert.equal(await h.runtime.status(id), 'stopped', 'the node stopped it again');
    assert.equal(h.routes.get(id)?.status, 'stopped');
    const heal = h.runtime.failOn('start');
    try {
      await rejectsWith(h.sandboxes.start(org, id), 'RUNTIME_ERROR');
    } finally {
      heal();
    }
    assert.equal((await h.row(id)).status, 'stopped');
    assert.equal(await h.runtime.status(id), 'stopped');
    assert.ok(!h.events.some((e) => e.data.id === id && e.kind === 'started'), 'no start was reported');
    assert.equal((await h.sandboxes.start(org, id)).status, 'running', 'the agent answers again: it starts');
  });

  test("pause: 'timeout' cuts what is in flight at the gateway; 'idle' is refused while a request is in flight; a node that fails leaves it running", async () => {
    const { sandbox } = await h.create(org, { on_timeout: 'pause', timeout_seconds: 600 });
    const id = sandbox.id;
    await h.sandboxes.pause(org, id);
    assert.ok(!h.gateway.interrupted.includes(id), 'a pause asked for cuts nothing');
    await h.sandboxes.resume(org, id);
    h.gateway.busyIds.add(id);
    await rejectsWith(h.sandboxes.pause(org, id, 'idle'), 'INVALID_STATE', { current_state: 'running' });
    h.gateway.busyIds.delete(id);
    assert.equal(await h.runtime.status(id), 'running');
    assert.equal(h.routes.get(id)?.status, 'running', 'the route is running again');
    const heal = h.runtime.failOn('pause', new ServiceError('RUNTIME_ERROR', 'the freezer did not answer'));
    try {
      await rejectsWith(h.sandboxes.pause(org, id), 'RUNTIME_ERROR');
    } finally {
      heal();
    }
    assert.equal(h.routes.get(id)?.status, 'running');
    assert.equal((await h.row(id)).status, 'running');
    const paused = await h.sandboxes.pause(org, id, 'timeout');
    assert.deepEqual(h.gateway.interrupted, [id]);
    // Asleep on its deadline: kept for the retention time, then its timeout counts from its wake.
    near(paused.expiresAt, Date.now() + 3600_000, 'a sleeping sandbox keeps its retention');
    assert.equal(h.events.at(-1)?.data.reason, 'timeout');
    near((await h.sandboxes.resume(org, id)).expiresAt, Date.now() + 600_000, 'resumed, its timeout counts again');
    await h.sandboxes.stop(org, id);
    near((await h.sandboxes.start(org, id)).expiresAt, Date.now() + 600_000, 'started, its timeout counts again');
  });

  test('two verbs at once on one sandbox run one after the other: one pause pauses, the other is told it is paused', async () => {
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    const results = await Promise.allSettled([h.sandboxes.pause(org, id), h.sandboxes.pause(org, id)]);
    assert.deepEqual(results.map((r) => r.status).sort(), ['fulfilled', 'rejected']);
    const refused = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')!;
    assert.deepEqual([refused.reason.code, refused.reason.extra.current_state], ['INVALID_STATE', 'paused']);
    assert.equal(callsOf(h, 'pause', id), 1, 'the node was asked once');
  });

  test('wake resumes a paused auto_resume sandbox once for all its concurrent callers, and nothing else', async () => {
    const wakes = (await h.create(org, { auto_resume: true })).sandbox.id;
    const sleeps = (await h.create(org)).sandbox.id;
    await h.sandboxes.pause(org, wakes);
    await h.sandboxes.pause(org, sleeps);
    await Promise.all(Array.from({ length: 5 }, () => h.sandboxes.wake(wakes)));
    assert.equal((await h.row(wakes)).status, 'running');
    assert.equal(await h.runtime.status(wakes), 'running');
    assert.equal(callsOf(h, 'resume', wakes), 1, 'one resume for five callers');
    assert.deepEqual(
      h.events.filter((e) => e.data.id === wakes && e.kind === 'resumed').map((e) => e.data.reason),
      ['traffic'],
    );
    await h.sandboxes.wake(wakes);
    await h.sandboxes.wake(sleeps);
    await h.sandboxes.wake('sbnosuchsandbox000000000');
    assert.equal(callsOf(h, 'resume', wakes), 1, 'a running one is not resumed');
    assert.equal((await h.row(sleeps)).status, 'paused', 'without auto_resume it sleeps on');
    assert.equal(callsOf(h, 'resume', sleeps), 0);
  });

  test("setTimeout: within the organization's maximum, from now; asleep on its deadline, its retention stays", async () => {
    const q = (await h.store.orgs.byName('timeout-org')) ?? (await h.store.orgs.create('timeout-org'));
    await h.store.orgs.setLimits(q.id, { max_timeout_seconds: 600 });
    const { sandbox } = await h.create(q.id, { timeout_seconds: 60, on_timeout: 'pause' });
    const id = sandbox.id;
    const set = await h.sandboxes.setTimeout(q.id, id, 300);
    assert.equal(set.timeoutSeconds, 300);
    near(set.expiresAt, Date.now() + 300_000, 'expires_at from now');
    await rejectsWith(h.sandboxes.setTimeout(q.id, id, 601), 'LIMIT_EXCEEDED', { limit: 'max_timeout_seconds', max: 600, requested: 601 });
    assert.equal((await h.row(id)).timeoutSeconds, 300, 'a refused change changes nothing');
    const paused = await h.sandboxes.pause(q.id, id, 'timeout');
    const asleep = await h.sandboxes.setTimeout(q.id, id, 120);
    assert.equal(asleep.timeoutSeconds, 120);
    assert.equal(asleep.expiresAt, paused.expiresAt, 'its retention is not cut short');
    near((await h.sandboxes.resume(q.id, id)).expiresAt, Date.now() + 120_000, 'the new timeout counts from the wake');
  });

  test('refreshToken signs a token for the sandbox and its organization; restore without snapshots is refused', async () => {
    const { sandbox } = await h.create(org);
    const { token } = await h.sandboxes.refreshToken(org, sandbox.id);
    const claims = await h.tokens.verify(token, sandbox.id);
    assert.deepEqual([claims.sandboxId, claims.orgId], [sandbox.id, org]);
    await assert.rejects(h.tokens.verify(token, 'sbsomeothersandbox000000'));
    await rejectsWith(h.sandboxes.restore(org, sandbox.id, 'snap-1'), 'RUNTIME_ERROR');
    assert.equal(await h.runtime.status(sandbox.id), 'running');
  });
});
