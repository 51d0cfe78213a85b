import { ServiceError } from '@sandboxd/protocol';
import type { FsLayerStore } from '../../images/layer-store.js';
import type { Store } from '../../store/types/index.js';
import type { SnapshotCore } from './core.js';

const MIB = 1024 * 1024;

/**
 * Bytes of the snapshot layer store an organization holds: every layer of this store that one of
 * its snapshots, templates (promoted from a snapshot) or sandboxes (made from a snapshot, or forks)
 * mounts, each counted once, for as long as anything mounts it. What `max_snapshot_storage_mb`
 * limits: a layer kept by a fork or a template after its snapshot is deleted still counts. A
 * sandbox's own disk taken along when it moved to another node (kind `move`) does not.
 */
export async function snapshotStorageUsed(store: Store, layers: FsLayerStore, orgId: string, sizes = new Map<string, number>()): Promise<number> {
  const ids = new Set<string>();
  for (const s of await store.snapshots.list({ orgId, limit: Number.MAX_SAFE_INTEGER })) for (const l of s.layers) ids.add(l);
  for (const t of await store.templates.list(orgId)) if (t.orgId === orgId) for (const l of t.layers) ids.add(l);
  for (const r of await store.sandboxes.live()) if (r.orgId === orgId) for (const l of r.layers) ids.add(l);
  let total = 0;
  for (const id of ids) {
    let size = sizes.get(id);
    if (size === undefined) {
      const meta = await layers.meta(id);
      if (!meta) continue; // a layer of another store (a template's)
      // A sandbox moved off a draining node took its disk along as a layer: the operator's doing.
      size = meta.kind === 'move' ? 0 : meta.sizeBytes;
      sizes.set(id, size);
    }
    total += size;
  }
  return total;
}

/** The organization's snapshot storage against its `max_snapshot_storage_mb`: snapshots and forks both check it. */
export class StorageQuota {
  /** Sizes of this store's layers (they never change), read from their meta.json once. */
  private readonly sizes = new Map<string, number>();

  constructor(private readonly c: SnapshotCore) {}

  /** snapshotStorageUsed of the organization. */
  storageUsed(orgId: string): Promise<number> {
    return snapshotStorageUsed(this.c.d.store, this.c.d.layers, orgId, this.sizes);
  }

  /** Bytes the organization may still store in snapshot and fork layers (undefined: no limit). */
  async room(orgId: string): Promise<number | undefined> {
    const max = (await this.c.d.quotas.limitsFor(orgId)).max_snapshot_storage_mb;
    if (max === null) return undefined;
    return Math.max(0, max * MIB - (await this.storageUsed(orgId)));
  }

  /** ORG_QUOTA_EXCEEDED when `adding` bytes would take the organization past max_snapshot_storage_mb. */
  async checkStorage(orgId: string, adding: number): Promise<void> {
    const max = (await this.c.d.quotas.limitsFor(orgId)).max_snapshot_storage_mb;
    if (max === null) return;
    const used = await this.storageUsed(orgId);
    if (used + adding > max * MIB || (adding === 0 && used >= max * MIB)) {
      const usedMb = Math.ceil(used / MIB);
      throw new ServiceError(
        'ORG_QUOTA_EXCEEDED',
        `organization quota reached: its snapshots (and the forks and templates made from them) store ${usedMb} MB${adding ? ` and this needs ${Math.ceil(adding / MIB)} MB more` : ''}, of ${max} MB (max_snapshot_storage_mb); delete a snapshot, fork or template made from one, or ask the operator to raise the limit`,
        { limit: 'max_snapshot_storage_mb', max, used: usedMb, requested: Math.ceil(adding / MIB) },
      );
    }
  }
}
