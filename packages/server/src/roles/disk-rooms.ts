import { statSync } from 'node:fs';
import { imageUse, readDiskSpace } from '../runtime/disk-space.js';
import { sandboxPaths } from '../runtime/sandbox-paths.js';
import { volumePaths } from '../runtime/volumes.js';
import { collectUploads } from '../services/blob-gc.js';
import { DiskRoom, type DiskClaim } from '../services/disk-room.js';
import type { OrgStorage } from '../services/org-storage.js';
import type { Config } from '../config/index.js';
import type { SandboxRow, Store } from '../store/types/index.js';
import type { Log, openImages } from './shared.js';

/** The admissions of a control plane's writes against its filesystems' free space (services/disk-room.ts). */
export interface DiskRooms {
  /** The data directory's filesystem (sandbox disks of an in-process node, snapshots, uploads, build steps). */
  data: DiskRoom;
  /** The layers directory's, when it is another filesystem (else the same DiskRoom). */
  layers: DiskRoom;
  /** A sandbox's disk on this machine: a create's, a start's. */
  claimSandbox?: DiskClaim;
  /** A template build: its steps' disk in the data dir, for the whole build. */
  claimBuild: DiskClaim;
  /** A build step that runs: the layer it writes, in the layers dir. */
  claimStepLayer: DiskClaim;
  claimUpload: DiskClaim;
  /** A volume's image on this machine (its whole size_gb: it is sparse and may grow to it). */
  claimVolume?: DiskClaim;
  snapshots: { claim: DiskClaim; held?: (row: SandboxRow) => Promise<number> };
}

/** What a sandbox's disk on this machine holds: the allocated blocks of its image. */
export function localDiskHeld(dataDir: string): (row: SandboxRow) => Promise<number> {
  return async (row) => (await imageUse(sandboxPaths(dataDir, row.id).image))?.heldBytes ?? 0;
}

function device(path: string): number | undefined {
  try {
    return statSync(path).dev;
  } catch {
    return undefined;
  }
}

/**
 * Undefined when the operator turned admission off (SANDBOXD_DISK_ADMISSION=off). `localSandboxes`:
 * the sandboxes' disks are in this data directory (the all-in-one); a cluster's control holds no
 * sandbox disk (its nodes do).
 */
export function openDiskRooms(config: Pick<Config, 'dataDir' | 'layersDir' | 'disk'>, store: Store, localSandboxes: boolean): DiskRooms | undefined {
  if (!config.disk.admission) return undefined;
  // What may still grow: the disks of the sandboxes this machine holds for someone (every row not
  // deleted; a warm pool's sandboxes and the disk pool's images belong to no one and cannot grow).
  const ids = async () => (localSandboxes ? (await store.sandboxes.live()).map((r) => r.id) : []);
  // Volumes' images are sparse too, and may grow to their size_gb.
  const volumeImages = async () => (localSandboxes ? (await store.volumes.all()).map((v) => volumePaths(config.dataDir, v.id).image) : []);
  const data = new DiskRoom({
    name: 'the data filesystem',
    reserve: config.disk.reserve,
    read: async () => readDiskSpace(config.dataDir, await ids(), config.disk.overcommit, await volumeImages()),
  });
  const sameFs = device(config.dataDir) !== undefined && device(config.dataDir) === device(config.layersDir);
  const layers = sameFs ? data : new DiskRoom({ name: 'the layers filesystem', reserve: config.disk.reserve, read: () => readDiskSpace(config.layersDir) });
  const claim = (room: DiskRoom): DiskClaim => (bytes, what) => room.claim(bytes, what);
  return {
    data,
    layers,
    // A sandbox disk is sparse: admitted for its share of its size (SANDBOXD_DISK_OVERCOMMIT).
    ...(localSandboxes ? { claimSandbox: (bytes: number, what: string) => data.claim(Math.ceil(bytes / config.disk.overcommit), what) } : {}),
    claimBuild: claim(data),
    claimStepLayer: claim(layers),
    claimUpload: claim(data),
    ...(localSandboxes ? { claimVolume: claim(data) } : {}),
    snapshots: {
      claim: claim(data),
      ...(localSandboxes ? { held: localDiskHeld(config.dataDir) } : {}),
    },
  };
}

/** The metrics' figures per organization; what each sandbox's disk holds is left to GET /v1/account/limits (a scrape stats no sandbox's files). */
export async function orgStorageFigures(store: Store, storage: OrgStorage): Promise<Array<{ org: string; bytes: Record<string, number> }>> {
  return Promise.all(
    (await store.orgs.list()).map(async (o) => {
      const u = await storage.use(o.id, { disks: false });
      return { org: o.name, bytes: { snapshots: u.snapshotsBytes, templates: u.templatesBytes, uploads: u.uploadsBytes } };
    }),
  );
}

/** Uploads past their retention, then blobs no upload references (services/blob-gc.ts). */
export function uploadCollector(
  config: Pick<Config, 'uploadRetentionMs'>,
  store: Store,
  images: Pick<ReturnType<typeof openImages>, 'blobs' | 'images'>,
  inStore: boolean,
  log: Log,
): () => Promise<void> {
  return async () => {
    const r = await collectUploads({
      store,
      blobs: images.blobs,
      imageConfigs: async () => (await images.images.list()).map((i) => i.configDigest),
      inStore,
      uploadRetentionMs: config.uploadRetentionMs,
    });
    if (r.uploads || r.blobs) log(`dropped ${r.uploads} upload(s) past their retention and ${r.blobs} unreferenced blob(s) (${r.bytes} bytes)`);
  };
}
