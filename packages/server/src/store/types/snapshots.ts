import type { SandboxRow } from './sandboxes.js';
import type { SandboxVolumeRow } from './volumes.js';

/**
 * A saved filesystem (issue 13): one layer of its own (`layers[0]`, in the snapshot layer store)
 * on the layers of what it was taken of, with the settings a sandbox made from it gets.
 */
export interface SnapshotRow {
  id: string;
  orgId: string;
  name: string | null;
  /** The sandbox it was taken of (it may be deleted since). */
  sandboxId: string;
  /** The snapshot that sandbox was made from or restored to, if any. */
  parentId: string | null;
  templateId: string;
  templateName: string;
  /** Every layer a sandbox made from it mounts, top-most first: its own, then what it was taken on. */
  layers: string[];
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  templateEnv: Record<string, string>;
  envVars: Record<string, string>;
  internetAccess: boolean;
  egress: SandboxRow['egress'];
  /** Bytes of its own layer (what it counts against the organization's snapshot storage). */
  sizeBytes: number;
  /** The volumes the sandbox mounted (issue 32): a create from it mounts them again (their files are not in it). */
  volumes?: SandboxVolumeRow[];
  createdAt: string;
}

export interface SnapshotRepo {
  insert(row: SnapshotRow): Promise<void>;
  byId(id: string): Promise<SnapshotRow | undefined>;
  /** Newest first; `after` is exclusive, as for sandboxes. */
  list(filter: { orgId: string; sandboxId?: string; after?: { createdAt: string; id: string }; limit: number }): Promise<SnapshotRow[]>;
  remove(id: string): Promise<boolean>;
  /** Sum of sizeBytes of the organization's snapshots. */
  storageUsed(orgId: string): Promise<number>;
  /** Every layer any snapshot of any organization mounts. */
  referencedLayers(): Promise<Set<string>>;
}
