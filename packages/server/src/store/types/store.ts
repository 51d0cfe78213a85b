import type { ApiKeyRepo, OrgRepo } from './accounts.js';
import type { NodeRepo } from './nodes.js';
import type { ReplicaRepo } from './replicas.js';
import type { PreviewRepo, SandboxRepo } from './sandboxes.js';
import type { SnapshotRepo } from './snapshots.js';
import type { BuildLogRepo, BuildRepo, TemplateRepo } from './templates.js';
import type { BlobRepo, UploadRepo } from './uploads.js';
import type { VolumeRepo } from './volumes.js';

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

/** Which database a store is, the schema version it is at, and the one this code brings it to. */
export interface StoreSchema {
  dialect: 'sqlite' | 'postgres';
  version: number;
  /** The steps this code knows: a database past it was written by a later release. */
  latest: number;
}
