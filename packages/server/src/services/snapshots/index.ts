import type { Snapshot } from '@sandboxd/protocol';
import type { SandboxRow, SnapshotRow, TemplateRow } from '../../store/types/index.js';
import { Captures, type CapturedLayer, type CaptureKind } from './capture.js';
import { Collector } from './collect.js';
import { SnapshotCore, type SnapshotServiceDeps } from './core.js';
import { Pins } from './pins.js';
import { builtinNames, Promotions } from './promote.js';
import { StorageQuota } from './storage.js';

export { MAX_SNAPSHOT_DEPTH_LAYERS, readEnvSet, type CapturedLayer, type CaptureKind } from './capture.js';
export type { SnapshotServiceDeps } from './core.js';
export { snapshotStorageUsed } from './storage.js';

/**
 * Snapshots of sandboxes' filesystems (issue 13). A snapshot is one layer of its own, the copy of
 * what its sandbox changed over its layers (runtime exportLayer), on top of those layers: a sandbox
 * made from it mounts them all, so it stores only what changed since its template or since the
 * snapshot its sandbox came from. Layers live in a store of their own in the data dir and go when
 * the last snapshot, sandbox or template that mounts them does.
 *
 * One face over the jobs, each in a file of its own (captures and taking a snapshot, the storage
 * quota, pins, promotion to a template, removal and collection), which share the core (core.ts).
 */
export class SnapshotService {
  private readonly core: SnapshotCore;
  private readonly storage: StorageQuota;
  private readonly captures: Captures;
  private readonly pins: Pins;
  private readonly promotions: Promotions;
  private readonly collector: Collector;

  constructor(d: SnapshotServiceDeps) {
    this.core = new SnapshotCore(d);
    this.storage = new StorageQuota(this.core);
    this.captures = new Captures(this.core, this.storage);
    this.pins = new Pins(this.core);
    this.promotions = new Promotions(this.core, this.pins);
    this.collector = new Collector(this.core);
  }

  // ---- what a snapshot is ----------------------------------------------------------------------

  render(row: SnapshotRow): Snapshot {
    return this.core.render(row);
  }
  /** Whether `layerId` is a snapshot's or a fork's layer (lives in this store). */
  owns(layerId: string): boolean {
    return this.core.owns(layerId);
  }
  /** Host path of a layer of this store. */
  path(layerId: string): string {
    return this.core.path(layerId);
  }
  get(orgId: string, id: string): Promise<SnapshotRow> {
    return this.core.get(orgId, id);
  }
  list(orgId: string, q: { limit?: number; cursor?: string; sandbox_id?: string }) {
    return this.core.list(orgId, q);
  }

  // ---- captures, pins and snapshots taken ------------------------------------------------------

  capture(row: SandboxRow, kind: CaptureKind, maxBytes?: number): Promise<CapturedLayer> {
    return this.captures.capture(row, kind, maxBytes);
  }
  pinned<T>(layers: string[], fn: () => Promise<T>): Promise<T> {
    return this.pins.pinned(layers, fn);
  }
  discard(c: CapturedLayer): Promise<void> {
    return this.captures.discard(c);
  }
  take(orgId: string, sandboxId: string, body: { name?: string }): Promise<SnapshotRow> {
    return this.captures.take(orgId, sandboxId, body);
  }

  // ---- the storage quota -----------------------------------------------------------------------

  storageUsed(orgId: string): Promise<number> {
    return this.storage.storageUsed(orgId);
  }
  room(orgId: string): Promise<number | undefined> {
    return this.storage.room(orgId);
  }
  checkStorage(orgId: string, adding: number): Promise<void> {
    return this.storage.checkStorage(orgId, adding);
  }

  // ---- removal, promotion, collection ----------------------------------------------------------

  remove(orgId: string, id: string): Promise<void> {
    return this.collector.remove(orgId, id);
  }
  promote(orgId: string, id: string, alias: string, builtinNames: ReadonlySet<string>): Promise<TemplateRow> {
    return this.promotions.promote(orgId, id, alias, builtinNames);
  }
  collectSoon(): Promise<void> {
    return this.collector.collectSoon();
  }
  /** Names of the built-in templates (an alias may not take one). */
  static builtinNames(): ReadonlySet<string> {
    return builtinNames();
  }
}
