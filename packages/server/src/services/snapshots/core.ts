import { existsSync } from 'node:fs';
import { renderSandboxVolumes } from '../volumes.js';
import { ServiceError, type Snapshot } from '@sandboxd/protocol';
import type { FsLayerStore } from '../../images/layer-store.js';
import type { Placement } from '../../placement/placement.js';
import type { SandboxRow, SnapshotRow, Store } from '../../store/types/index.js';
import type { DiskClaim } from '../disk-room.js';
import type { Mutex } from '../locks.js';
import { page, pageStart } from '../pages.js';
import type { QuotaService } from '../quotas.js';
import type { TemplateService } from '../templates.js';
import { publicOrgId } from '../org-ids.js';

export interface SnapshotServiceDeps {
  store: Store;
  /** The nodes: a sandbox's files are copied out through the one its row names, and their warm pools forget a deleted snapshot. */
  placement: Pick<Placement, 'node' | 'dropWarm'>;
  /** The sandboxes' per-id locks (the same the lifecycle takes): a snapshot is one operation on its sandbox. */
  locks: Mutex;
  quotas: QuotaService;
  templates: TemplateService;
  /** Where snapshot and fork layers live: in the data dir, collected when nothing uses them. */
  layers: FsLayerStore;
  /** The row of a sandbox the caller may see (404 unknown, 403 another organization's, 410 expired). */
  sandbox: (orgId: string, id: string) => Promise<SandboxRow>;
  /** Waits for the teardowns of deleted sandboxes under way (their overlays still hold their layers). */
  settle: () => Promise<void>;
  /** A cluster's: a layer was just made here (other replicas are told where it is). */
  madeLayer?: (layerId: string) => Promise<void>;
  /**
   * A cluster's: pins every replica sees, kept as events of the store's windowed counter (renewed
   * while held, removed after): a create or restore through another replica from a snapshot whose
   * layer this replica holds keeps it from this replica's collection.
   */
  sharedPins?: Pick<Store['rates'], 'record' | 'count' | 'remove'>;
  log: (msg: string, extra?: Record<string, unknown>) => void;
  /**
   * Room on the data filesystem for a copy (services/disk-room.ts), and what a sandbox's disk
   * holds (the copy's bound; absent: not known here, and only the reserve is checked).
   */
  disk?: { claim: DiskClaim; held?: (row: SandboxRow) => Promise<number> };
}

/**
 * What every job of the snapshot service shares: its dependencies, the layers that no row
 * references yet but that the collection must keep (made, or pinned), and the reading of a
 * snapshot the caller may see.
 */
export class SnapshotCore {
  /** Layers made and not yet referenced by a row (a snapshot being recorded, forks being created). */
  readonly making = new Set<string>();
  /** Layers an operation is about to make a row reference (a create, restore or promote from a snapshot), by count. */
  readonly pins = new Map<string, number>();

  constructor(readonly d: SnapshotServiceDeps) {}

  render(row: SnapshotRow): Snapshot {
    return {
      object: 'snapshot',
      snapshot_id: row.id,
      id: row.id,
      name: row.name,
      sandbox_id: row.sandboxId,
      organization_id: publicOrgId(row.orgId),
      template_id: row.templateId,
      template_name: row.templateName,
      parent_snapshot_id: row.parentId,
      size: row.sizeBytes,
      created_at: row.createdAt,
      resources: { vcpu: row.vcpu, memory_mb: row.memoryMb, disk_gb: row.diskGb, disk_mb: row.diskGb * 1024 },
      ...(row.volumes?.length ? { volumes: renderSandboxVolumes(row) } : {}),
    };
  }

  /** Whether `layerId` is a snapshot's or a fork's layer (lives in this store). */
  owns(layerId: string): boolean {
    return /^[0-9a-f]{64}$/.test(layerId) && existsSync(this.d.layers.path(layerId));
  }

  /** Host path of a layer of this store. */
  path(layerId: string): string {
    return this.d.layers.path(layerId);
  }

  /** A snapshot the caller may use: 404 unknown, 403 another organization's. */
  async get(orgId: string, id: string): Promise<SnapshotRow> {
    const row = await this.d.store.snapshots.byId(id);
    if (!row) throw new ServiceError('SNAPSHOT_NOT_FOUND', `snapshot ${id} not found`, { snapshot_id: id });
    if (row.orgId !== orgId) throw new ServiceError('PERMISSION_DENIED', 'this snapshot belongs to another organization', { snapshot_id: id });
    return row;
  }

  async list(orgId: string, q: { limit?: number; cursor?: string; sandbox_id?: string }) {
    const limit = q.limit ?? 100;
    const rows = await this.d.store.snapshots.list({ orgId, sandboxId: q.sandbox_id, after: pageStart(q.cursor), limit: limit + 1 });
    const { page: shown, hasMore, nextCursor } = page(rows, limit);
    return { data: shown.map((r) => this.render(r)), hasMore, nextCursor };
  }
}
