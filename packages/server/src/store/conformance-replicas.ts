import assert from 'node:assert/strict';
import { test } from 'node:test';
import { migrationsFor } from './migrations.js';
import type { ReplicaEntry, Store } from './types/index.js';

/**
 * The part of the store conformance suite (conformance.ts) on what `sandboxd cluster status` reads:
 * the serving processes' own records, the orphans nodes report, the schema's version.
 */
export function replicaConformance(name: string, open: () => Promise<Store>): void {
  const T0 = '2030-01-01T00:00:00.000Z';
  const plus = (ms: number) => new Date(Date.parse(T0) + ms).toISOString();
  const entry = (id: string, over: Partial<ReplicaEntry> = {}): ReplicaEntry => ({
    id,
    role: 'control',
    hostname: 'ctl-1',
    pid: 4242,
    url: 'http://10.0.0.2:8080',
    version: '0.1.0',
    startedAt: T0,
    ...over,
  });

  test(`${name}: replicas: a beat records the process or moves its last sighting; a stop is kept until it beats again`, async () => {
    const s = await open();
    await s.replicas.beat(entry('ctl-1:4242:a'), T0);
    await s.replicas.beat(entry('edge-1:77:b', { role: 'edge', hostname: 'edge-1', pid: 77, url: 'http://10.0.0.3:8082' }), plus(500));
    await s.replicas.beat(entry('ctl-1:4242:a', { url: 'http://10.0.0.2:9090', hostname: 'renamed', startedAt: plus(1) }), plus(5000));
    const { now, replicas } = await s.replicas.list();
    assert.ok(!Number.isNaN(Date.parse(now)), 'the store clock');
    assert.deepEqual(replicas, [
      // Its start and host stay as first said; its URL is the latest.
      { ...entry('ctl-1:4242:a'), url: 'http://10.0.0.2:9090', seenAt: plus(5000), stoppedAt: null },
      { ...entry('edge-1:77:b', { role: 'edge', hostname: 'edge-1', pid: 77, url: 'http://10.0.0.3:8082' }), seenAt: plus(500), stoppedAt: null },
    ]);

    assert.equal(await s.replicas.stopped('ctl-1:4242:a', plus(6000)), true);
    assert.equal(await s.replicas.stopped('nobody', plus(6000)), false);
    assert.deepEqual((await s.replicas.list()).replicas.map((r) => [r.id, r.stoppedAt, r.seenAt]), [
      ['ctl-1:4242:a', plus(6000), plus(6000)],
      ['edge-1:77:b', null, plus(500)],
    ]);
    await s.replicas.beat(entry('ctl-1:4242:a'), plus(7000));
    assert.equal((await s.replicas.list()).replicas[0]!.stoppedAt, null, 'beating again, it runs');

    // Those not seen since a time are forgotten.
    assert.equal(await s.replicas.forget(plus(1000)), 1);
    assert.deepEqual((await s.replicas.list()).replicas.map((r) => r.id), ['ctl-1:4242:a']);
    s.close();
  });

  test(`${name}: replicas: the store's clock stamps a beat without a time; bad entries never reach SQL`, async () => {
    const s = await open();
    const before = Date.now();
    await s.replicas.beat(entry('ctl-2:1:c'));
    const { now, replicas } = await s.replicas.list();
    const seen = Date.parse(replicas[0]!.seenAt);
    // The database's clock (PostgreSQL's own) is this machine's here, to within a moment.
    assert.ok(Math.abs(seen - before) < 5000 && Date.parse(now) >= seen - 5, `${replicas[0]!.seenAt} / ${now}`);
    for (const bad of [
      { ...entry('x'), role: 'node' },
      { ...entry('x'), pid: 0 },
      { ...entry('x'), pid: 1.5 },
      { ...entry(''), role: 'edge' },
      { ...entry('x'), hostname: 'a\nb' },
      { ...entry('x'), url: 'x'.repeat(3000) },
      { ...entry('x'), startedAt: 'yesterday' },
    ]) {
      await assert.rejects(s.replicas.beat(bad as ReplicaEntry), TypeError, JSON.stringify(bad).slice(0, 120));
    }
    await assert.rejects(s.replicas.forget('soon'), TypeError);
    assert.equal((await s.replicas.list()).replicas.length, 1);
    s.close();
  });

  test(`${name}: nodes: a heartbeat's count of orphans is kept until the next, which may leave it out`, async () => {
    const s = await open();
    const capacity = { vcpu: 4, memoryMb: 8192, diskGb: 100, maxSandboxes: 20 };
    await s.nodes.register({ id: 'n1', url: 'http://10.0.0.1:7070', capacity }, 30_000, T0);
    assert.equal((await s.nodes.byId('n1'))!.orphans, undefined, 'nothing said yet');
    const usage = { sandboxes: 3, vcpu: 1, memoryMb: 512, diskGb: 2 };
    assert.equal((await s.nodes.heartbeat('n1', { usage, warm: {}, layersDigest: null, orphans: 2 }, 30_000, plus(1000)))!.orphans, 2);
    assert.equal((await s.nodes.list())[0]!.orphans, 2);
    // A node of an earlier release says nothing of them: unknown, not zero.
    assert.equal('orphans' in (await s.nodes.heartbeat('n1', { usage, warm: {}, layersDigest: null }, 30_000, plus(2000)))!, false);
    for (const orphans of [-1, 1.5, '3']) {
      await assert.rejects(s.nodes.heartbeat('n1', { usage, warm: {}, layersDigest: null, orphans: orphans as number }, 30_000), TypeError);
    }
    s.close();
  });

  test(`${name}: schema: its dialect, and the version it is at is the one this code brings it to`, async () => {
    const s = await open();
    const schema = await s.schema();
    assert.ok(schema.dialect === 'sqlite' || schema.dialect === 'postgres');
    assert.equal(schema.latest, migrationsFor(schema.dialect).length);
    assert.equal(schema.version, schema.latest);
    s.close();
  });
}
