import type { SandboxVolumeRow } from './volumes.js';

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
