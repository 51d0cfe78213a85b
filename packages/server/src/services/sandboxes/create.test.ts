// Creates (create.ts) on the fake node, through the lifecycle API (inject): a create asks its node
// for a sandbox that carries the create's env_vars (the node sets them on the agent). Each create
// must get the sandbox of its own ask, never another's, even when the asks end in the other order;
// a client gone meanwhile creates nothing; the node is asked while the create is admitted only
// when the organization has ample room. On the service itself: a create that fails after its take
// undoes everything (no row, no route, no sandbox on the node), and what is refused before any
// node is asked.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { agentGet } from '../../node/agent-client.js';
import type { TakeAsk } from '../../node/types.js';
import { buildFakeApp, type FakeApp } from '../../testing/fake-app.js';
import { buildSandboxHarness, rejectsWith, type SandboxHarness } from '../../testing/sandbox-harness.js';

/** Wraps the fake node's take: `around` runs it (`take`) and may wait or look before and after. */
function aroundTake(f: FakeApp, around: (ask: TakeAsk, take: () => Promise<{ id: string; warm: boolean }>) => Promise<{ id: string; warm: boolean }>): void {
  const take = f.node.take.bind(f.node);
  f.node.take = (ask) => around(ask, () => take(ask));
}

test("concurrent creates each get the sandbox of their own ask, with their own env_vars, whichever ask ends first", async () => {
  const f = await buildFakeApp();
  try {
    const asked: Array<Record<string, string>> = [];
    aroundTake(f, async (ask, take) => {
      asked.push(ask.env);
      const got = await take();
      // The first create's node is slow to answer; the second's answers at once.
      if (ask.env.WHO === 'first') await new Promise((r) => setTimeout(r, 200));
      return got;
    });
    const [first, second] = await Promise.all([
      f.call(f.orgs.a.key, 'POST', '/v1/sandboxes', { template_name: 'base', env_vars: { WHO: 'first', SECRET: 'org-a' } }),
      (async () => {
        await new Promise((r) => setTimeout(r, 20));
        return f.call(f.orgs.b.key, 'POST', '/v1/sandboxes', { template_name: 'base', env_vars: { WHO: 'second', SECRET: 'org-b' } });
      })(),
    ]);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    assert.equal(second.status, 201, JSON.stringify(second.body));
    assert.equal(asked.length, 2, 'one ask per create');
    const envOf = async (id: string) => ((await agentGet((t) => f.runtime.dialAgent(id, t), '/env', 2000)).body as { env_vars: Record<string, string> }).env_vars;
    assert.deepEqual(await envOf(first.body.id), { WHO: 'first', SECRET: 'org-a' }, "org a's sandbox holds org a's env");
    assert.deepEqual(await envOf(second.body.id), { WHO: 'second', SECRET: 'org-b' }, "org b's sandbox holds org b's env");
    assert.equal((await f.store.sandboxes.byId(first.body.id))?.orgId, f.orgs.a.id);
    assert.equal((await f.store.sandboxes.byId(second.body.id))?.orgId, f.orgs.b.id);
  } finally {
    await f.close();
  }
});

test('a create whose client went away while its node answered destroys the sandbox: nothing is created', async () => {
  const f = await buildFakeApp();
  try {
    const abort = new AbortController();
    let made: string | undefined;
    aroundTake(f, async (_ask, take) => {
      const got = await take();
      made = got.id;
      abort.abort();
      return got;
    });
    const org = f.orgs.a.id;
    await assert.rejects(f.services.sandboxes.create(org, { template_name: 'base' }, { signal: abort.signal }), /abandoned/);
    assert.ok(made);
    assert.deepEqual(await f.runtime.list(), [], 'the sandbox the node gave is destroyed');
    assert.equal((await f.services.quotas.usage(org)).sandboxes, 0, 'no row holds the quota');
  } finally {
    await f.close();
  }
});

test("a create asks its node while it is admitted when its organization's last admission left room; refused after all, the sandbox its node gave is destroyed; near a limit the node is asked only once admitted", async () => {
  const f = await buildFakeApp();
  try {
    const org = f.orgs.a.id;
    await f.store.orgs.setLimits(org, { max_sandboxes: 4 });
    const asks: Array<{ id: string; rowsWhenAsked: number }> = [];
    aroundTake(f, async (_ask, take) => {
      // Counted before anything is awaited: whether this create's own row was in yet.
      const rowsWhenAsked = f.store.sandboxes.usage(org).then((u) => u.active);
      const got = await take();
      asks.push({ id: got.id, rowsWhenAsked: await rowsWhenAsked });
      return got;
    });
    // No reading of the organization yet: admitted first, then asked (its row is in when asked).
    assert.equal((await f.call(f.orgs.a.key, 'POST', '/v1/sandboxes', { template_name: 'base' })).status, 201);
    assert.equal(asks[0]!.rowsWhenAsked, 1, 'the first create was admitted before its node was asked');
    // 1 of 4 held: room for two more and then some. Asked while admitted: its row was not in yet.
    assert.equal((await f.call(f.orgs.a.key, 'POST', '/v1/sandboxes', { template_name: 'base' })).status, 201);
    assert.equal(asks[1]!.rowsWhenAsked, 1, 'the second create asked its node before its own row was in');
    // The limit lowered meanwhile (as another replica's creates would take the room): this process
    // still thinks there is room and asks, but the admission reads the truth and refuses.
    await f.store.orgs.setLimits(org, { max_sandboxes: 2 });
    const refused = await f.call(f.orgs.a.key, 'POST', '/v1/sandboxes', { template_name: 'base' });
    assert.equal(refused.status, 409, JSON.stringify(refused.body));
    assert.equal(refused.body.code, 'ORG_QUOTA_EXCEEDED');
    // (Refused at once; the ask it began goes on, and its sandbox goes when it comes.)
    for (let i = 0; i < 100 && asks.length < 3; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(asks.length, 3, 'its node was asked');
    const given = asks[2]!.id;
    for (let i = 0; i < 100 && (await f.runtime.list()).includes(given); i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(!(await f.runtime.list()).includes(given), 'the sandbox the node gave the refused create is destroyed');
    assert.equal((await f.store.sandboxes.byId(given)), undefined, 'and it has no row');
    assert.equal((await f.services.quotas.usage(org)).sandboxes, 2, 'the two created hold the quota, nothing else');
    // At the limit now: the next create is refused without asking any node.
    assert.equal((await f.call(f.orgs.a.key, 'POST', '/v1/sandboxes', { template_name: 'base' })).status, 409);
    assert.equal(asks.length, 3, 'no node was asked for a create the last admission left no room for');
  } finally {
    await f.close();
  }
});

/** Runs `fn` on a fresh service harness, recording the sandboxes its node hands out. */
async function withTakes(fn: (h: SandboxHarness, taken: string[]) => Promise<void>): Promise<void> {
  const h = await buildSandboxHarness();
  const taken: string[] = [];
  const take = h.node.take.bind(h.node);
  h.node.take = async (ask) => {
    const t = await take(ask);
    taken.push(t.id);
    return t;
  };
  try {
    await fn(h, taken);
  } finally {
    await h.close();
  }
}

/** Nothing of the organization's creates is left: no row (placeholder or not), no route, nothing on the node, no quota held. */
async function nothingLeft(h: SandboxHarness, org: string, taken: string[]): Promise<void> {
  assert.deepEqual((await h.store.sandboxes.live()).filter((r) => r.orgId === org), [], 'no row');
  for (const id of taken) {
    assert.equal(await h.store.sandboxes.byId(id), undefined, `no row for ${id}`);
    assert.equal(h.routes.get(id), undefined, `no route for ${id}`);
    assert.equal(h.gateway.opened.has(id), false, `no public_host for ${id}`);
  }
  assert.deepEqual(await h.runtime.list(), [], 'nothing on the node');
  assert.equal((await h.quotas.usage(org)).sandboxes, 0, 'no quota held');
  assert.ok(!h.events.some((e) => e.kind === 'created'), 'no create reported');
}

test('a create whose gateway fails to open after its take is undone: no row, no route, no sandbox on the node', () =>
  withTakes(async (h, taken) => {
    h.gateway.failOpen = new Error('listen EADDRINUSE 0.0.0.0:40000');
    const err = await rejectsWith(h.create(h.orgs.a), 'RUNTIME_ERROR');
    assert.ok(!err.message.includes('EADDRINUSE'), 'the cause stays in the detail');
    assert.equal(taken.length, 1, 'the node gave a sandbox');
    assert.ok(h.gateway.closed.includes(taken[0]!), 'its public_host is closed again');
    await nothingLeft(h, h.orgs.a, taken);
    h.gateway.failOpen = undefined;
    assert.equal((await h.create(h.orgs.a)).sandbox.status, 'running', 'the next create works');
  }));

test("a create whose placeholder a clean-up took (the store's replace refuses) is undone, as is one whose replace was written but not answered", () =>
  withTakes(async (h, taken) => {
    const replace = h.store.sandboxes.replace.bind(h.store.sandboxes);
    h.store.sandboxes.replace = async () => false;
    await rejectsWith(h.create(h.orgs.a), 'RUNTIME_ERROR').then((e) => assert.match(e.message, /abandoned/));
    await nothingLeft(h, h.orgs.a, taken);
    h.store.sandboxes.replace = async (oldId, row) => {
      await replace(oldId, row);
      throw new Error('connection reset while reading the answer');
    };
    await rejectsWith(h.create(h.orgs.a), 'RUNTIME_ERROR');
    assert.equal(taken.length, 2);
    await nothingLeft(h, h.orgs.a, taken);
    h.store.sandboxes.replace = replace;
  }));

test('what is refused before any node is asked: no template, a bad network, too big, too long, forks and snapshots without snapshots', () =>
  withTakes(async (h, taken) => {
    const org = h.orgs.a;
    const { sandbox } = await h.sandboxes.create(org, { template_name: 'base' });
    taken.length = 0;
    await h.store.orgs.setLimits(org, { max_timeout_seconds: 3600 });
    await rejectsWith(h.sandboxes.create(org, {}), 'VALIDATION_ERROR');
    await rejectsWith(h.sandboxes.create(org, { template_name: 'no-such-template' }), 'TEMPLATE_NOT_FOUND');
    await rejectsWith(h.create(org, { internet_access: false, allow_out: ['pypi.org'] }), 'VALIDATION_ERROR');
    await rejectsWith(h.create(org, { deny_out: ['example.com:443'] }), 'VALIDATION_ERROR', { field: 'deny_out' });
    await rejectsWith(h.create(org, { timeout_seconds: 3601 }), 'LIMIT_EXCEEDED', { limit: 'max_timeout_seconds' });
    await h.store.orgs.setLimits(org, { max_memory_mb: 256 });
    await rejectsWith(h.create(org), 'LIMIT_EXCEEDED', { limit: 'max_memory_mb', max: 256, requested: 512 });
    await rejectsWith(h.sandboxes.create(org, { snapshot_id: 'snap1', template_name: 'base' }), 'VALIDATION_ERROR');
    await rejectsWith(h.sandboxes.create(org, { snapshot_id: 'snap1' }), 'RUNTIME_ERROR');
    await rejectsWith(h.sandboxes.fork(org, sandbox.id, { count: 2 }), 'RUNTIME_ERROR');
    assert.deepEqual(taken, [], 'no node was asked');
    assert.deepEqual(await h.runtime.list(), [sandbox.id], 'the source alone is on the node');
    assert.deepEqual((await h.store.sandboxes.live()).map((r) => r.id), [sandbox.id], 'and alone in the store');
  }));

test('a create records the node placement chose, its gateway port and a token for it, and reports it', () =>
  withTakes(async (h, taken) => {
    const created = await h.create(h.orgs.a, { timeout_seconds: 300, env_vars: { A: '1' } });
    const id = created.sandbox.id;
    assert.deepEqual(taken, [id], "the sandbox is the node's, under the node's id");
    const row = await h.row(id);
    assert.deepEqual([row.status, row.nodeId, row.gatewayPort], ['running', 'fake-node', h.gateway.opened.get(id)]);
    assert.equal(created.sandbox.public_host, `http://127.0.0.1:${row.gatewayPort}`);
    assert.ok(Math.abs(Date.parse(row.expiresAt!) - Date.now() - 300_000) < 5000);
    assert.deepEqual(row.envVars, { A: '1' });
    assert.equal((await h.tokens.verify(created.token, id)).orgId, h.orgs.a);
    assert.equal(h.routes.get(id)?.status, 'running');
    assert.deepEqual(h.events.map((e) => [e.kind, e.data.id]), [['created', id]]);
    assert.equal((await h.quotas.usage(h.orgs.a)).sandboxes, 1);
  }));
