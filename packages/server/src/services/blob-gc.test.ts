import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, test } from 'node:test';
import { FsBlobStore } from '../images/blob-store.js';
import { SqliteStore } from '../store/sqlite.js';
import { BLOB_GRACE_MS, collectUploads } from './blob-gc.js';

const dir = mkdtempSync(join(tmpdir(), 'sbd-blob-gc-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const HOUR = 3600_000;

test('blobs no upload references go once older than the grace; shared, young, image configs and those of a build under way stay', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const blobs = new FsBlobStore(join(dir, 'blobs'));
    const put = async (s: string, ageMs: number) => {
      await blobs.put(Readable.from([Buffer.from(s)]), { sha256: sha(s), size: s.length });
      const t = (Date.now() - ageMs) / 1000;
      utimesSync(blobs.path(sha(s)), t, t);
      return sha(s);
    };
    const a = await store.orgs.create('a');
    const b = await store.orgs.create('b');
    const upload = (orgId: string, hex: string, path: string, createdAt: string) =>
      store.uploads.upsert({ orgId, fileId: `f_${hex}`, path, sha256: hex, size: 1, kind: 'file', createdAt });
    const now = Date.now();
    const recent = new Date(now - HOUR).toISOString();
    const shared = await put('shared', 2 * HOUR);
    await put('orphan', 2 * HOUR);
    const young = await put('young', 0);
    const config = await put('image config', 2 * HOUR);
    const expired = await put('expired', 2 * HOUR);
    await upload(a.id, shared, 'x', recent);
    await upload(b.id, shared, 'y', recent);
    await upload(a.id, expired, 'old', new Date(now - 10 * 24 * HOUR).toISOString());
    const c = { store, blobs, imageConfigs: async () => [`sha256:${config}`], inStore: false, uploadRetentionMs: 7 * 24 * HOUR };

    // A build under way: nothing is collected (it copies its uploads' blobs later).
    await store.builds.insert({ id: 'tpl_x', orgId: a.id, templateId: 'tpl_x', alias: 'x', status: 'building', progress: 0, currentStep: null, request: {}, errorMessage: null, createdAt: recent, startedAt: recent, completedAt: null });
    assert.deepEqual(await collectUploads(c), { uploads: 0, blobs: 0, bytes: 0 });
    await store.builds.update('tpl_x', { status: 'active', completedAt: recent });

    const r = await collectUploads(c);
    assert.equal(r.uploads, 1, 'the upload past its retention is dropped');
    assert.equal(r.blobs, 2, 'the orphan and the expired upload’s blob');
    assert.deepEqual((await blobs.list()).sort(), [shared, young, config].sort());
    // One organization's upload gone: the content stays for the other's.
    await store.uploads.removeForOrg(a.id);
    await collectUploads(c);
    assert.ok(await blobs.has(shared));
    await store.uploads.removeForOrg(b.id);
    await collectUploads(c);
    assert.equal(await blobs.has(shared), false, 'no upload of any organization names it now');
    assert.ok(BLOB_GRACE_MS >= HOUR);
  } finally {
    store.close();
  }
});
