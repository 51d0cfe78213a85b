/** A volume as a sandbox row names it: by id (its name as it was at the create, for answers). */
export interface SandboxVolumeRow {
  id: string;
  name: string;
  path: string;
  readOnly: boolean;
}

/** A volume (issue 32): an ext4 image on the node it was made on, shared by its organization's sandboxes there. */
export interface VolumeRow {
  id: string;
  orgId: string;
  name: string;
  sizeGb: number;
  /** The node it lives on (placement puts the sandboxes that mount it there). */
  nodeId: string;
  createdAt: string;
}

export interface VolumeRepo {
  /** false: the organization has a volume of that name. */
  insert(row: VolumeRow): Promise<boolean>;
  byId(id: string): Promise<VolumeRow | undefined>;
  byName(orgId: string, name: string): Promise<VolumeRow | undefined>;
  /** By name. */
  list(orgId: string): Promise<VolumeRow[]>;
  /** Every organization's (reconcile at start). */
  all(): Promise<VolumeRow[]>;
  remove(id: string): Promise<boolean>;
  /** Sum of size_gb of the organization's volumes (what they count in max_total_disk_gb). */
  sizeGbForOrg(orgId: string): Promise<number>;
}
