import { randomBytes } from 'node:crypto';
import { closeSync, fstatSync, lstatSync, openSync, readSync, constants as fsc } from 'node:fs';
import { join } from 'node:path';
import { ServiceError } from '@sandboxd/protocol';
import { sha256Hex } from '../../images/layer-store.js';
import { ExportTooLarge } from '../../runtime/types.js';
import type { SandboxRow, SnapshotRow } from '../../store/types/index.js';
import type { SnapshotCore } from './core.js';
import type { StorageQuota } from './storage.js';

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

/**
 * Why a sandbox's files are copied: a snapshot, a fork, or a move to another node (its own disk,
 * which counts against no snapshot storage: snapshotStorageUsed passes over it).
 */
export type CaptureKind = 'snapshot' | 'fork' | 'move';

/** Sandboxes mount their layers through one overlay: the helper takes at most this many (idmap-mount.c MAX_LAYERS). */
export const MAX_SNAPSHOT_DEPTH_LAYERS = 64;
/** The agent's env set inside a sandbox (packages/agent: EnvStore under its state dir). */
const ENV_FILE = ['.sb', 'state', 'env.json'];
const ENV_FILE_MAX = 1024 * 1024;

function newSnapshotId(): string {
  return `snap_${randomBytes(12).toString('hex')}`;
}

/** A sandbox's files copied into a layer of this store: for a fork (services/sandboxes/fork.ts), a move off a draining node (evacuate.ts), or a snapshot taken here. */
export class Captures {
  constructor(
    private readonly c: SnapshotCore,
    private readonly storage: StorageQuota,
  ) {}

  /**
   * Copies a sandbox's files into a new layer of this store (a running sandbox is frozen for the
   * copy). The caller holds the sandbox's lock, and calls release() once a row references the
   * layer, or removes it (discard) when none will.
   */
  async capture(row: SandboxRow, kind: CaptureKind, maxBytes?: number): Promise<CapturedLayer> {
    if (row.layers.length + 1 > MAX_SNAPSHOT_DEPTH_LAYERS) {
      throw new ServiceError(
        'LIMIT_EXCEEDED',
        `sandbox ${row.id} already mounts ${row.layers.length} layers (each snapshot of a snapshot adds one): at most ${MAX_SNAPSHOT_DEPTH_LAYERS} fit; promote a snapshot to a template, or start again from the template`,
        { id: row.id, limit: 'snapshot_depth', max: MAX_SNAPSHOT_DEPTH_LAYERS },
      );
    }
    // Room for the copy (what the sandbox's disk holds) before anything is written.
    const disk = this.c.d.disk;
    const releaseDisk = disk && (await disk.claim((await disk.held?.(row)) ?? 0, `a copy of sandbox ${row.id}'s files`));
    const layerId = sha256Hex(`${kind}\n${row.id}\n${randomBytes(16).toString('hex')}`);
    this.c.making.add(layerId);
    const release = () => this.c.making.delete(layerId);
    try {
      let out = { bytes: 0, allocated: 0, entries: 0, frozenMs: 0 };
      let envVars = row.envVars;
      await this.c.d.layers.ensureLayer(
        layerId,
        async (tree) => {
          out = await this.c.d.placement.node(row.nodeId).exportLayer(row.id, tree, { maxBytes });
          envVars = readEnvSet(tree) ?? row.envVars;
          return { kind, sizeBytes: out.allocated, entries: out.entries, extra: { sandboxId: row.id, orgId: row.orgId, bytes: out.bytes } };
        },
        (line) => this.c.d.log(line),
      );
      // Not announced, it is of no use to another replica and no row will reference it: gone now.
      await this.c.d.madeLayer?.(layerId).catch(async (err: unknown) => {
        await this.c.d.layers.remove(layerId).catch((e: unknown) => this.c.d.log('removing an unannounced snapshot layer failed', { layer: layerId, error: String(e) }));
        throw err;
      });
      releaseDisk?.();
      return { layerId, sizeBytes: out.allocated, entries: out.entries, frozenMs: out.frozenMs, envVars, release };
    } catch (err) {
      release();
      // ensureLayer removes a copy it could not finish: nothing of it is left.
      releaseDisk?.(false);
      throw err;
    }
  }

  /** Removes a captured layer no row will reference. */
  async discard(c: CapturedLayer): Promise<void> {
    c.release();
    await this.c.d.layers.remove(c.layerId).catch((err: unknown) => this.c.d.log('removing an unused snapshot layer failed', { layer: c.layerId, error: String(err) }));
  }

  /** `POST /v1/sandboxes/{id}/snapshots`: the sandbox's files now, its settings, counted against the storage quota. */
  async take(orgId: string, sandboxId: string, body: { name?: string }): Promise<SnapshotRow> {
    const d = this.c.d;
    // Cheap refusals before the lock and the copy.
    await d.sandbox(orgId, sandboxId);
    await this.storage.checkStorage(orgId, 0);
    return d.locks.run(sandboxId, async () => {
      const room = await this.storage.room(orgId);
      const row = await d.sandbox(orgId, sandboxId);
      if (row.status !== 'running' && row.status !== 'paused' && row.status !== 'stopped') {
        throw new ServiceError('INVALID_STATE', `cannot snapshot a sandbox whose current state is ${row.status}`, { id: row.id, current_state: row.status });
      }
      let c: CapturedLayer;
      try {
        c = await this.capture(row, 'snapshot', room);
      } catch (err) {
        if (err instanceof ExportTooLarge) await this.storage.checkStorage(orgId, err.used);
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
          // Its volumes are named, not copied: a create from it mounts them again.
          ...(row.volumes?.length ? { volumes: row.volumes } : {}),
        };
        // Checked again with the size known, in one step with the insert (two at once cannot both fit).
        await d.quotas.hold(orgId, async () => {
          await this.storage.checkStorage(orgId, c.sizeBytes);
          await d.quotas.checkStored(orgId, c.sizeBytes);
          await d.store.snapshots.insert(snap);
        });
        c.release();
        d.log('snapshot taken', { id: snap.id, sandbox: row.id, bytes: c.sizeBytes, entries: c.entries, frozen_ms: Math.round(c.frozenMs) });
        return snap;
      } catch (err) {
        await this.discard(c);
        throw err;
      }
    });
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
