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
