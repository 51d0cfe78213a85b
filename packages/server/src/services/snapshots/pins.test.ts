// Snapshot layers pinned across replicas: a create or restore through replica B from a snapshot
// whose layer replica A holds keeps A's collection from removing it, until B's row references it
// (here: until B's work ends). Both "replicas" share one store, as two control processes share
// PostgreSQL; the pins are the store's, so the same holds on either store.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { FsLayerStore } from '../../images/layer-store.js';
import { SqliteStore } from '../../store/sqlite.js';
import { SnapshotService } from './index.js';

describe('snapshot layers pinned across replicas', () => {
  let dir: string;
  const store = SqliteStore.open(':memory:');
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-pins-'));
  });
  after(async () => {
    store.close();
    await rm(dir, { recursive: true, force: true });
  });

  const replica = (name: string, shared: boolean) =>
    new SnapshotService({
      store,
      locks: undefined as never,
      quotas: undefined as never,
      templates: undefined as never,
      sandbox: undefined as never,
      settle: async () => undefined,
      layers: new FsLayerStore(join(dir, name)),
      placement: undefined as never,
      ...(shared ? { sharedPins: store.rates } : {}),
      log: () => undefined,
    });

  const layerOn = async (svcDir: string, id: string) => {
    const layers = new FsLayerStore(join(dir, svcDir));
    await layers.ensureLayer(id, async (tree) => (await writeFile(join(tree, 'f'), 'x'), { kind: 'snapshot', sizeBytes: 1, entries: 1 }), () => undefined);
    return layers;
  };

  for (const shared of [true, false]) {
    test(shared ? "A's collection keeps a layer B has pinned, and takes it once B is done" : 'without shared pins (one machine), the other process\'s pin is not seen', async () => {
      const id = (shared ? 'a' : 'b').repeat(64);
      const aDir = `a-${shared}`;
      const aLayers = await layerOn(aDir, id);
      const a = replica(aDir, shared);
      const b = replica(`b-${shared}`, shared);
      let release!: () => void;
      const holding = new Promise<void>((r) => (release = r));
      let pinnedNow!: () => void;
      const isPinned = new Promise<void>((r) => (pinnedNow = r));
      const work = b.pinned([id], async () => {
        pinnedNow();
        await holding;
      });
      await isPinned;
      await a.collectSoon();
      assert.equal(await aLayers.has(id), shared, shared ? "kept while B's create holds it" : 'taken: nothing told A');
      release();
      await work;
      await a.collectSoon();
      assert.equal(await aLayers.has(id), false, 'taken once nothing holds it');
    });
  }
});
