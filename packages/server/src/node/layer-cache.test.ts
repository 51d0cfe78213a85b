import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { FsLayerStore } from '../images/layer-store.js';
import { parseMountInfo } from '../runtime/mounts.js';
import { LayerCache, mountedLayerIds, type LayerCacheOptions } from './layer-cache.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const layerId = (n: number) => n.toString(16).padStart(64, 'a');
const A = layerId(1);
const B = layerId(2);
const C = layerId(3);
const D = layerId(4);

describe('a node layer cache', () => {
  let scratch: string;
  before(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'sbd-layer-cache-'));
  });
  after(async () => {
    await rm(scratch, { recursive: true, force: true });
  });

  /** A store in a directory of its own with layers of `bytes` each, last used `agoMs[i]` before T. */
  const T = Date.UTC(2026, 0, 10, 12);
  let n = 0;
  async function fixture(used: Record<string, number>, bytes = 100) {
    const dir = join(scratch, `case-${++n}`);
    const store = new FsLayerStore(join(dir, 'layers'));
    for (const [id, agoMs] of Object.entries(used)) {
      await store.ensureLayer(
        id,
        async (tree) => {
          await writeFile(join(tree, 'file'), 'x'.repeat(bytes));
          return { kind: 'test', sizeBytes: bytes, entries: 1 };
        },
        () => undefined,
      );
      await store.markUsed(id, new Date(T - agoMs));
    }
    let sandboxes: string[] = [];
    let clock = T;
    const lines: string[] = [];
    const cache = (o: Partial<LayerCacheOptions> = {}) =>
      new LayerCache({
        store,
        recordsDir: join(dir, 'layer-use'),
        sandboxes: async () => sandboxes,
        budgetBytes: 0,
        maxIdleMs: 0,
        minAgeMs: 10 * MIN,
        intervalMs: 0,
        now: () => clock,
        mountInfo: async () => '',
        log: (l) => lines.push(l),
        ...o,
      });
    return { store, cache, lines, setSandboxes: (ids: string[]) => (sandboxes = ids), later: (ms: number) => (clock += ms) };
  }

  test('over budget: the least recently used go first, until the rest fit; the log says why', async () => {
    const f = await fixture({ [A]: 3 * HOUR, [B]: 1 * HOUR, [C]: 5 * HOUR, [D]: 2 * HOUR });
    const evicted = await f.cache({ budgetBytes: 250 }).pass();
    assert.deepEqual(evicted, [
      { id: C, bytes: 100, reason: 'budget' },
      { id: A, bytes: 100, reason: 'budget' },
    ]);
    assert.deepEqual(await f.store.list(), [B, D].sort());
    assert.deepEqual(await readdir(f.store.root), [B, D].sort(), 'nothing left behind (no renamed-away tree)');
    assert.ok(f.lines.some((l) => l.includes(`evicted layer ${C.slice(0, 12)}`) && l.includes('over the budget')), f.lines.join('\n'));
  });

  test('idle for longer than the maximum: evicted whatever the budget; 0 turns either limit off', async () => {
    const f = await fixture({ [A]: 8 * 24 * HOUR, [B]: 6 * 24 * HOUR, [C]: HOUR });
    assert.deepEqual(await f.cache().pass(), [], 'no budget, no max idle: nothing goes');
    const evicted = await f.cache({ maxIdleMs: 7 * 24 * HOUR }).pass();
    assert.deepEqual(evicted, [{ id: A, bytes: 100, reason: 'idle' }]);
    assert.deepEqual(await f.store.list(), [B, C].sort());
  });

  test('a layer used within the minimum age stays, even over budget', async () => {
    const f = await fixture({ [A]: 5 * MIN, [B]: 20 * MIN });
    assert.deepEqual((await f.cache({ budgetBytes: 1 }).pass()).map((e) => e.id), [B]);
    assert.deepEqual(await f.store.list(), [A]);
  });

  test('marking a layer used moves it to the back of the line', async () => {
    const f = await fixture({ [A]: 3 * HOUR, [B]: 2 * HOUR });
    await f.store.markUsed(A, new Date(T - HOUR));
    assert.deepEqual((await f.cache({ budgetBytes: 150 }).pass()).map((e) => e.id), [B]);
  });

  test("a sandbox's layers stay while it exists, after a restart too; they go once it is destroyed or found gone", async () => {
    const f = await fixture({ [A]: 5 * HOUR, [B]: 4 * HOUR, [C]: 3 * HOUR });
    f.setSandboxes(['sb-one', 'sb-two']);
    const first = f.cache({ budgetBytes: 1 });
    await first.use('sb-one', [A]);
    await first.use('sb-two', [B]);
    assert.deepEqual((await first.pass()).map((e) => e.id), [C]);
    // A new process reads the records the last one left.
    const restarted = f.cache({ budgetBytes: 1 });
    assert.deepEqual(await restarted.pass(), []);
    assert.deepEqual(await f.store.list(), [A, B].sort());
    // Destroyed through the node API: released at once.
    f.setSandboxes(['sb-two']);
    await restarted.release('sb-one');
    assert.deepEqual((await restarted.pass()).map((e) => e.id), [A]);
    // Gone without a word (the orphan collector, a crash): the runtime no longer lists it.
    f.setSandboxes([]);
    assert.deepEqual(await restarted.pass(), [], 'a record as fresh as the minimum age still holds');
    f.later(11 * MIN);
    assert.deepEqual((await restarted.pass()).map((e) => e.id), [B]);
    assert.ok(f.lines.some((l) => l.includes('sandbox sb-two is gone')), f.lines.join('\n'));
  });

  test("a fresh record of a sandbox the runtime does not list yet (a create under way) holds its layers", async () => {
    const f = await fixture({ [A]: 5 * HOUR });
    const cache = f.cache({ budgetBytes: 1 });
    await cache.use('sb-new', [A]);
    assert.deepEqual(await cache.pass(), []);
    assert.deepEqual(await f.store.list(), [A]);
  });

  test('a sandbox here with no record (made before records were kept): nothing is evicted', async () => {
    const f = await fixture({ [A]: 5 * HOUR });
    f.setSandboxes(['sb-old']);
    assert.deepEqual(await f.cache({ budgetBytes: 1, maxIdleMs: HOUR }).pass(), []);
    assert.deepEqual(await f.store.list(), [A]);
  });

  test('a layer a mount uses stays: overlay lowerdir (absolute or relative), bind or idmapped mount of its tree', () => {
    const root = '/data/sbd/layers';
    const mounts = parseMountInfo(
      [
        '20 1 8:1 / / rw - ext4 /dev/sda1 rw',
        '30 20 8:2 / /data rw - ext4 /dev/sdb1 rw',
        `40 20 0:50 / /data/sbd/sandboxes/s1/rootfs rw - overlay overlay rw,lowerdir=${root}/${A}/tree:${root}/${B}/tree,upperdir=/u,workdir=/w`,
        `41 20 0:51 / /x/rootfs rw - overlay overlay rw,lowerdir=${C}/tree:0:1,upperdir=/u,workdir=/w`,
        // An idmapped scratch clone of D's tree: its root is D's tree on /data's filesystem.
        `42 20 8:2 /sbd/layers/${D}/tree /data/sbd/sandboxes/s2/lower/0 ro,idmapped - ext4 /dev/sdb1 rw`,
        // The same path on another filesystem is not this store's layer.
        `43 20 8:1 /sbd/layers/${layerId(9)}/tree /mnt/other ro - ext4 /dev/sda1 rw`,
        `44 20 0:52 / /y rw - overlay overlay rw,lowerdir=/elsewhere/${layerId(8)}/tree,upperdir=/u,workdir=/w`,
        `45 30 0:53 / ${root}/${layerId(5)}/tree/proc rw - proc proc rw`,
      ].join('\n'),
    );
    assert.deepEqual([...mountedLayerIds(mounts, root)].sort(), [A, B, C, D, layerId(5)].sort());
  });

  test('a real bind mount and a real overlay of layers keep them (root only)', { skip: process.getuid?.() !== 0 && 'needs root' }, async () => {
    const f = await fixture({ [A]: 5 * HOUR, [B]: 5 * HOUR, [C]: 6 * HOUR });
    const at = join(scratch, `mnt-${n}`);
    await mkdir(join(at, 'bind'), { recursive: true });
    await mkdir(join(at, 'ovl'), { recursive: true });
    const run = (args: string[]) => {
      const r = spawnSync(args[0]!, args.slice(1), { encoding: 'utf8' });
      assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
    };
    try {
      run(['mount', '--bind', '-o', 'ro', f.store.path(A), join(at, 'bind')]);
      // Read-only overlays need two lowers.
      await mkdir(join(at, 'empty'));
      run(['mount', '-t', 'overlay', 'overlay', '-o', `lowerdir=${f.store.path(B)}:${join(at, 'empty')}`, join(at, 'ovl')]);
      const cache = f.cache({ budgetBytes: 1, mountInfo: undefined });
      assert.deepEqual((await cache.pass()).map((e) => e.id), [C]);
      assert.deepEqual(await f.store.list(), [A, B].sort());
    } finally {
      spawnSync('umount', [join(at, 'bind')]);
      spawnSync('umount', [join(at, 'ovl')]);
    }
    assert.deepEqual((await f.cache({ budgetBytes: 1, mountInfo: undefined }).pass()).map((e) => e.id), [A, B]);
  });

  test('removal is one rename: a reader finds the layer whole or not at all, and may fetch it again', async () => {
    const f = await fixture({ [A]: 5 * HOUR });
    const doomed = await f.store.detach(A);
    assert.ok(doomed && !doomed.endsWith(A), 'renamed away from its id');
    assert.equal(await f.store.has(A), false);
    assert.equal(await f.store.lastUsedMs(A), undefined);
    await f.store.markUsed(A);
    assert.deepEqual(await readdir(f.store.root).then((ns) => ns.filter((x) => x === A)), [], 'marking a missing layer makes nothing');
    await rm(doomed, { recursive: true });
    await f.store.ensureLayer(A, async () => ({ kind: 'test', sizeBytes: 1, entries: 0 }), () => undefined);
    assert.equal(await f.store.has(A), true);
  });

  test('over budget with only young layers left: another pass runs by itself once they are old enough', async () => {
    const f = await fixture({});
    await f.store.ensureLayer(A, async () => ({ kind: 'test', sizeBytes: 100, entries: 0 }), () => undefined);
    await f.store.markUsed(A);
    const cache = f.cache({ budgetBytes: 1, minAgeMs: 300, now: Date.now });
    try {
      assert.deepEqual(await cache.pass(), []);
      assert.equal(await f.store.has(A), true);
      for (const deadline = Date.now() + 5000; (await f.store.has(A)) && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 100));
      assert.equal(await f.store.has(A), false, f.lines.join('\n'));
    } finally {
      await cache.stop();
    }
  });

  test('one pass at a time: a second ask while one runs gets the same pass', async () => {
    const f = await fixture({ [A]: 5 * HOUR, [B]: 4 * HOUR });
    const cache = f.cache({ budgetBytes: 1 });
    const [one, two] = [cache.pass(), cache.pass()];
    assert.equal(one, two);
    assert.deepEqual((await one).map((e) => e.id), [A, B]);
  });
});
