import assert from 'node:assert/strict';
import { test } from 'node:test';
import { OrphanCollector } from './orphans.js';
import type { SandboxRow } from '../store/types/index.js';

function setup(o: { held: string[]; rows: Array<{ id: string; nodeId: string }>; failStore?: boolean; handedGraceMs?: number; deleted?: string[] }) {
  const held = new Set(o.held);
  const destroyed: string[] = [];
  const logs: string[] = [];
  const collector = new OrphanCollector({
    nodeId: 'n1',
    graceMs: 60_000,
    ...(o.handedGraceMs === undefined ? {} : { handedGraceMs: o.handedGraceMs }),
    ...(o.deleted === undefined ? {} : { deletedIds: async (ids: string[]) => ids.filter((id) => o.deleted!.includes(id)) }),
    node: {
      list: async () => [...held],
      destroy: async (id: string) => {
        destroyed.push(id);
        held.delete(id);
      },
    },
    store: {
      sandboxes: {
        live: async (nodeId?: string) => {
          if (o.failStore) throw new Error('store away');
          return o.rows.filter((r) => r.nodeId === nodeId) as SandboxRow[];
        },
      } as never,
    },
    log: (m) => logs.push(m),
  });
  return { collector, held, destroyed, logs };
}

test('a sandbox no row of this node names and no claim covers goes only after it was seen so for the whole grace', async () => {
  const t0 = 1_000_000;
  const { collector, destroyed } = setup({ held: ['own', 'orphan', 'elsewhere'], rows: [{ id: 'own', nodeId: 'n1' }, { id: 'elsewhere', nodeId: 'n2' }] });
  await collector.collect(t0);
  assert.deepEqual(destroyed, [], 'first seen: the clock starts');
  await collector.collect(t0 + 59_000);
  assert.deepEqual(destroyed, []);
  await collector.collect(t0 + 60_000);
  // A row of another node does not make this node's copy anyone's.
  assert.deepEqual(destroyed.sort(), ['elsewhere', 'orphan']);
});

test("a claim keeps a control replica's unrecorded sandboxes; once it lapses they go after the grace", async () => {
  const t0 = Date.now();
  const { collector, destroyed } = setup({ held: ['pool1', 'pool2'], rows: [] });
  collector.claim('replica-a', ['pool1', 'pool2'], 120_000);
  await collector.collect(t0);
  await collector.collect(t0 + 100_000);
  assert.deepEqual(destroyed, []);
  // A new claim replaces the last one: pool2 was handed out and destroyed, say, or is no longer held.
  collector.claim('replica-a', ['pool1'], 120_000);
  await collector.collect(t0 + 110_000);
  await collector.collect(t0 + 171_000);
  assert.deepEqual(destroyed, ['pool2']);
  // The replica died: its claim lapsed at t0 + 120 s; from the first look after that (171 s) the grace runs.
  await collector.collect(t0 + 230_000);
  assert.deepEqual(destroyed, ['pool2']);
  await collector.collect(t0 + 232_000);
  assert.deepEqual(destroyed, ['pool2', 'pool1']);
});

test('a sandbox recorded during the grace is kept, and its clock is forgotten', async () => {
  const rows: Array<{ id: string; nodeId: string }> = [];
  const { collector, destroyed } = setup({ held: ['late'], rows });
  await collector.collect(0);
  rows.push({ id: 'late', nodeId: 'n1' });
  await collector.collect(30_000);
  rows.length = 0;
  await collector.collect(70_000);
  assert.deepEqual(destroyed, [], 'unowned again from 70 s: the grace starts over');
  await collector.collect(130_000);
  assert.deepEqual(destroyed, ['late']);
});

test('a store that cannot answer destroys nothing', async () => {
  const { collector, destroyed, logs } = setup({ held: ['x'], rows: [], failStore: true });
  await collector.collect(0);
  await collector.collect(1_000_000);
  assert.deepEqual(destroyed, []);
  assert.ok(logs.some((l) => l.includes('failed')));
});

test('claims are bounded in owners', () => {
  const { collector } = setup({ held: [], rows: [] });
  for (let i = 0; i < 64; i++) collector.claim(`o${i}`, [], 60_000);
  assert.throws(() => collector.claim('one-more', [], 60_000), RangeError);
  collector.claim('o3', ['a'], 60_000);
});

test('a sandbox handed out by a take that its asker neither claims nor records goes after the short grace; one claimed or recorded stays', async () => {
  const t0 = 2_000_000;
  const rows: Array<{ id: string; nodeId: string }> = [];
  const { collector, destroyed, logs } = setup({ held: ['lost', 'claimed', 'recorded', 'old'], rows, handedGraceMs: 4000 });
  await collector.collect(t0 - 10_000); // 'old' is seen unowned before any take
  for (const id of ['lost', 'claimed', 'recorded']) collector.handedOut(id, t0);
  collector.claim('control-a', ['claimed'], 60_000);
  rows.push({ id: 'recorded', nodeId: 'n1' });
  await collector.collect(t0 + 3000);
  assert.deepEqual(destroyed, [], 'within the short grace');
  await collector.collect(t0 + 4000);
  assert.deepEqual(destroyed, ['lost'], 'the one no one took up, and only it: the others are owned, and "old" has the whole grace');
  assert.match(logs.join('\n'), /handed out by a take/);
});

test("a sandbox whose row was deleted while its removal here was missed goes at the next look, without the grace", async () => {
  const t0 = 3_000_000;
  const { collector, destroyed, logs } = setup({ held: ['missed', 'unknown', 'own'], rows: [{ id: 'own', nodeId: 'n1' }], deleted: ['missed'] });
  await collector.collect(t0);
  assert.deepEqual(destroyed, ['missed'], 'the deleted one at once; the one no row names waits its grace');
  assert.match(logs.join('\n'), /row was deleted/);
});
