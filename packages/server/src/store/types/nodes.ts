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
