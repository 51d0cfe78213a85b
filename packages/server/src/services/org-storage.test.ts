import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SqliteStore } from '../store/sqlite.js';
import type { TemplateRow } from '../store/types/index.js';
import { OrgStorage } from './org-storage.js';

const MIB = 2 ** 20;

function template(id: string, orgId: string, layers: string[]): TemplateRow {
  const now = new Date().toISOString();
  return {
    id, orgId, name: id, displayName: id, description: '', category: 'custom', language: 'custom', vcpu: 1, memoryMb: 256, diskGb: 1, status: 'active',
    isPublic: false, buildId: id, features: [], tags: [], layers, env: {}, workdir: null, errorMessage: null, createdAt: now, updatedAt: now,
  };
}

test("an organization's storage: its templates' own layers (not shared bases), uploads once per content, uploads under way, snapshots", async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const a = await store.orgs.create('a');
    const b = await store.orgs.create('b');
    const sizes: Record<string, number> = { base: 100 * MIB, mine: 10 * MIB, more: 5 * MIB, theirs: 7 * MIB };
    const storage = new OrgStorage({
      store,
      snapshotsBytes: async (org) => (org === a.id ? 3 * MIB : 0),
      layerBytes: async (id) => sizes[id],
      imageLayers: async () => new Set(['base']),
    });
    // Two templates sharing a layer: counted once; the imported base counts for no one; a layer of
    // another store (a promoted snapshot's: no size here) is the snapshot storage's.
    await store.templates.upsert(template('t1', a.id, ['base', 'mine']));
    await store.templates.upsert(template('t2', a.id, ['base', 'mine', 'more', 'snapshot-layer']));
    await store.templates.upsert(template('t3', b.id, ['base', 'theirs']));
    const upload = (orgId: string, sha: string, path: string, size: number) =>
      store.uploads.upsert({ orgId, fileId: `f_${sha}`, path, sha256: sha, size, kind: 'file', createdAt: new Date().toISOString() });
    await upload(a.id, 'a'.repeat(64), 'x', 2 * MIB);
    await upload(a.id, 'a'.repeat(64), 'y', 2 * MIB);
    await upload(b.id, 'a'.repeat(64), 'z', 2 * MIB);
    const use = await storage.use(a.id);
    assert.deepEqual(use, { sandboxDisksHeldBytes: 0, snapshotsBytes: 3 * MIB, templatesBytes: 15 * MIB, uploadsBytes: 2 * MIB, volumesBytes: 0, storedBytes: 20 * MIB });
    assert.equal((await storage.use(b.id)).storedBytes, 9 * MIB, "b's own layer and its upload of the same content");

    // An upload under way counts from its admission to its end; its row counts after.
    assert.equal(await storage.storedBytes(a.id, 60_000), 20 * MIB);
    const done = storage.holdUpload(a.id, 4 * MIB);
    assert.equal(await storage.storedBytes(a.id, 60_000), 24 * MIB);
    await upload(a.id, 'c'.repeat(64), 'w', 4 * MIB);
    // A recent reading serves (it predates the new row), until the upload ends.
    assert.equal(await storage.storedBytes(a.id, 60_000), 24 * MIB);
    done();
    done();
    assert.equal(await storage.storedBytes(a.id, 60_000), 24 * MIB, 'read again once the upload ended: its row, not its hold');
  } finally {
    store.close();
  }
});
