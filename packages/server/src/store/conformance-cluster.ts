import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { NodeCapacity, NodeRegistration, NodeReport, Store } from './types/index.js';

/**
 * The part of the store conformance suite (conformance.ts) on what the processes of a cluster share
 * through the store: nodes and their leases, uploaded blobs, build logs.
 */
export function clusterConformance(name: string, open: () => Promise<Store>): void {
  const capacity: NodeCapacity = { vcpu: 8, memoryMb: 16384, diskGb: 200, maxSandboxes: 50 };
  const node = (id: string, over: Partial<NodeRegistration> = {}): NodeRegistration => ({ id, url: `http://10.0.0.1:7000/${id}`, capacity, ...over });
  const report = (over: Partial<NodeReport> = {}): NodeReport => ({
    usage: { sandboxes: 3, vcpu: 3, memoryMb: 1536, diskGb: 6 },
    warm: { 'k-base': 2, 'k-python': 1 },
    layersDigest: 'sha256:aaaa',
    ...over,
  });
  const T0 = '2030-01-01T00:00:00.000Z';
  const plus = (ms: number, from = T0) => new Date(Date.parse(from) + ms).toISOString();

  test(`${name}: nodes: a new node is active with nothing reported; registering again takes its URL and capacity and keeps the operator's status`, async () => {
    const s = await open();
    const first = await s.nodes.register(node('n1'), 30_000, T0);
    assert.deepEqual(first, {
      id: 'n1',
      url: 'http://10.0.0.1:7000/n1',
      status: 'active',
      capacity,
      usage: { sandboxes: 0, vcpu: 0, memoryMb: 0, diskGb: 0 },
      warm: {},
      layersDigest: null,
      version: 0,
      heartbeatAt: T0,
      leaseExpiresAt: plus(30_000),
      registeredAt: T0,
      updatedAt: T0,
    });
    assert.deepEqual(await s.nodes.byId('n1'), first);
    await s.nodes.heartbeat('n1', report(), 30_000, plus(1000));
    assert.equal(await s.nodes.setStatus('n1', 'cordoned'), true);

    // The node restarts (a new address, a disk grown): still cordoned, its last report kept, a new lease.
    const bigger = { ...capacity, diskGb: 400 };
    const again = await s.nodes.register(node('n1', { url: 'https://node-1.internal:7443', capacity: bigger }), 10_000, plus(60_000));
    assert.deepEqual(again, {
      ...first,
      url: 'https://node-1.internal:7443',
      status: 'cordoned',
      capacity: bigger,
      usage: report().usage,
      warm: report().warm,
      layersDigest: 'sha256:aaaa',
      version: 3,
      heartbeatAt: plus(60_000),
      leaseExpiresAt: plus(70_000),
      updatedAt: plus(60_000),
    });
    assert.equal(again.registeredAt, T0, 'when it first joined');

    // Replicas of a node's start racing each other make one row.
    await Promise.all([1, 2, 3, 4].map(() => s.nodes.register(node('n2'), 30_000, T0)));
    assert.deepEqual((await s.nodes.list()).map((n) => [n.id, n.version]), [['n1', 3], ['n2', 3]]);
    s.close();
  });

  test(`${name}: nodes: a heartbeat takes the report and moves the lease; capacity only when sent`, async () => {
    const s = await open();
    await s.nodes.register(node('n1'), 30_000, T0);
    const hb = await s.nodes.heartbeat('n1', report(), 15_000, plus(5000));
    assert.deepEqual(hb && { ...hb }, {
      ...(await s.nodes.byId('n1')),
      usage: { sandboxes: 3, vcpu: 3, memoryMb: 1536, diskGb: 6 },
      warm: { 'k-base': 2, 'k-python': 1 },
      layersDigest: 'sha256:aaaa',
      capacity,
      version: 1,
      heartbeatAt: plus(5000),
      leaseExpiresAt: plus(20_000),
      updatedAt: plus(5000),
    });
    // A report replaces the last one whole: a key no longer warm is gone, the digest may go back to null.
    const next = await s.nodes.heartbeat('n1', report({ warm: { 'k-go': 4 }, layersDigest: null, capacity: { ...capacity, maxSandboxes: 10 } }), 15_000, plus(10_000));
    assert.deepEqual([next?.warm, next?.layersDigest, next?.capacity.maxSandboxes, next?.version], [{ 'k-go': 4 }, null, 10, 2]);
    const stays = await s.nodes.heartbeat('n1', report({ warm: {} }), 15_000, plus(15_000));
    assert.deepEqual([stays?.warm, stays?.capacity.maxSandboxes], [{}, 10], 'capacity not sent: the last one stays');
    assert.equal((await s.nodes.byId('n1'))?.status, 'active');
    s.close();
  });

  test(`${name}: nodes: a node that is not registered, or was removed, gets nothing from a heartbeat and no row`, async () => {
    const s = await open();
    assert.equal(await s.nodes.heartbeat('ghost', report(), 30_000, T0), undefined);
    assert.deepEqual(await s.nodes.list(), []);
    await s.nodes.register(node('n1'), 30_000, T0);
    assert.equal(await s.nodes.remove('n1'), true);
    assert.equal(await s.nodes.remove('n1'), false);
    assert.equal(await s.nodes.heartbeat('n1', report(), 30_000, plus(1000)), undefined, 'removed: it must register again');
    assert.equal(await s.nodes.byId('n1'), undefined);
    assert.deepEqual(await s.nodes.live(plus(1000)), []);
    const back = await s.nodes.register(node('n1'), 30_000, plus(2000));
    assert.deepEqual([back.status, back.version, back.registeredAt, back.warm], ['active', 0, plus(2000), {}], 'a new node, as if for the first time');
    s.close();
  });

  test(`${name}: nodes: a removal outlives the node's row; it refuses a registration but with a credential made after it; admit forgets it`, async () => {
    const s = await open();
    assert.equal(await s.nodes.removedAt('n1'), undefined);
    await s.nodes.register(node('n1'), 30_000, T0);
    assert.equal(await s.nodes.recordRemoval('n1', plus(1000)), plus(1000));
    assert.equal(await s.nodes.remove('n1'), true);
    assert.equal(await s.nodes.removedAt('n1'), plus(1000), 'kept with the row gone');
    // A node on the database (no credential) is refused whatever the time; one with a credential
    // made at or before the removal too; nothing is written.
    for (const issuedAt of [undefined, T0, plus(1000)]) {
      assert.equal(await s.nodes.registerUnlessRemoved(node('n1'), 30_000, issuedAt, plus(2000)), undefined, `credential of ${issuedAt ?? 'none'}`);
    }
    assert.equal(await s.nodes.byId('n1'), undefined);
    // A credential made after it: registered, as register() registers.
    const back = await s.nodes.registerUnlessRemoved(node('n1'), 30_000, plus(1001), plus(2000));
    assert.deepEqual([back?.status, back?.version, back?.registeredAt, back?.leaseExpiresAt], ['active', 0, plus(2000), plus(32_000)]);
    assert.deepEqual(await s.nodes.byId('n1'), back);
    await s.nodes.setStatus('n1', 'cordoned');
    const again = await s.nodes.registerUnlessRemoved(node('n1', { url: 'https://node-1.internal:7443' }), 10_000, plus(1001), plus(3000));
    assert.deepEqual([again?.url, again?.status, again?.version, again?.registeredAt], ['https://node-1.internal:7443', 'cordoned', 2, plus(2000)], 'a known node: its new URL, the status kept');

    // Removed again while its row is there: the registration changes nothing of the row.
    assert.equal(await s.nodes.recordRemoval('n1', plus(4000)), plus(4000), 'a later removal moves the time');
    assert.equal(await s.nodes.registerUnlessRemoved(node('n1'), 60_000, plus(1001), plus(5000)), undefined);
    assert.deepEqual(await s.nodes.byId('n1'), again, 'untouched');
    assert.equal(await s.nodes.recordRemoval('n1', plus(500)), plus(4000), 'an earlier one never moves it back');
    assert.ok(await s.nodes.registerUnlessRemoved(node('n2'), 30_000, undefined, plus(5000)), 'another node is not concerned');

    assert.equal(await s.nodes.admit('n1'), true);
    assert.equal(await s.nodes.admit('n1'), false);
    assert.equal(await s.nodes.removedAt('n1'), undefined);
    assert.equal((await s.nodes.registerUnlessRemoved(node('n1'), 30_000, undefined, plus(6000)))?.leaseExpiresAt, plus(36_000), 'admitted: it registers');

    // Without now, the store's clock, written as toISOString() writes times.
    const t = Date.now();
    const stamped = await s.nodes.recordRemoval('n3');
    assert.equal(new Date(stamped).toISOString(), stamped);
    assert.ok(Math.abs(Date.parse(stamped) - t) < 5000, stamped);

    for (const id of ['', 'Node1', 'x'.repeat(64), 42, null]) {
      await assert.rejects(s.nodes.recordRemoval(id as string), TypeError);
      await assert.rejects(s.nodes.removedAt(id as string), TypeError);
      await assert.rejects(s.nodes.admit(id as string), TypeError);
      await assert.rejects(s.nodes.registerUnlessRemoved(node(id as string), 30_000), TypeError);
    }
    await assert.rejects(s.nodes.registerUnlessRemoved(node('n1'), 30_000, 'yesterday'), TypeError);
    await assert.rejects(s.nodes.recordRemoval('n1', 'not a time'), TypeError);
    s.close();
  });

  test(`${name}: nodes: live() holds those whose lease runs past now, whatever their status; list() every node; both by id in byte order`, async () => {
    const s = await open();
    // By bytes '-' < '0' < '9' < 'a'; a linguistic collation would put a-2 after a1.
    for (const id of ['b', 'a1', 'a-2', '9z', 'a']) await s.nodes.register(node(id), 10_000, T0);
    await s.nodes.heartbeat('b', report(), 60_000, plus(5000));
    await s.nodes.setStatus('a1', 'draining');
    const order = ['9z', 'a', 'a-2', 'a1', 'b'];
    assert.deepEqual((await s.nodes.list()).map((n) => n.id), order);
    assert.deepEqual((await s.nodes.live(plus(9999))).map((n) => n.id), order);
    assert.deepEqual((await s.nodes.live(plus(10_000))).map((n) => n.id), ['b'], 'a lease that ends at now has ended');
    assert.deepEqual((await s.nodes.live(plus(65_000))).map((n) => n.id), []);
    assert.deepEqual((await s.nodes.list()).map((n) => n.id), order, 'a lost node is still listed');
    // A lost node that heartbeats again is live again.
    await s.nodes.heartbeat('a1', report(), 10_000, plus(70_000));
    const live = await s.nodes.live(plus(71_000));
    assert.deepEqual(live.map((n) => [n.id, n.status]), [['a1', 'draining']]);
    s.close();
  });

  test(`${name}: nodes: without now, times are the store's clock, written as toISOString() writes them`, async () => {
    const s = await open();
    const before = Date.now();
    const n = await s.nodes.register(node('n1'), 60_000);
    const after = Date.now();
    for (const t of [n.heartbeatAt, n.leaseExpiresAt, n.registeredAt, n.updatedAt]) assert.match(t, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    // The database's clock may be another machine's: a generous margin, the shape is what matters.
    assert.ok(Math.abs(Date.parse(n.heartbeatAt) - before) < 5000 && Math.abs(Date.parse(n.heartbeatAt) - after) < 5000, n.heartbeatAt);
    assert.equal(Date.parse(n.leaseExpiresAt) - Date.parse(n.heartbeatAt), 60_000);
    assert.deepEqual((await s.nodes.live()).map((r) => r.id), ['n1']);
    await s.nodes.register(node('n2'), 1);
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual((await s.nodes.live()).map((r) => r.id), ['n1'], 'a lease of 1 ms is over 20 ms later');
    const hb = await s.nodes.heartbeat('n2', report(), 60_000);
    assert.ok(hb && hb.heartbeatAt > n.heartbeatAt && hb.leaseExpiresAt > hb.heartbeatAt);
    assert.equal(await s.nodes.setStatus('n2', 'cordoned'), true);
    const cordoned = await s.nodes.byId('n2');
    assert.ok(cordoned && cordoned.updatedAt >= hb.updatedAt && cordoned.version === hb.version + 1);
    assert.deepEqual((await s.nodes.live()).map((r) => r.id), ['n1', 'n2']);
    s.close();
  });

  test(`${name}: nodes: setStatus and remove say whether the node exists`, async () => {
    const s = await open();
    await s.nodes.register(node('n1'), 30_000, T0);
    for (const status of ['cordoned', 'draining', 'active'] as const) {
      assert.equal(await s.nodes.setStatus('n1', status), true);
      assert.equal((await s.nodes.byId('n1'))?.status, status);
    }
    assert.equal((await s.nodes.byId('n1'))?.version, 3);
    assert.equal(await s.nodes.setStatus('nobody', 'cordoned'), false);
    assert.equal(await s.nodes.byId('nobody'), undefined);
    assert.equal(await s.nodes.remove('nobody'), false);
    assert.equal(await s.nodes.remove('n1'), true);
    assert.deepEqual(await s.nodes.list(), []);
    s.close();
  });

  test(`${name}: nodes: bad input is a TypeError before any SQL, and writes nothing`, async () => {
    const s = await open();
    await s.nodes.register(node('n1'), 30_000, T0);
    const bad = async (what: string, call: () => Promise<unknown>) => {
      await assert.rejects(call(), (err: unknown) => {
        assert.ok(err instanceof TypeError, `${what}: ${String(err)}`);
        assert.ok(err.message.length < 400, `${what}: the message does not echo all of it`);
        return true;
      }, what);
    };
    const ids: unknown[] = ['x'.repeat(64), 'x'.repeat(10_000), '', 'Node1', 'node_1', 'node.1', '-n1', 'n1-', 'n1\n', 'ñ', 42, null, undefined];
    for (const id of ids) {
      const shown = JSON.stringify(id)?.slice(0, 20);
      await bad(`register ${shown}`, () => s.nodes.register(node(id as string), 30_000, T0));
      await bad(`heartbeat ${shown}`, () => s.nodes.heartbeat(id as string, report(), 30_000, T0));
      await bad(`byId ${shown}`, () => s.nodes.byId(id as string));
      await bad(`setStatus ${shown}`, () => s.nodes.setStatus(id as string, 'cordoned'));
      await bad(`remove ${shown}`, () => s.nodes.remove(id as string));
    }
    assert.equal((await s.nodes.register(node('a'.repeat(63)), 30_000, T0)).id.length, 63, '63 is allowed');
    assert.equal(await s.nodes.remove('a'.repeat(63)), true);
    for (const status of ['paused', 'ACTIVE', '', 'active ', "active'; --", null, 1]) {
      await bad(`status ${String(status)}`, () => s.nodes.setStatus('n1', status as 'active'));
    }
    for (const url of ['ftp://10.0.0.1/', 'not a url', '10.0.0.1:7000', 'http://user:secret@10.0.0.1:7000', `http://h/${'x'.repeat(3000)}`, 7000, undefined]) {
      await bad(`url ${String(url).slice(0, 20)}`, () => s.nodes.register(node('n1', { url: url as string }), 30_000, T0));
    }
    const caps: unknown[] = [undefined, null, [], { ...capacity, vcpu: -1 }, { ...capacity, memoryMb: 1.5 }, { ...capacity, diskGb: '200' }, { ...capacity, maxSandboxes: Infinity }, { vcpu: 1 }];
    for (const c of caps) {
      await bad(`capacity ${JSON.stringify(c)}`, () => s.nodes.register(node('n1', { capacity: c as NodeCapacity }), 30_000, T0));
      if (c !== undefined) await bad(`reported capacity ${JSON.stringify(c)}`, () => s.nodes.heartbeat('n1', report({ capacity: c as NodeCapacity }), 30_000, T0));
    }
    const reports: [string, unknown][] = [
      ['no report', undefined],
      ['no usage', { ...report(), usage: undefined }],
      ['negative usage', report({ usage: { sandboxes: -1, vcpu: 0, memoryMb: 0, diskGb: 0 } })],
      ['fractional usage', report({ usage: { sandboxes: 1, vcpu: 0.5, memoryMb: 0, diskGb: 0 } })],
      ['warm as an array', report({ warm: [1, 2] as never })],
      ['a negative warm count', report({ warm: { k: -1 } })],
      ['a warm count that is text', report({ warm: { k: '2' as never } })],
      ['an empty warm key', report({ warm: { '': 1 } })],
      ['a long warm key', report({ warm: { ['k'.repeat(257)]: 1 } })],
      ['too many warm keys', report({ warm: Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [`k${i}`, 1])) })],
      ['a digest with a space', report({ layersDigest: 'sha256: aaaa' })],
      ['a long digest', report({ layersDigest: 'a'.repeat(257) })],
      ['an empty digest', report({ layersDigest: '' })],
      ['no digest', { ...report(), layersDigest: undefined }],
    ];
    for (const [what, r] of reports) await bad(what, () => s.nodes.heartbeat('n1', r as NodeReport, 30_000, T0));
    for (const leaseMs of [0, -1, 1.5, NaN, Infinity, 24 * 3600 * 1000 + 1, '30000']) {
      await bad(`lease ${String(leaseMs)}`, () => s.nodes.register(node('n1'), leaseMs as number, T0));
      await bad(`lease ${String(leaseMs)}`, () => s.nodes.heartbeat('n1', report(), leaseMs as number, T0));
    }
    for (const now of ['yesterday', '', 'x'.repeat(10_000), 0]) {
      await bad(`now ${String(now).slice(0, 20)}`, () => s.nodes.register(node('n1'), 30_000, now as string));
      await bad(`now ${String(now).slice(0, 20)}`, () => s.nodes.heartbeat('n1', report(), 30_000, now as string));
      await bad(`now ${String(now).slice(0, 20)}`, () => s.nodes.live(now as string));
    }
    // Nothing of it was written: n1 is as registered.
    const n1 = await s.nodes.byId('n1');
    assert.deepEqual([n1?.status, n1?.version, n1?.url, n1?.capacity, n1?.warm], ['active', 0, 'http://10.0.0.1:7000/n1', capacity, {}]);
    assert.deepEqual((await s.nodes.list()).map((n) => n.id), ['n1']);
    // A time in another zone or without milliseconds is the same instant, written the one way.
    const other = await s.nodes.heartbeat('n1', report(), 1000, '2030-01-01T01:00:00+01:00');
    assert.deepEqual([other?.heartbeatAt, other?.leaseExpiresAt], [T0, plus(1000)]);
    s.close();
  });

  test(`${name}: blobs: chunks in order, readable by content only once committed; the same content twice is kept once`, async () => {
    const store = await open();
    const sha = 'a'.repeat(64);
    await store.blobs.begin('b1', '2026-01-01T00:00:00.000Z');
    await store.blobs.append('b1', 0, Buffer.from('hello '));
    await store.blobs.append('b1', 1, new Uint8Array(Buffer.from('world')));
    assert.equal(await store.blobs.stat(sha), undefined, 'not readable before commit');
    assert.deepEqual(await store.blobs.chunks(sha, 0, 10), []);
    assert.equal(await store.blobs.commit('b1', sha, 11), 'stored');
    assert.deepEqual(await store.blobs.stat(sha), { size: 11 });
    assert.deepEqual((await store.blobs.chunks(sha, 0, 10)).map((c) => c.toString()), ['hello ', 'world']);
    assert.deepEqual((await store.blobs.chunks(sha, 1, 1)).map((c) => c.toString()), ['world']);
    assert.deepEqual(await store.blobs.chunks(sha, 2, 1), [], 'past the end');
    await assert.rejects(store.blobs.append('b1', 2, Buffer.from('more')), /not being written/, 'a committed blob takes no more chunks');
    assert.deepEqual((await store.blobs.chunks(sha, 0, 10)).map((c) => c.toString()), ['hello ', 'world']);

    // A second upload of the same bytes: dropped, the first stays whole.
    await store.blobs.begin('b2', '2026-01-01T00:00:00.000Z');
    await store.blobs.append('b2', 0, Buffer.from('hello world'));
    assert.equal(await store.blobs.commit('b2', sha, 11), 'exists');
    assert.deepEqual((await store.blobs.chunks(sha, 0, 10)).map((c) => c.toString()), ['hello ', 'world']);
    await assert.rejects(store.blobs.append('b2', 1, Buffer.from('x')), /not being written/);

    // Two replicas committing the same content at once: one stores it, the other's is dropped.
    const raced = 'd'.repeat(64);
    for (const id of ['r1', 'r2']) {
      await store.blobs.begin(id, '2026-01-01T00:00:00.000Z');
      await store.blobs.append(id, 0, Buffer.from('same'));
    }
    assert.deepEqual((await Promise.all([store.blobs.commit('r1', raced, 4), store.blobs.commit('r2', raced, 4)])).sort(), ['exists', 'stored']);
    assert.deepEqual((await store.blobs.chunks(raced, 0, 5)).map((c) => c.toString()), ['same']);

    // Binary bytes come back as they went in.
    const bin = Buffer.from([0, 255, 0x0a, 0xc3, 0x28, 1]);
    const sha2 = 'b'.repeat(64);
    await store.blobs.begin('b3', '2026-01-01T00:00:00.000Z');
    await store.blobs.append('b3', 0, bin);
    await store.blobs.commit('b3', sha2, bin.length);
    assert.deepEqual(await store.blobs.chunks(sha2, 0, 1), [bin]);
  });

  test(`${name}: blobs: discarded and stale uncommitted ones go with their chunks; committed ones stay`, async () => {
    const store = await open();
    await store.blobs.begin('gone', '2026-01-01T00:00:00.000Z');
    await store.blobs.append('gone', 0, Buffer.from('x'));
    await store.blobs.discard('gone');
    await assert.rejects(store.blobs.append('gone', 1, Buffer.from('y')), /not being written/);
    await store.blobs.begin('old', '2026-01-01T00:00:00.000Z');
    await store.blobs.append('old', 0, Buffer.from('x'));
    await store.blobs.begin('young', '2026-01-03T00:00:00.000Z');
    await store.blobs.begin('done', '2026-01-01T00:00:00.000Z');
    await store.blobs.append('done', 0, Buffer.from('kept'));
    await store.blobs.commit('done', 'c'.repeat(64), 4);
    await store.blobs.discard('done');
    assert.equal(await store.blobs.purgeUncommitted('2026-01-02T00:00:00.000Z'), 1);
    await assert.rejects(store.blobs.append('old', 1, Buffer.from('y')), /not being written/);
    await store.blobs.append('young', 0, Buffer.from('y'));
    assert.deepEqual((await store.blobs.chunks('c'.repeat(64), 0, 5)).map((c) => c.toString()), ['kept'], 'discard and purge leave a committed blob alone');
    // Bad input is a TypeError, before SQL.
    await assert.rejects(store.blobs.stat('../etc/passwd'), TypeError);
    await assert.rejects(store.blobs.chunks('c'.repeat(64), -1, 5), TypeError);
    await assert.rejects(store.blobs.commit('young', 'C'.repeat(64), 1), TypeError);
  });

  test(`${name}: blobs no upload references (old enough) are collected with their chunks; referenced ones stay`, async () => {
    const store = await open();
    const org = await store.orgs.create('blob-owner');
    const [kept, dropped, young] = ['e'.repeat(64), 'f'.repeat(64), '9'.repeat(64)];
    for (const [id, sha, at] of [['k', kept, '2026-01-01T00:00:00.000Z'], ['d', dropped, '2026-01-01T00:00:00.000Z'], ['y', young, '2026-01-05T00:00:00.000Z']] as const) {
      await store.blobs.begin(id, at);
      await store.blobs.append(id, 0, Buffer.from(id));
      await store.blobs.commit(id, sha, 1);
    }
    await store.uploads.upsert({ orgId: org.id, fileId: `f_${kept}`, path: 'k', sha256: kept, size: 1, kind: 'file', createdAt: '2026-01-01T00:00:00.000Z' });
    assert.deepEqual(await store.blobs.unreferenced('2026-01-02T00:00:00.000Z'), [dropped], 'the young one waits (its upload row may be coming)');
    assert.equal(await store.blobs.removeUnreferenced(kept), false, 'a referenced blob is never removed');
    assert.equal(await store.blobs.removeUnreferenced(dropped), true);
    assert.equal(await store.blobs.stat(dropped), undefined);
    assert.deepEqual(await store.blobs.chunks(dropped, 0, 5), []);
    assert.deepEqual((await store.blobs.chunks(kept, 0, 5)).map((c) => c.toString()), ['k']);
    // Its upload gone (retention), the kept one is collectable too.
    assert.equal(await store.uploads.removeOlderThan('2026-01-02T00:00:00.000Z'), 1);
    assert.deepEqual(await store.blobs.unreferenced('2026-01-02T00:00:00.000Z'), [kept]);
    store.close();
  });

  test(`${name}: build logs: appended in order, read from any offset, bounded; past the end is empty with the length`, async () => {
    const store = await open();
    assert.deepEqual(await store.buildLogs.read('tpl_none', 0, 100), { data: Buffer.alloc(0), size: 0 });
    assert.equal(await store.buildLogs.append('tpl_1', Buffer.from('one\n')), 4);
    assert.equal(await store.buildLogs.append('tpl_1', Buffer.from('two\nthr')), 11);
    // A character split across two appends comes back whole once both are read.
    const e = Buffer.from('é\n');
    assert.equal(await store.buildLogs.append('tpl_1', e.subarray(0, 1)), 12);
    assert.equal(await store.buildLogs.append('tpl_1', e.subarray(1)), 14);
    await store.buildLogs.append('tpl_2', Buffer.from('other build\n'));
    const all = await store.buildLogs.read('tpl_1', 0, 1000);
    assert.equal(all.size, 14);
    assert.equal(all.data.toString(), 'one\ntwo\nthré\n');
    assert.equal((await store.buildLogs.read('tpl_1', 5, 1000)).data.toString(), 'wo\nthré\n', 'from inside a row');
    assert.equal((await store.buildLogs.read('tpl_1', 2, 5)).data.toString(), 'e\ntwo', 'across rows, at most maxBytes');
    assert.deepEqual(await store.buildLogs.read('tpl_1', 14, 10), { data: Buffer.alloc(0), size: 14 }, 'at the end');
    assert.deepEqual(await store.buildLogs.read('tpl_1', 1_000_000, 10), { data: Buffer.alloc(0), size: 14 }, 'past the end');
    assert.equal((await store.buildLogs.read('tpl_2', 0, 100)).data.toString(), 'other build\n');
    await assert.rejects(store.buildLogs.read('tpl_1', -1, 10), TypeError);
    await assert.rejects(store.buildLogs.read('tpl_1', 0, 0), TypeError);
    await assert.rejects(store.buildLogs.read('tpl_1', 0.5, 10), TypeError);
  });
}
