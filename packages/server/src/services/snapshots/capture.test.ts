// SnapshotService.capture: a layer made and then not announced (a cluster's madeLayer failed: the
// store unreachable, the digest not computed) is removed at once, not left for a later collection.
import type { Node } from '../../node/types.js';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { FsLayerStore } from '../../images/layer-store.js';
import type { SandboxRow } from '../../store/types/index.js';
import { SnapshotService } from './index.js';

describe('SnapshotService.capture when the layer cannot be announced', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-capture-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('the capture fails and its layer is gone', async () => {
    const layers = new FsLayerStore(join(dir, 'snapshot-layers'));
    const svc = new SnapshotService({
      store: undefined as never,
      locks: undefined as never,
      quotas: undefined as never,
      templates: undefined as never,
      sandbox: undefined as never,
      settle: async () => undefined,
      layers,
      placement: {
        node: () =>
          ({
            exportLayer: async (_id: string, dest: string) => {
              await writeFile(join(dest, 'f'), 'x');
              return { bytes: 1, allocated: 4096, entries: 2, frozenMs: 0 };
            },
          }) as unknown as Node,
        dropWarm: async () => undefined,
      },
      madeLayer: () => Promise.reject(new Error('the store cannot be reached')),
      log: () => undefined,
    });
    const row = { id: 'sb1', orgId: 'org1', layers: [], envVars: {} } as unknown as SandboxRow;
    await assert.rejects(svc.capture(row, 'snapshot'), /the store cannot be reached/);
    assert.deepEqual(await layers.list(), []);
    assert.deepEqual((await readdir(join(dir, 'snapshot-layers'))).filter((n) => !n.startsWith('.lock-')), []);
  });
});
