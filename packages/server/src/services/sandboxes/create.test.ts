// Creates (create.ts) on the fake node, through the lifecycle API (inject): a create asks its node
// for a sandbox that carries the create's env_vars (the node sets them on the agent). Each create
// must get the sandbox of its own ask, never another's, even when the asks end in the other order;
// a client gone meanwhile creates nothing; the node is asked while the create is admitted only
// when the organization has ample room.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { agentGet } from '../../node/agent-client.js';
import type { TakeAsk } from '../../node/types.js';
import { buildFakeApp, type FakeApp } from '../../testing/fake-app.js';

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
