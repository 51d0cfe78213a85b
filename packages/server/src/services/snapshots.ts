import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fstatSync, lstatSync, openSync, readSync, constants as fsc } from 'node:fs';
import { join } from 'node:path';
import { ServiceError, type Snapshot } from '@sandboxd/protocol';
import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { sha256Hex, type FsLayerStore } from '../images/layer-store.js';
import type { Placement } from '../placement/placement.js';
import { ExportTooLarge } from '../runtime/types.js';
import type { SandboxRow, SnapshotRow, Store, TemplateRow } from '../store/types.js';
import type { Mutex } from './locks.js';
import { page, pageStart } from './pages.js';
import type { QuotaService } from './quotas.js';
import type { TemplateService } from './templates.js';

/** Shared pins: their key in the store's counter, and how often a held one is recorded again (the counter forgets events after two minutes). */
const PIN_KEY = 'snapshot-pin:';
const SHARED_PIN_RENEW_MS = 30_000;

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
}

/** A layer just made and not yet referenced by any row: release() once one references it (or none will). */
export interface CapturedLayer {
  layerId: string;
  sizeBytes: number;
  entries: number;
  frozenMs: number;
  /** The sandbox's env set (the agent's /env) at that moment, as its files hold it. */
  envVars: Record<string, string>;
  release: () => void;
}

const MIB = 1024 * 1024;
/** Sandboxes mount their layers through one overlay: the helper takes at most this many (idmap-mount.c MAX_LAYERS). */
export const MAX_SNAPSHOT_DEPTH_LAYERS = 64;
/** The agent's env set inside a sandbox (packages/agent: EnvStore under its state dir). */
const ENV_FILE = ['.sb', 'state', 'env.json'];
const ENV_FILE_MAX = 1024 * 1024;

/**
 * Bytes of the snapshot layer store an organization holds: every layer of this store that one of
 * its snapshots, templates (promoted from a snapshot) or sandboxes (made from a snapshot, or forks)
 * mounts, each counted once, for as long as anything mounts it. What `max_snapshot_storage_mb`
 * limits: a layer kept by a fork or a template after its snapshot is deleted still counts.
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
      size = meta.sizeBytes;
      sizes.set(id, size);
    }
    total += size;
  }
  return total;
}

function newSnapshotId(): string {
  return `snap_${randomBytes(12).toString('hex')}`;
}

/**
 * Snapshots of sandboxes' filesystems (issue 13). A snapshot is one layer of its own, the copy of
 * what its sandbox changed over its layers (runtime exportLayer), on top of those layers: a sandbox
 * made from it mounts them all, so it stores only what changed since its template or since the
 * snapshot its sandbox came from. Layers live in a store of their own in the data dir and go when
 * the last snapshot, sandbox or template that mounts them does.
 */
export class SnapshotService {
  /** Layers made and not yet referenced by a row (a snapshot being recorded, forks being created). */
  private readonly making = new Set<string>();
  /** Layers an operation is about to make a row reference (a create, restore or promote from a snapshot), by count. */
  private readonly pins = new Map<string, number>();
  private collecting?: Promise<void>;
  /** Sizes of this store's layers (they never change), read from their meta.json once. */
  private readonly sizes = new Map<string, number>();
  private collectAgain = false;

  constructor(private readonly d: SnapshotServiceDeps) {}

  render(row: SnapshotRow): Snapshot {
    return {
      object: 'snapshot',
      snapshot_id: row.id,
      id: row.id,
      name: row.name,
      sandbox_id: row.sandboxId,
      organization_id: row.orgId,
      template_id: row.templateId,
      template_name: row.templateName,
      parent_snapshot_id: row.parentId,
      size: row.sizeBytes,
      created_at: row.createdAt,
      resources: { vcpu: row.vcpu, memory_mb: row.memoryMb, disk_gb: row.diskGb, disk_mb: row.diskGb * 1024 },
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

  /**
   * Copies a sandbox's files into a new layer of this store (a running sandbox is frozen for the
   * copy). The caller holds the sandbox's lock, and calls release() once a row references the
   * layer, or removes it (discard) when none will.
   */
  async capture(row: SandboxRow, kind: 'snapshot' | 'fork', maxBytes?: number): Promise<CapturedLayer> {
    if (row.layers.length + 1 > MAX_SNAPSHOT_DEPTH_LAYERS) {
      throw new ServiceError(
        'LIMIT_EXCEEDED',
        `sandbox ${row.id} already mounts ${row.layers.length} layers (each snapshot of a snapshot adds one): at most ${MAX_SNAPSHOT_DEPTH_LAYERS} fit; promote a snapshot to a template, or start again from the template`,
        { id: row.id, limit: 'snapshot_depth', max: MAX_SNAPSHOT_DEPTH_LAYERS },
      );
    }
    const layerId = sha256Hex(`${kind}\n${row.id}\n${randomBytes(16).toString('hex')}`);
    this.making.add(layerId);
    const release = () => this.making.delete(layerId);
    try {
      let out = { bytes: 0, allocated: 0, entries: 0, frozenMs: 0 };
      let envVars = row.envVars;
      await this.d.layers.ensureLayer(
        layerId,
        async (tree) => {
          out = await this.d.placement.node(row.nodeId).exportLayer(row.id, tree, { maxBytes });
          envVars = readEnvSet(tree) ?? row.envVars;
          return { kind, sizeBytes: out.allocated, entries: out.entries, extra: { sandboxId: row.id, orgId: row.orgId, bytes: out.bytes } };
        },
        (line) => this.d.log(line),
      );
      // Not announced, it is of no use to another replica and no row will reference it: gone now.
      await this.d.madeLayer?.(layerId).catch(async (err: unknown) => {
        await this.d.layers.remove(layerId).catch((e: unknown) => this.d.log('removing an unannounced snapshot layer failed', { layer: layerId, error: String(e) }));
        throw err;
      });
      return { layerId, sizeBytes: out.allocated, entries: out.entries, frozenMs: out.frozenMs, envVars, release };
    } catch (err) {
      release();
      throw err;
    }
  }

  /**
   * Keeps `layers` from being collected while `fn` runs: a create, restore or promote that read a
   * snapshot must not find its layers gone (a delete of the snapshot at the same moment) before its
   * own row references them.
   */
  async pinned<T>(layers: string[], fn: () => Promise<T>): Promise<T> {
    for (const l of layers) this.pins.set(l, (this.pins.get(l) ?? 0) + 1);
    const shared = this.d.sharedPins;
    const recorded: string[] = [];
    const record = async () => {
      for (const l of layers) {
        const id = `pin-${randomBytes(12).toString('hex')}`;
        await shared!.record(`${PIN_KEY}${l}`, Date.now(), id);
        recorded.push(id);
      }
    };
    let renew: NodeJS.Timeout | undefined;
    try {
      if (shared) {
        // Recorded before fn reads the snapshot again: a collection that misses this pin ran after
        // the snapshot's row was gone, and that read is then a 404.
        await record();
        renew = setInterval(() => void record().catch((err: unknown) => this.d.log('renewing a snapshot pin failed', { error: String(err) })), SHARED_PIN_RENEW_MS);
      }
      return await fn();
    } finally {
      clearInterval(renew);
      for (const id of recorded) await shared!.remove(id).catch(() => undefined);
      for (const l of layers) {
        const n = (this.pins.get(l) ?? 1) - 1;
        if (n <= 0) this.pins.delete(l);
        else this.pins.set(l, n);
      }
    }
  }

  /** Removes a captured layer no row will reference. */
  async discard(c: CapturedLayer): Promise<void> {
    c.release();
    await this.d.layers.remove(c.layerId).catch((err: unknown) => this.d.log('removing an unused snapshot layer failed', { layer: c.layerId, error: String(err) }));
  }

  /** `POST /v1/sandboxes/{id}/snapshots`: the sandbox's files now, its settings, counted against the storage quota. */
  async take(orgId: string, sandboxId: string, body: { name?: string }): Promise<SnapshotRow> {
    // Cheap refusals before the lock and the copy.
    await this.d.sandbox(orgId, sandboxId);
    await this.checkStorage(orgId, 0);
    return this.d.locks.run(sandboxId, async () => {
      const room = await this.room(orgId);
      const row = await this.d.sandbox(orgId, sandboxId);
      if (row.status !== 'running' && row.status !== 'paused' && row.status !== 'stopped') {
        throw new ServiceError('INVALID_STATE', `cannot snapshot a sandbox whose current state is ${row.status}`, { id: row.id, current_state: row.status });
      }
      let c: CapturedLayer;
      try {
        c = await this.capture(row, 'snapshot', room);
      } catch (err) {
        if (err instanceof ExportTooLarge) await this.checkStorage(orgId, err.used);
        throw err;
      }
      try {
        const snap: SnapshotRow = {
          id: newSnapshotId(),
          orgId,
          name: body.name ?? null,
          sandboxId: row.id,
          parentId: row.snapshotId,
          templateId: row.templateId,
          templateName: row.templateName,
          layers: [c.layerId, ...row.layers],
          vcpu: row.vcpu,
          memoryMb: row.memoryMb,
          diskGb: row.diskGb,
          templateEnv: row.templateEnv,
          envVars: c.envVars,
          internetAccess: row.internetAccess,
          egress: row.egress,
          sizeBytes: c.sizeBytes,
          createdAt: new Date().toISOString(),
        };
        // Checked again with the size known, in one step with the insert (two at once cannot both fit).
        await this.d.quotas.hold(orgId, async () => {
          await this.checkStorage(orgId, c.sizeBytes);
          await this.d.store.snapshots.insert(snap);
        });
        c.release();
        this.d.log('snapshot taken', { id: snap.id, sandbox: row.id, bytes: c.sizeBytes, entries: c.entries, frozen_ms: Math.round(c.frozenMs) });
        return snap;
      } catch (err) {
        await this.discard(c);
        throw err;
      }
    });
  }

  /** snapshotStorageUsed of the organization. */
  storageUsed(orgId: string): Promise<number> {
    return snapshotStorageUsed(this.d.store, this.d.layers, orgId, this.sizes);
  }

  /** Bytes the organization may still store in snapshot and fork layers (undefined: no limit). */
  async room(orgId: string): Promise<number | undefined> {
    const max = (await this.d.quotas.limitsFor(orgId)).max_snapshot_storage_mb;
    if (max === null) return undefined;
    return Math.max(0, max * MIB - (await this.storageUsed(orgId)));
  }

  /** ORG_QUOTA_EXCEEDED when `adding` bytes would take the organization past max_snapshot_storage_mb. */
  async checkStorage(orgId: string, adding: number): Promise<void> {
    const max = (await this.d.quotas.limitsFor(orgId)).max_snapshot_storage_mb;
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

  async remove(orgId: string, id: string): Promise<void> {
    const row = await this.get(orgId, id);
    await this.d.store.snapshots.remove(row.id);
    // Ready sandboxes the pools booted from it hold its layers.
    await this.d.placement.dropWarm(`snap:${row.id}`);
    this.collectSoon();
  }

  /**
   * `POST /v1/snapshots/{id}/template`: a template of the organization, named `alias`, whose
   * sandboxes start with the snapshot's files, settings and env set (as template env).
   */
  async promote(orgId: string, id: string, alias: string, builtinNames: ReadonlySet<string>): Promise<TemplateRow> {
    const first = await this.get(orgId, id);
    return this.pinned(first.layers, async () => this.promotePinned(orgId, id, alias, builtinNames));
  }

  private async promotePinned(orgId: string, id: string, alias: string, builtinNames: ReadonlySet<string>): Promise<TemplateRow> {
    // Read again with its layers pinned: a delete that came first is a 404, one that comes later keeps them.
    const snap = await this.get(orgId, id);
    if (builtinNames.has(alias)) throw new ServiceError('TEMPLATE_EXISTS', `alias "${alias}" is a built-in template; choose another alias`, { alias });
    const existing = await this.d.store.templates.byName(alias, orgId);
    if (existing && existing.orgId === orgId) throw new ServiceError('TEMPLATE_EXISTS', `a template with alias "${alias}" already exists in this organization`, { alias });
    const source = await this.d.store.templates.byId(snap.templateId);
    const { SANDBOXD_AGENT_WORKSPACE: workdir, ...env } = snap.templateEnv;
    const now = new Date().toISOString();
    const row: TemplateRow = {
      id: `tpl_${randomBytes(10).toString('hex')}`,
      orgId,
      name: alias,
      displayName: alias,
      description: `From snapshot ${snap.id}${snap.name ? ` (${snap.name})` : ''} of a ${snap.templateName} sandbox`,
      category: 'custom',
      language: source?.language ?? 'custom',
      vcpu: snap.vcpu,
      memoryMb: snap.memoryMb,
      diskGb: snap.diskGb,
      status: 'active',
      isPublic: false,
      buildId: null,
      features: source?.features ?? ['code_execution', 'file_operations', 'commands'],
      tags: ['custom', 'snapshot'],
      layers: snap.layers,
      env: { ...env, ...snap.envVars },
      workdir: workdir ?? source?.workdir ?? null,
      errorMessage: null,
      createdAt: now,
      updatedAt: now,
    };
    await this.d.store.templates.upsert(row);
    return row;
  }

  /**
   * Removes the layers of this store that nothing uses: no snapshot, no sandbox that is not deleted
   * (a stopped one mounts its layers on start), no template, no capture or fork under way. Runs
   * after the teardowns under way, whose overlays still hold their layers; calls made meanwhile
   * make it run once more.
   */
  collectSoon(): Promise<void> {
    if (this.collecting) {
      this.collectAgain = true;
      return this.collecting;
    }
    this.collecting = (async () => {
      do {
        this.collectAgain = false;
        try {
          await this.collect();
        } catch (err) {
          this.d.log('collecting unused snapshot layers failed', { error: String(err) });
        }
      } while (this.collectAgain);
    })().finally(() => (this.collecting = undefined));
    return this.collecting;
  }

  private async collect(): Promise<void> {
    await this.d.settle();
    const keep = await this.d.store.snapshots.referencedLayers();
    for (const s of await this.d.store.sandboxes.live()) for (const l of s.layers) keep.add(l);
    const seen = new Set<string>();
    for (const orgId of ['', ...(await this.d.store.orgs.list()).map((o) => o.id)]) {
      for (const t of await this.d.store.templates.list(orgId)) {
        if (seen.has(t.id)) continue;
        seen.add(t.id);
        for (const l of t.layers) keep.add(l);
      }
    }
    // Read after the rows: a layer made meanwhile is either in `making` or referenced by then.
    for (const l of this.making) keep.add(l);
    for (const l of this.pins.keys()) keep.add(l);
    const removed: string[] = [];
    for (const id of await this.d.layers.list()) {
      if (keep.has(id) || this.making.has(id) || this.pins.has(id)) continue;
      // Pinned by another replica (a create from it under way there): renewed pins are recent.
      if (this.d.sharedPins && (await this.d.sharedPins.count(`${PIN_KEY}${id}`, Date.now() - 3 * SHARED_PIN_RENEW_MS)).n > 0) continue;
      await this.d.layers.remove(id);
      removed.push(id);
    }
    if (removed.length) this.d.log(`removed ${removed.length} snapshot layer(s) nothing uses any more`);
  }

  /** Names of the built-in templates (an alias may not take one). */
  static builtinNames(): ReadonlySet<string> {
    return new Set(BUILTIN_TEMPLATES.map((t) => t.name));
  }
}

/**
 * The agent's env set as the copied files hold it (`.sb/state/env.json`), or undefined when it is
 * not there as a plain file of sane size and shape. The copy is the tenant's: no component may be
 * a symlink (each is looked at without following, and the file opened with O_NOFOLLOW).
 */
export function readEnvSet(tree: string): Record<string, string> | undefined {
  try {
    let p = tree;
    for (const [i, part] of ENV_FILE.entries()) {
      p = join(p, part);
      const st = lstatSync(p);
      if (i < ENV_FILE.length - 1 ? !st.isDirectory() : !st.isFile()) return undefined;
    }
    const fd = openSync(p, fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
    try {
      const st = fstatSync(fd);
      if (!st.isFile() || st.size > ENV_FILE_MAX) return undefined;
      const buf = Buffer.alloc(st.size);
      let off = 0;
      while (off < buf.length) {
        const n = readSync(fd, buf, off, buf.length - off, off);
        if (n === 0) break;
        off += n;
      }
      const j = JSON.parse(buf.subarray(0, off).toString('utf8')) as { env_vars?: unknown };
      const vars = j.env_vars;
      if (!vars || typeof vars !== 'object' || Array.isArray(vars)) return undefined;
      const out: Record<string, string> = {};
      for (const [k, v] of Object.entries(vars as Record<string, unknown>)) {
        if (typeof v !== 'string' || k === '' || k.includes('=') || k.includes('\0') || v.includes('\0')) return undefined;
        out[k] = v;
      }
      return out;
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
}
