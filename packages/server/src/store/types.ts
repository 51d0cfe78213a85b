/**
 * Repository interfaces, async for the networked store (PostgreSQL); one implementation of them
 * serves both databases (sql/). State changes of a sandbox are compare-and-set on its `version`.
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
  /** A built-in template being built: percent done, and when it should be ready (null otherwise). */
  buildProgress?: number | null;
  buildEtaAt?: string | null;
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
  /** Labels its creator gave it (absent or {}: none). */
  metadata?: Record<string, string>;
  /**
   * The access token the E2B-compatible API hands out for it (http/routes/e2b.ts): one sandbox
   * token, kept so that every client gets the same one, which E2B's clients also sign file URLs
   * with (the gateway recomputes those signatures from it). Null until first asked for.
   */
  e2bAccessToken?: string | null;
  /** The volumes it mounts (issue 32; absent or []: none). */
  volumes?: SandboxVolumeRow[];
}

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
  /** Keys revoked at or after `since` (an ISO time; '' for all), for the revocation lists of the processes that check tokens. */
  revokedSince(since: string): Promise<Array<{ id: string; revokedAt: string }>>;
  /** Removes every key of the organization (it is being deleted); returns how many. */
  removeForOrg(orgId: string): Promise<number>;
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
  /**
   * Removes the row `oldId` and inserts `row` in its place, at once: no reader (an admission
   * counting the organization's usage) sees both rows, or neither. A create's placeholder row
   * taking its sandbox's id. When `oldId` is not there (a clean-up took it for abandoned, and its
   * quota went to another create), nothing is inserted: false.
   */
  replace(oldId: string, row: SandboxRow): Promise<boolean>;
  byId(id: string): Promise<SandboxRow | undefined>;
  list(filter: SandboxListFilter): Promise<SandboxRow[]>;
  /** Every row not deleted (all orgs), for reconciliation and the gateway; with `nodeId`, that node's only. */
  live(nodeId?: string): Promise<SandboxRow[]>;
  /** Which of `ids` are rows of node `nodeId` that were deleted (a sandbox the node may still hold, its removal missed); at most 1000 ids. */
  deletedAmong(nodeId: string, ids: string[]): Promise<string[]>;
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
  /** What each node's sandboxes hold (as usage() per organization), for placement; nodes with none are absent. */
  usageByNode(): Promise<Record<string, SandboxUsage>>;
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

export interface Store {
  orgs: OrgRepo;
  keys: ApiKeyRepo;
  templates: TemplateRepo;
  sandboxes: SandboxRepo;
  builds: BuildRepo;
  uploads: UploadRepo;
  /** Uploaded files' bytes, for replicas that share the store (services/store-blobs.ts). */
  blobs: BlobRepo;
  /** Build logs as they are written, read by offset. */
  buildLogs: BuildLogRepo;
  previews: PreviewRepo;
  snapshots: SnapshotRepo;
  volumes: VolumeRepo;
  nodes: NodeRepo;
  /** The processes that serve from this store (the all-in-one daemon, control replicas, edges), each as it last said it runs. */
  replicas: ReplicaRepo;
  /** Which database this is, and how far its schema is: for `sandboxd cluster status`. */
  schema(): Promise<StoreSchema>;
  /** Small persistent key/value settings (e.g. counters of the build rate limit). */
  kv: {
    get(key: string): Promise<string | undefined>;
    set(key: string, value: string): Promise<void>;
    /** Sets `key` unless it is set: returns the value it has now (the first writer's, when several race). */
    setIfAbsent(key: string, value: string): Promise<string>;
  };
  /**
   * Events counted against a rate limit (a sliding window every process sharing the store sees):
   * `record` adds one (ms since the epoch), `count` those of `key` after `since` with the oldest.
   */
  rates: {
    record(key: string, at: number, id: string): Promise<void>;
    count(key: string, since: number): Promise<{ n: number; oldest: number | null }>;
    remove(id: string): Promise<void>;
    /** Forgets events before `before`; returns how many. */
    purge(before: number): Promise<number>;
  };
  /** Present when several processes share the store (PostgreSQL): how they coordinate. */
  coordination?: Coordination;
  close(): void;
}

/** Locks and messages across the processes that share a store (store/pg-coordination.ts). */
export interface Coordination {
  /** Runs `fn` holding the named lock, waiting for it while another process holds it. */
  exclusive<T>(name: string, fn: () => Promise<T>): Promise<T>;
  /** Runs `fn` holding the named lock if no other process holds it now. */
  tryExclusive<T>(name: string, fn: () => Promise<T>): Promise<{ ran: true; value: T } | { ran: false }>;
  /** Sends `payload` (under 7,900 bytes) to every process subscribed to `channel`, this one included. */
  publish(channel: string, payload: string): Promise<void>;
  subscribe(channel: string, fn: (payload: string) => void): () => void;
  /** `fn` runs when the subscription came back after a loss: messages sent meanwhile were lost. */
  onReconnect(fn: () => void): () => void;
  /** Whether messages are heard now (false while the listening connection is down). */
  listening(): boolean;
  close(): Promise<void>;
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
  /**
   * Replicas: when the process running it last said it still does (absent or null on one machine,
   * where a restart is the only way a build stops running unfinished).
   */
  heartbeatAt?: string | null;
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
  /** Removes the organization's uploads (it is being deleted); returns how many. */
  removeForOrg(orgId: string): Promise<number>;
  /** Bytes the organization's uploads reference: each content (sha256) once, however many names it has. */
  bytesForOrg(orgId: string): Promise<number>;
  /** Every content some upload of any organization references (what blob collection must keep). */
  referencedSha256s(): Promise<Set<string>>;
  /** Removes uploads last uploaded or named (created_at) before `before`: a client uploads them again. */
  removeOlderThan(before: string): Promise<number>;
}

/**
 * Content-addressed blobs kept in the store in chunks of bounded size, so that a file any replica
 * received can be read by every other. A blob is written under an id of its own (`begin`,
 * `append`), and named by its content only once it is complete and checked (`commit`): a blob
 * readable under a sha256 is always whole. Nothing here checks the hash; the caller does.
 */
export interface BlobRepo {
  /** Starts a blob under `id` (a fresh random id), not readable by any sha256 yet. */
  begin(id: string, at: string): Promise<void>;
  /** Adds chunk number `seq` (0, 1, 2, ...) of a blob begun and not committed. */
  append(id: string, seq: number, data: Uint8Array): Promise<void>;
  /**
   * Names the blob by its content. When a blob of that content is there already (another upload
   * of the same bytes), this one is dropped and the answer is 'exists'.
   */
  commit(id: string, sha256: string, size: number): Promise<'stored' | 'exists'>;
  /** Drops a blob that is not committed, with its chunks (a write that failed). */
  discard(id: string): Promise<void>;
  stat(sha256: string): Promise<{ size: number } | undefined>;
  /** Chunks `fromSeq` and on of the committed blob, at most `limit` of them, in order ([] past its end or for no such blob). */
  chunks(sha256: string, fromSeq: number, limit: number): Promise<Buffer[]>;
  /** Drops blobs begun before `before` and never committed (their writer died); returns how many. */
  purgeUncommitted(before: string): Promise<number>;
  /** Committed blobs begun before `before` that no upload of any organization references. */
  unreferenced(before: string): Promise<string[]>;
  /** Drops a committed blob with its chunks, unless an upload references it (by then); whether it went. */
  removeUnreferenced(sha256: string): Promise<boolean>;
}

/**
 * Each build's log, as bytes appended in order by the one process that runs the build, read from
 * any byte offset by every process that shares the store.
 */
export interface BuildLogRepo {
  /** Appends `data` at the end of the build's log; returns the log's length after it. */
  append(buildId: string, data: Uint8Array): Promise<number>;
  /** At most `maxBytes` of the log from `offset` on (none past the end), and the log's length now. */
  read(buildId: string, offset: number, maxBytes: number): Promise<{ data: Buffer; size: number }>;
}

/**
 * What the operator wants of a node: `active` takes new sandboxes; `cordoned` takes nothing new;
 * `draining` takes nothing new, holds no warm pool, and its stopped and paused sandboxes are moved
 * to other nodes (services/sandboxes/evacuate.ts). The node never sets it.
 */
export type NodeStatus = 'active' | 'cordoned' | 'draining';

export const NODE_STATUSES: readonly NodeStatus[] = ['active', 'cordoned', 'draining'];

/** What a node has in all (it reports it; the operator's overcommit ratio applies on top). */
export interface NodeCapacity {
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  maxSandboxes: number;
}

/** What a node says it holds now. */
export interface NodeUsage {
  sandboxes: number;
  vcpu: number;
  memoryMb: number;
  diskGb: number;
}

/** What a node sends with each heartbeat. */
export interface NodeReport {
  usage: NodeUsage;
  /** Warm-pool key → sandboxes ready for it. */
  warm: Record<string, number>;
  /** A digest of the set of layers the node holds (the list is too long for every heartbeat): it changes when the set does. */
  layersDigest: string | null;
  /** Sent when it changed (a disk grown, say); else the registered one stays. */
  capacity?: NodeCapacity;
  /**
   * Sandboxes the node holds that no live row of it names and no control replica claims, as its
   * orphan collector last found them (it destroys each after its grace). Absent: not counted (a
   * node of an earlier release).
   */
  orphans?: number;
}

/** What a node says of itself when it starts. */
export interface NodeRegistration {
  /** A DNS label: [a-z0-9-], at most 63, no hyphen at either end. */
  id: string;
  /** The base URL of the node's API (http or https). */
  url: string;
  capacity: NodeCapacity;
}

/** A machine that hosts sandboxes (`sandboxd node`), as it registered and last reported. */
export interface NodeRow {
  id: string;
  url: string;
  status: NodeStatus;
  capacity: NodeCapacity;
  usage: NodeUsage;
  warm: Record<string, number>;
  layersDigest: string | null;
  /** What its last heartbeat reported of sandboxes no one owns (NodeReport.orphans); absent: it did not say. */
  orphans?: number;
  /** Moves on every write of the row (registration, heartbeat, status). */
  version: number;
  heartbeatAt: string;
  /** Past this the node is presumed lost: it has not heartbeaten in time. */
  leaseExpiresAt: string;
  /** Its first registration (a re-registration keeps it). */
  registeredAt: string;
  updatedAt: string;
}

/**
 * The cluster's nodes. Times are the store's clock unless `now` (ISO-8601) is given: in PostgreSQL
 * the database server's, the one clock that nodes and control replicas on different machines share,
 * so a lease does not depend on how well their clocks agree. Bad input is a TypeError, before SQL.
 */
export interface NodeRepo {
  /**
   * Adds the node (status `active`, nothing reported yet) or, if it is known, takes its new URL and
   * capacity. Either way its lease starts anew. The status stays: a cordoned node that restarts
   * stays cordoned; what it reported stays until its next heartbeat.
   */
  register(node: NodeRegistration, leaseMs: number, now?: string): Promise<NodeRow>;
  /**
   * Takes the report and extends the lease to `now + leaseMs`. A node that is not registered (or was
   * removed) gets undefined and no row: it must register again, explicitly.
   */
  heartbeat(id: string, report: NodeReport, leaseMs: number, now?: string): Promise<NodeRow | undefined>;
  byId(id: string): Promise<NodeRow | undefined>;
  /** Every node, by id. */
  list(): Promise<NodeRow[]>;
  /** Nodes whose lease runs past `now`, whatever their status, by id. */
  live(now?: string): Promise<NodeRow[]>;
  /** Whether the node exists (its status is then `status`). */
  setStatus(id: string, status: NodeStatus): Promise<boolean>;
  /** Forgets the node; whether it existed. Its sandboxes' rows are left as they are. */
  remove(id: string): Promise<boolean>;
  /**
   * register(), unless an operator's removal of the node is recorded (recordRemoval) at or after
   * `issuedAt` (ISO: when the node's registry credential was made; absent: any removal counts):
   * then undefined, and nothing is written. One statement: a removal recorded meanwhile is seen.
   */
  registerUnlessRemoved(node: NodeRegistration, leaseMs: number, issuedAt?: string, now?: string): Promise<NodeRow | undefined>;
  /**
   * Records that an operator removed the node (`sandboxd nodes remove`), at `now` (again: the
   * later time); returns it. It outlives the node's row: the node does not come back by itself.
   */
  recordRemoval(id: string, now?: string): Promise<string>;
  /** When the node's removal was recorded; undefined: none is (never removed, or admitted since). */
  removedAt(id: string): Promise<string | undefined>;
  /** Forgets the node's removal (`sandboxd nodes admit`); whether one was recorded. */
  admit(id: string): Promise<boolean>;
}

/** Which database a store is, the schema version it is at, and the one this code brings it to. */
export interface StoreSchema {
  dialect: 'sqlite' | 'postgres';
  version: number;
  /** The steps this code knows: a database past it was written by a later release. */
  latest: number;
}

/** What a process serving from the store is: `serve` (the all-in-one daemon), a control replica, an edge. */
export type ReplicaRole = 'serve' | 'control' | 'edge';

export const REPLICA_ROLES: readonly ReplicaRole[] = ['serve', 'control', 'edge'];

/** What a process says of itself: written when it starts and again on every beat. */
export interface ReplicaEntry {
  /** Unique per process: its host name, its pid and a few random characters. */
  id: string;
  role: ReplicaRole;
  hostname: string;
  pid: number;
  /** Where it serves: its API (control, the all-in-one), its probes (an edge). */
  url: string;
  version: string;
  startedAt: string;
}

export interface ReplicaRow extends ReplicaEntry {
  /** Its last beat, by the store's clock. */
  seenAt: string;
  /** Set when it shut down in order; null while it runs (or since it died without saying so). */
  stoppedAt: string | null;
}

/**
 * The processes that serve from the store, each recording itself (services/replica-presence.ts).
 * Times are the store's clock unless `now` is given, as for nodes.
 */
export interface ReplicaRepo {
  /** Writes the entry with `seenAt` = now (a stopped one that beats again runs again). */
  beat(entry: ReplicaEntry, now?: string): Promise<void>;
  /** It shut down in order: whether it was known. */
  stopped(id: string, now?: string): Promise<boolean>;
  /** Every one, by role then start, and the store's clock as it read them (ages are measured on it). */
  list(): Promise<{ now: string; replicas: ReplicaRow[] }>;
  /** Forgets those not seen since `before`; how many. */
  forget(before: string): Promise<number>;
}
