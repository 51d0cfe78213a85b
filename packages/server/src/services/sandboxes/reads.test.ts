// Reads (reads.ts) on the fake node: an organization's list, page by page, filtered; one
// sandbox's resource use, as its node reports it (a node that is away is said so).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { buildSandboxHarness, rejectsWith, type SandboxHarness } from '../../testing/sandbox-harness.js';

const MIB = 1024 * 1024;
const cursorOf = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

describe('list', () => {
  let h: SandboxHarness;
  let org: string;
  const ids: Record<string, string> = {};
  before(async () => {
    h = await buildSandboxHarness();
    org = h.orgs.a;
    for (const name of ['r1', 'r2', 'r3', 'paused', 'stopped', 'deleted']) ids[name] = (await h.create(org)).sandbox.id;
    ids.eu = (await h.create(org, { region: 'eu-west' })).sandbox.id;
    ids.theirs = (await h.create(h.orgs.b)).sandbox.id;
    await h.sandboxes.pause(org, ids.paused!);
    await h.sandboxes.stop(org, ids.stopped!);
    await h.sandboxes.delete(org, ids.deleted!);
  });
  after(() => h?.close());

  const mine = () => ['r1', 'r2', 'r3', 'paused', 'stopped', 'eu'].map((n) => ids[n]!);

  test("pages follow each other by cursor: the organization's live sandboxes, each once, newest first", async () => {
    const all = await h.sandboxes.list(org, {});
    assert.deepEqual(all.data.map((s) => s.id).sort(), mine().sort(), 'neither the deleted one nor another organization\'s');
    assert.deepEqual([all.hasMore, all.nextCursor], [false, null]);
    const created = all.data.map((s) => Date.parse(s.created_at));
    assert.deepEqual(created, [...created].sort((a, b) => b - a), 'newest first');
    const paged: string[] = [];
    const more: boolean[] = [];
    let cursor: string | undefined;
    do {
      const page = await h.sandboxes.list(org, { limit: 4, cursor });
      assert.ok(page.data.length <= 4);
      paged.push(...page.data.map((s) => s.id));
      more.push(page.hasMore);
      cursor = page.nextCursor ?? undefined;
      assert.equal(page.hasMore, page.nextCursor !== null, 'a cursor exactly when there is more');
    } while (cursor);
    assert.deepEqual(paged, all.data.map((s) => s.id), 'the pages make the whole list, in its order');
    assert.deepEqual(more, [true, false]);
    const exact = await h.sandboxes.list(org, { limit: 6 });
    assert.deepEqual([exact.data.length, exact.hasMore, exact.nextCursor], [6, false, null], 'a page that ends the list says so');
  });

  test('filters: status, template (name or id), region', async () => {
    const idsOf = async (q: Parameters<SandboxHarness['sandboxes']['list']>[1]) => (await h.sandboxes.list(org, q)).data.map((s) => s.id).sort();
    assert.deepEqual(await idsOf({ status: 'paused' }), [ids.paused]);
    assert.deepEqual(await idsOf({ status: 'stopped' }), [ids.stopped]);
    assert.deepEqual(await idsOf({ status: 'running' }), [ids.r1, ids.r2, ids.r3, ids.eu].sort());
    assert.deepEqual(await idsOf({ template: 'base' }), mine().sort());
    const templateId = (await h.row(ids.r1!)).templateId;
    assert.deepEqual(await idsOf({ template: templateId }), mine().sort());
    assert.deepEqual(await idsOf({ template: 'python' }), []);
    assert.deepEqual(await idsOf({ region: 'eu-west' }), [ids.eu]);
    assert.deepEqual(await idsOf({ region: 'eu-west', status: 'stopped' }), []);
  });

  test('a cursor that is not one given as next_cursor, or a status that is not listed, is VALIDATION_ERROR', async () => {
    for (const cursor of ['%%%', cursorOf([1, 2]), cursorOf({ created_at: 'x', id: 'y' }), cursorOf('just a string'), cursorOf(['a', 'b', 'c']), Buffer.from('not json').toString('base64url')]) {
      await rejectsWith(h.sandboxes.list(org, { cursor }), 'VALIDATION_ERROR');
    }
    for (const status of ['deleted', 'creating', 'RUNNING']) await rejectsWith(h.sandboxes.list(org, { status }), 'VALIDATION_ERROR');
    // A well-formed cursor past everything is an empty page, not an error.
    const past = await h.sandboxes.list(org, { cursor: cursorOf(['1970-01-01T00:00:00.000Z', 'sb']) });
    assert.deepEqual([past.data, past.hasMore], [[], false]);
  });
});

describe('metrics', () => {
  let h: SandboxHarness;
  let org: string;
  before(async () => {
    h = await buildSandboxHarness();
    org = h.orgs.a;
  });
  after(() => h?.close());

  test("a running sandbox's use as its node reports it; a stopped one has its disk only", async () => {
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    h.runtime.writeFile(id, '/home/user/notes.txt', 'hello world');
    h.runtime.triggerOom(id, 2);
    const running = await h.sandboxes.metrics(org, id);
    assert.equal(running.sandbox_id, id);
    assert.equal(running.status, 'running');
    assert.deepEqual(running.cpu, { usage_seconds: 0, vcpu: 1 });
    assert.deepEqual(running.memory, { used_bytes: 0, limit_bytes: 512 * MIB });
    assert.deepEqual(running.disk, { used_bytes: 11, total_bytes: 2 * 1024 * MIB });
    assert.deepEqual([running.pids, running.oom_kills, running.egress_denied], [1, 2, 0]);
    assert.ok(Math.abs(Date.parse(running.timestamp) - Date.now()) < 5000);
    await h.sandboxes.stop(org, id);
    const stopped = await h.sandboxes.metrics(org, id);
    assert.equal(stopped.status, 'stopped');
    assert.equal(stopped.pids, 0);
    assert.equal(stopped.memory.limit_bytes, 512 * MIB, "the node reports no limit for a stopped one: the sandbox's own is given");
    assert.deepEqual(stopped.disk, { used_bytes: 11, total_bytes: 2 * 1024 * MIB }, 'its disk stays');
    await rejectsWith(h.sandboxes.metrics(h.orgs.b, id), 'PERMISSION_DENIED');
    await h.sandboxes.delete(org, id);
    await rejectsWith(h.sandboxes.metrics(org, id), 'NOT_FOUND');
  });

  test('a node that is away is NODE_UNAVAILABLE; any other failure of its stats reads as zeros', async () => {
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    h.runtime.writeFile(id, '/data', 'x'.repeat(100));
    const stats = h.node.stats.bind(h.node);
    try {
      h.node.stats = () => Promise.reject(new ServiceError('NODE_UNAVAILABLE', 'node fake-node is not answering', { retry_after: 10 }));
      await rejectsWith(h.sandboxes.metrics(org, id), 'NODE_UNAVAILABLE');
      h.node.stats = () => Promise.reject(new Error('cgroup file vanished'));
      const zero = await h.sandboxes.metrics(org, id);
      assert.equal(zero.status, 'running');
      assert.deepEqual(zero.memory, { used_bytes: 0, limit_bytes: 512 * MIB });
      assert.deepEqual(zero.disk, { used_bytes: 0, total_bytes: 2 * 1024 * MIB });
      assert.deepEqual([zero.pids, zero.oom_kills, zero.network.rx_bytes, zero.cpu.usage_seconds], [0, 0, 0, 0]);
    } finally {
      h.node.stats = stats;
    }
    assert.equal((await h.sandboxes.metrics(org, id)).disk.used_bytes, 100, 'read again once the node answers');
  });
});
