/**
 * Repository interfaces. Async so that a networked store (PostgreSQL) can implement them later;
 * state changes of a sandbox are compare-and-set on its `version`.
 */

export interface OrgRow {
  id: string;
  name: string;
  createdAt: string;
}

export interface ApiKeyRow {
  id: string;
  orgId: string;
  name: string;
  /** sha256 hex of the secret. */
  hash: string;
  scopes: string[];
  createdAt: string;
  revokedAt: string | null;
  lastUsedAt: string | null;
}

export type TemplateStatus = 'building' | 'active' | 'failed';

export interface TemplateRow {
  id: string;
  /** null for built-in (public) templates. */
  orgId: string | null;
  name: string;
  displayName: string;
  description: string;
  category: string;
  language: string;
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  status: TemplateStatus;
  isPublic: boolean;
  buildId: string | null;
  features: string[];
  tags: string[];
  /** Layer ids, top-most first. */
  layers: string[];
  env: Record<string, string>;
  workdir: string | null;
  errorMessage: string | null;
  createdAt: string;
  updatedAt: string;
}

export type SandboxRowStatus = 'creating' | 'running' | 'paused' | 'stopped' | 'deleted';

export interface SandboxRow {
  id: string;
  orgId: string;
  templateId: string;
  templateName: string;
  status: SandboxRowStatus;
  region: string;
  internetAccess: boolean;
  /**
   * Egress policy (runtime/egress-policy.ts) when not the default. `internetAccess` says whether
   * the sandbox has a network at all (fixed at create); this says what it may reach through it.
   */
  egress: { internet: boolean; allow: string[]; deny: string[] } | null;
  timeoutSeconds: number | null;
  expiresAt: string | null;
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  /** Layer ids the sandbox was created on (kept so a template rebuild never changes it). */
  layers: string[];
  /** Template env + workdir at create time. */
  templateEnv: Record<string, string>;
  envVars: Record<string, string>;
  gatewayPort: number | null;
  nodeId: string;
  version: number;
  deletedReason: string | null;
  createdAt: string;
  updatedAt: string;
  deletedAt: string | null;
  /** What its deadline does to a running sandbox: delete it (as ever) or pause it. */
  onTimeout: 'delete' | 'pause';
  /** Paused after this long with no call or traffic (null: never). */
  idleTimeoutSeconds: number | null;
  /** An agent call to it while paused resumes it. */
  autoResume: boolean;
  /**
   * When a running sandbox with an idle timeout is looked at again (an index serves the sweep).
   * Not moved on every call: the daemon keeps the latest activity in memory and moves this only
   * when it comes due, so it may lag behind; after a restart the daemon counts from its start.
   */
  idleCheckAt: string | null;
  /** The snapshot it was created from or last restored to (null: its template's files). */
  snapshotId: string | null;
  /** The sandboxes its files descend from (it was forked or made from a snapshot of them), nearest first. */
  lineage: string[];
}

export interface SandboxListFilter {
  orgId: string;
  status?: string;
  template?: string;
  region?: string;
  /** Exclusive: rows created before this (createdAt, id) pair, newest first. */
  after?: { createdAt: string; id: string };
  limit: number;
}

/**
 * An organization's overrides of the configured limits, by limit name (services/limits.ts): a
 * missing name inherits the default, null means no limit.
 */
export type LimitOverrides = Record<string, number | null>;

export interface OrgRepo {
  create(name: string): Promise<OrgRow>;
  byId(id: string): Promise<OrgRow | undefined>;
  byName(name: string): Promise<OrgRow | undefined>;
  list(): Promise<OrgRow[]>;
  remove(id: string): Promise<void>;
  /** The organization's overrides ({} when it has none). */
  limits(id: string): Promise<LimitOverrides>;
  /** Replaces the organization's overrides ({} removes them all). */
  setLimits(id: string, overrides: LimitOverrides): Promise<void>;
}

/**
 * What an organization's sandboxes hold. Active = being created, running or paused: they hold
 * memory (a paused sandbox keeps its memory). Every sandbox not deleted holds its disk.
 */
export interface SandboxUsage {
  active: number;
  activeVcpu: number;
  activeMemoryMb: number;
  stopped: number;
  diskGb: number;
}

export interface ApiKeyRepo {
  insert(row: ApiKeyRow): Promise<void>;
  byHash(hash: string): Promise<ApiKeyRow | undefined>;
  byId(id: string): Promise<ApiKeyRow | undefined>;
  list(orgId?: string): Promise<ApiKeyRow[]>;
  revoke(id: string, at: string): Promise<boolean>;
  touch(id: string, at: string): Promise<void>;
}

export interface TemplateRepo {
  upsert(row: TemplateRow): Promise<void>;
  byId(id: string): Promise<TemplateRow | undefined>;
  /** A name visible to `orgId`: the org's own first, then a built-in. */
  byName(name: string, orgId: string): Promise<TemplateRow | undefined>;
  list(orgId: string): Promise<TemplateRow[]>;
  remove(id: string): Promise<void>;
}

export interface SandboxRepo {
  insert(row: SandboxRow): Promise<void>;
  byId(id: string): Promise<SandboxRow | undefined>;
  list(filter: SandboxListFilter): Promise<SandboxRow[]>;
  /** Every row not deleted (all orgs), for reconciliation and the gateway; with `nodeId`, that node's only. */
  live(nodeId?: string): Promise<SandboxRow[]>;
  /** Compare-and-set on version: returns the new row, or undefined if the version moved. */
  update(id: string, version: number, patch: Partial<Omit<SandboxRow, 'id' | 'version'>>): Promise<SandboxRow | undefined>;
  /** Live rows whose deadline is at or before `now` (with `nodeId`, that node's only). */
  expired(now: string, nodeId?: string): Promise<SandboxRow[]>;
  /** Running sandboxes whose idle check is due (with `nodeId`, that node's only). */
  idleDue(now: string, nodeId?: string): Promise<SandboxRow[]>;
  /** Deleted rows older than `before` are removed for good. */
  purgeDeleted(before: string): Promise<number>;
  /** Whether a sandbox that is not deleted (running, paused, stopped), or a preview of one, holds this gateway port. */
  gatewayPortUsed(port: number): Promise<boolean>;
  usage(orgId: string): Promise<SandboxUsage>;
  /** The same over every organization (the node's commitments). */
  usageAll(): Promise<SandboxUsage>;
  /** Sandboxes not deleted, by status. */
  countByStatus(): Promise<Record<string, number>>;
  /** Sandboxes not deleted, by the node that holds them (nodes with none are absent). */
  countByNode(): Promise<Record<string, number>>;
  countByTemplate(templateId: string): Promise<number>;
  remove(id: string): Promise<void>;
}

/** A port of a sandbox that has a preview URL. */
export interface PreviewRow {
  sandboxId: string;
  port: number;
  /** Open to anyone who has the URL; else it takes the sandbox's token or a signed link's cookie. */
  public: boolean;
  /** Port mode: the gateway port that serves it; host mode: null. */
  gatewayPort: number | null;
  createdAt: string;
}

export interface PreviewRepo {
  get(sandboxId: string, port: number): Promise<PreviewRow | undefined>;
  /** Inserts, or sets `public` and `gatewayPort` of the existing row. */
  upsert(row: PreviewRow): Promise<void>;
  forSandbox(sandboxId: string): Promise<PreviewRow[]>;
  /** How many previews the organization's sandboxes hold. */
  countForOrg(orgId: string): Promise<number>;
  /** Every preview (they go with their sandbox: all belong to sandboxes not deleted). */
  all(): Promise<PreviewRow[]>;
  remove(sandboxId: string, port: number): Promise<void>;
}

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

export interface Store {
  orgs: OrgRepo;
  keys: ApiKeyRepo;
  templates: TemplateRepo;
  sandboxes: SandboxRepo;
  builds: BuildRepo;
  uploads: UploadRepo;
  previews: PreviewRepo;
  snapshots: SnapshotRepo;
  /** Small persistent key/value settings (e.g. counters of the build rate limit). */
  kv: { get(key: string): Promise<string | undefined>; set(key: string, value: string): Promise<void> };
  close(): void;
}

export type BuildStatus = 'building' | 'active' | 'failed';

export interface BuildRow {
  id: string;
  orgId: string;
  templateId: string;
  alias: string;
  status: BuildStatus;
  progress: number;
  currentStep: string | null;
  /** The normalized build request (JSON). */
  request: unknown;
  errorMessage: string | null;
  createdAt: string;
  startedAt: string | null;
  completedAt: string | null;
}

export interface UploadRow {
  orgId: string;
  /** `f_<sha256 hex>` for files, `t_<files_hash>` for tarballs of the newer client shape. */
  fileId: string;
  path: string;
  sha256: string;
  size: number;
  kind: 'file' | 'tarball';
  createdAt: string;
}

export interface BuildRepo {
  insert(row: BuildRow): Promise<void>;
  byId(id: string): Promise<BuildRow | undefined>;
  latestForTemplate(templateId: string): Promise<BuildRow | undefined>;
  update(id: string, patch: Partial<Omit<BuildRow, 'id'>>): Promise<void>;
  countSince(orgId: string, since: string): Promise<number>;
  /** Builds left 'building' by a previous process. */
  unfinished(): Promise<BuildRow[]>;
  /** The organization's builds still running. */
  running(orgId: string): Promise<BuildRow[]>;
}

export interface UploadRepo {
  upsert(row: UploadRow): Promise<void>;
  byFileId(orgId: string, fileId: string): Promise<UploadRow | undefined>;
  /** The latest upload of `path` by the organization. */
  byPath(orgId: string, path: string): Promise<UploadRow | undefined>;
}

/** A sandbox query's node id: any string (rows of a single machine carry its host name), or none; else a TypeError. */
export function checkNodeFilter(nodeId: unknown): string | undefined {
  if (nodeId !== undefined && typeof nodeId !== 'string') throw new TypeError(`a node id to filter by is a string, not ${typeof nodeId}`);
  return nodeId;
}
