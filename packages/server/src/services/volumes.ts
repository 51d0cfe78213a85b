import { randomBytes } from 'node:crypto';
import { ServiceError, type CreateVolumeBody, type Volume, type VolumeMount } from '@sandboxd/protocol';
import { MAX_VOLUMES_PER_SANDBOX, VOLUME_NAME_PATTERN } from '@sandboxd/protocol';
import { volumePathProblem, type VolumeHost } from '../runtime/volumes.js';
import type { SandboxRow, SandboxVolumeRow, Store, VolumeRow } from '../store/types/index.js';
import { GIB, type DiskClaim } from './disk-room.js';
import { KeyedMutex } from './locks.js';
import type { QuotaService } from './quotas.js';

export interface VolumeServiceDeps {
  store: Store;
  /** This machine's volumes (the all-in-one). Absent (a cluster's control): volumes are refused, see docs/cluster.md. */
  host?: VolumeHost;
  /** The node `host` is: where the volumes it makes live. */
  nodeId: string;
  quotas: QuotaService;
  /** Room on the data filesystem for a volume's whole size (absent: admission off). */
  claimDisk?: DiskClaim;
  /** `?force=true`: deletes a sandbox that mounts the volume being deleted. */
  deleteSandbox: (orgId: string, id: string) => Promise<void>;
  /** Resolves once the deletes under way are off the host (their containers let go of the volume). */
  settle?: () => Promise<void>;
  /** The warm pools destroy their ready sandboxes of a pool id (those that mount a volume: its id is part of theirs). */
  dropWarm?: (poolId: string) => Promise<void>;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

const NAME_RE = new RegExp(VOLUME_NAME_PATTERN);
const ID_RE = /^vol-[a-z0-9]{20}$/;

export const notFound = (ref: string) => new ServiceError('VOLUME_NOT_FOUND', `no volume ${JSON.stringify(ref)} in this organization`, { volume: ref });

const unavailable = () =>
  new ServiceError('INVALID_STATE', 'volumes are not available on a cluster yet: a volume lives on one node, and placement does not yet follow it (docs/cluster.md)');

/**
 * Volumes (issue 32): an ext4 image per volume on the machine it was made on (runtime/volumes.ts),
 * named uniquely in its organization, counted in max_total_disk_gb by its size_gb, mounted by any
 * number of the organization's sandboxes at once. Deleting one that a sandbox (not deleted)
 * mounts is refused (409 VOLUME_IN_USE), unless forced: then those sandboxes are deleted first.
 */
export class VolumeService {
  /** One change at a time per volume name or id in this process (create, delete). */
  private readonly locks = new KeyedMutex();

  constructor(private readonly d: VolumeServiceDeps) {}

  private host(): VolumeHost {
    if (!this.d.host) throw unavailable();
    return this.d.host;
  }

  async create(orgId: string, body: CreateVolumeBody): Promise<VolumeRow> {
    const host = this.host();
    if (!NAME_RE.test(body.name)) throw new ServiceError('VALIDATION_ERROR', `bad volume name ${JSON.stringify(body.name)}: lowercase letters, digits, '.', '_' and '-', up to 63, starting with a letter or digit`);
    if (!Number.isInteger(body.size_gb) || body.size_gb < 1) throw new ServiceError('VALIDATION_ERROR', 'size_gb must be a whole number of GB, at least 1');
    return this.locks.run(`${orgId}/${body.name}`, async () => {
      if (await this.d.store.volumes.byName(orgId, body.name)) throw exists(body.name);
      const row: VolumeRow = { id: `vol-${randomBytes(10).toString('hex')}`, orgId, name: body.name, sizeGb: body.size_gb, nodeId: this.d.nodeId, createdAt: new Date().toISOString() };
      const bytes = body.size_gb * GIB;
      // Its whole size counts in max_total_disk_gb (checked and recorded in one step), and is held
      // on the data filesystem while the image is made (it is sparse and may grow to it).
      return this.d.quotas.hold(orgId, async () => {
        await this.d.quotas.checkStored(orgId, bytes);
        const release = await this.d.claimDisk?.(bytes, `a volume of ${body.size_gb} GB`);
        try {
          await host.create(row.id, bytes);
          if (!(await this.d.store.volumes.insert(row))) {
            await host.destroy(row.id);
            throw exists(body.name);
          }
        } catch (err) {
          release?.(false);
          await host.destroy(row.id).catch(() => undefined);
          if (err instanceof ServiceError) throw err;
          throw new ServiceError('RUNTIME_ERROR', 'could not make the volume; try again').withDetail(String(err));
        }
        release?.();
        this.d.log('volume created', { id: row.id, org: orgId, name: row.name, size_gb: row.sizeGb });
        return row;
      });
    });
  }

  /** By id (vol-...) or by name, of this organization only: another's is a 404. */
  async get(orgId: string, ref: string): Promise<VolumeRow> {
    const row = ID_RE.test(ref) ? await this.d.store.volumes.byId(ref) : NAME_RE.test(ref) ? await this.d.store.volumes.byName(orgId, ref) : undefined;
    if (!row || row.orgId !== orgId) throw notFound(ref);
    return row;
  }

  list(orgId: string): Promise<VolumeRow[]> {
    return this.d.store.volumes.list(orgId);
  }

  /** The organization's sandboxes (not deleted) that mount each volume, by volume id. */
  async mountedBy(orgId: string): Promise<Map<string, string[]>> {
    const out = new Map<string, string[]>();
    for (const r of await this.d.store.sandboxes.live()) {
      if (r.orgId !== orgId) continue;
      for (const v of r.volumes ?? []) out.set(v.id, [...(out.get(v.id) ?? []), r.id]);
    }
    return out;
  }

  async usedBytes(row: VolumeRow): Promise<number | undefined> {
    if (!this.d.host) return undefined;
    return (await this.d.host.usage(row.id)).usedBytes;
  }

  /**
   * Deletes it: refused while a sandbox mounts it, unless `force` (those sandboxes are deleted
   * first). Its image is unmounted, its loop device freed and its files removed before it answers.
   */
  async remove(orgId: string, ref: string, force: boolean): Promise<VolumeRow> {
    const host = this.host();
    const row = await this.get(orgId, ref);
    return this.locks.run(row.id, async () => {
      const users = (await this.mountedBy(orgId)).get(row.id) ?? [];
      if (users.length && !force) {
        throw new ServiceError('VOLUME_IN_USE', `volume "${row.name}" is mounted by ${users.length} sandbox(es): delete them first, or delete with ?force=true (which deletes them)`, { sandboxes: users });
      }
      for (const id of users) {
        await this.d.deleteSandbox(orgId, id).catch((err: unknown) => {
          if (!(err instanceof ServiceError && err.code === 'NOT_FOUND')) throw err;
        });
      }
      await this.d.settle?.();
      // Sandboxes kept ready with it mount it too (no one's yet): they go first.
      await this.d.dropWarm?.(row.id);
      await host.destroy(row.id);
      await this.d.store.volumes.remove(row.id);
      this.d.log('volume deleted', { id: row.id, org: orgId, name: row.name, forced_sandboxes: users });
      return row;
    });
  }

  /** The mounts a create asks for, checked: the organization's volumes on this machine, each path valid and used once. */
  async resolve(orgId: string, mounts: VolumeMount[] | undefined): Promise<SandboxVolumeRow[]> {
    if (!mounts?.length) return [];
    this.host();
    if (mounts.length > MAX_VOLUMES_PER_SANDBOX) throw new ServiceError('VALIDATION_ERROR', `at most ${MAX_VOLUMES_PER_SANDBOX} volumes per sandbox`);
    const out: SandboxVolumeRow[] = [];
    for (const m of mounts) {
      const problem = checkMountPath(m.path);
      if (problem) throw new ServiceError('VALIDATION_ERROR', `volume mount path ${JSON.stringify(m.path)} ${problem}`, { path: m.path });
      for (const o of out) {
        if (o.path === m.path || o.path.startsWith(`${m.path}/`) || m.path.startsWith(`${o.path}/`)) {
          throw new ServiceError('VALIDATION_ERROR', `volume mount paths ${JSON.stringify(o.path)} and ${JSON.stringify(m.path)} overlap`);
        }
      }
      const v = await this.get(orgId, m.name);
      if (v.nodeId !== this.d.nodeId) throw new ServiceError('INVALID_STATE', `volume "${v.name}" lives on node ${v.nodeId}, not this one`);
      out.push({ id: v.id, name: v.name, path: m.path, readOnly: m.read_only ?? false });
    }
    return out;
  }

  render(row: VolumeRow, mountedBy: string[], usedBytes?: number): Volume {
    return {
      object: 'volume',
      id: row.id,
      name: row.name,
      organization_id: row.orgId,
      size_gb: row.sizeGb,
      ...(usedBytes !== undefined ? { used_bytes: usedBytes } : {}),
      mounted_by: mountedBy,
      node: row.nodeId,
      created_at: row.createdAt,
    };
  }

  /** At start: each volume's image mounted on the host again (after a reboot), so that its sandboxes start. */
  async remountAll(): Promise<void> {
    if (!this.d.host) return;
    for (const v of await this.d.store.volumes.all()) {
      if (v.nodeId !== this.d.nodeId) continue;
      await this.d.host.usage(v.id).catch((err: unknown) => this.d.log('a volume could not be mounted', { id: v.id, error: String(err) }));
    }
  }
}

/** Why `path` cannot be a mount point (runtime/volumes.ts volumePathProblem), for the API. */
export function checkMountPath(path: string): string | undefined {
  return volumePathProblem(path);
}

const exists = (name: string) => new ServiceError('ALREADY_EXISTS', `this organization has a volume named "${name}" already`, { name });

/** A sandbox row's volumes as its answer lists them. */
export function renderSandboxVolumes(row: Pick<SandboxRow, 'volumes'>): Array<{ volume_id: string; name: string; path: string; read_only: boolean }> {
  return (row.volumes ?? []).map((v) => ({ volume_id: v.id, name: v.name, path: v.path, read_only: v.readOnly }));
}
