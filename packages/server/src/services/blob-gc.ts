import { stat } from 'node:fs/promises';
import type { FsBlobStore } from '../images/blob-store.js';
import type { Store } from '../store/types/index.js';

/** A blob younger than this may be an upload whose row is about to be written: never collected. */
export const BLOB_GRACE_MS = 3600_000;

export interface BlobCollection {
  store: Store;
  /** The data directory's blobs: uploads on one machine, and images' configs (kept). */
  blobs: FsBlobStore;
  /** The `sha256:<hex>` configs of imported and pulled images (their identity, kept in the same blobs). */
  imageConfigs: () => Promise<string[]>;
  /** Replicas: the uploads are in the store too. */
  inStore: boolean;
  /** Uploads not named or uploaded again for this long are dropped first (0: kept for ever). */
  uploadRetentionMs: number;
  now?: () => number;
}

/**
 * Removes what no upload references any more (content-addressed: a blob goes when no upload row of
 * any organization names its content), after dropping uploads older than the retention (a client
 * that names one again is told to upload it again). Skipped while a build runs: it resolved its
 * uploads when it started, and copies their blobs later. Blobs younger than an hour stay (an
 * upload's row is written after its blob). Returns what went.
 */
export async function collectUploads(c: BlobCollection): Promise<{ uploads: number; blobs: number; bytes: number }> {
  const out = { uploads: 0, blobs: 0, bytes: 0 };
  if ((await c.store.builds.unfinished()).length > 0) return out;
  const now = (c.now ?? Date.now)();
  if (c.uploadRetentionMs > 0) out.uploads = await c.store.uploads.removeOlderThan(new Date(now - c.uploadRetentionMs).toISOString());
  const before = now - BLOB_GRACE_MS;
  if (c.inStore) {
    for (const sha of await c.store.blobs.unreferenced(new Date(before).toISOString())) {
      const size = (await c.store.blobs.stat(sha))?.size ?? 0;
      if (await c.store.blobs.removeUnreferenced(sha)) {
        out.blobs++;
        out.bytes += size;
      }
    }
  }
  // The local blobs: the uploads themselves on one machine, the copies builds made of the store's
  // on a replica. Read the references after listing, so that none made meanwhile is missed.
  const listed = await c.blobs.list();
  const keep = await c.store.uploads.referencedSha256s();
  for (const d of await c.imageConfigs()) keep.add(d.replace(/^sha256:/, ''));
  for (const hex of listed) {
    if (keep.has(hex)) continue;
    const st = await stat(c.blobs.path(hex)).catch(() => undefined);
    if (!st || st.mtimeMs > before) continue;
    // Checked once more just before: an upload of the same content may have named it meanwhile.
    if (await c.store.uploads.referencedSha256s().then((s) => s.has(hex))) continue;
    await c.blobs.remove(hex);
    out.blobs++;
    out.bytes += st.size;
  }
  return out;
}
