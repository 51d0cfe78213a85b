import { POSTGRES_FIRST } from './migrations-postgres-first.js';
import { SQLITE_FIRST } from './migrations-sqlite-first.js';

export type DialectName = 'sqlite' | 'postgres';

/** What each dialect calls a column type, for a step written once for both. */
interface ColumnTypes {
  /** Text that is compared or ordered (ids, times): byte order in both, as SQLite's own. */
  ordered: string;
  text: string;
  integer: string;
  /** 64 bits (SQLite's INTEGER is already). */
  bigint: string;
  /** JSON: as text in SQLite, jsonb in PostgreSQL. */
  json: string;
  bytes: string;
}

const TYPES: Record<DialectName, ColumnTypes> = {
  sqlite: { ordered: 'TEXT', text: 'TEXT', integer: 'INTEGER', bigint: 'INTEGER', json: 'TEXT', bytes: 'BLOB' },
  postgres: { ordered: 'text COLLATE "C"', text: 'text', integer: 'integer', bigint: 'bigint', json: 'jsonb', bytes: 'bytea' },
};

/** A step of the schema: its SQL in each dialect, null where that dialect takes no such step. */
export interface Migration {
  name: string;
  sqlite: string | null;
  postgres: string | null;
}

/** A step both dialects take, written once in their column types. */
const both = (name: string, sql: (t: ColumnTypes, dialect: DialectName) => string): Migration => ({
  name,
  sqlite: sql(TYPES.sqlite, 'sqlite'),
  postgres: sql(TYPES.postgres, 'postgres'),
});

/**
 * Every step of the schema, in order; a database records how many of its dialect's it has taken
 * (SQLite: PRAGMA user_version; PostgreSQL: a row of schema_migrations per step). So steps are only
 * ever appended: one never moves, changes or goes, or a database would skip or repeat one.
 */
export const MIGRATIONS: Migration[] = [
  ...SQLITE_FIRST.map((m) => ({ name: m.name, sqlite: m.sql, postgres: null })),
  { name: 'the PostgreSQL store, as the SQLite schema had come to', sqlite: null, postgres: POSTGRES_FIRST },

  /** Sandboxes found by their node (issue 10): each node reconciles its own; placement counts them per node. */
  both('sandboxes by node', () => `
  CREATE INDEX IF NOT EXISTS sandboxes_node_status ON sandboxes (node_id, status);
`),

  /**
   * The cluster's nodes (issue 10): each registers, heartbeats with a lease and reports what it has
   * and holds. Counts are columns (placement compares them); the warm counts are JSON.
   */
  both('nodes', (t) => `
  CREATE TABLE nodes (
    id ${t.ordered} PRIMARY KEY,
    url ${t.text} NOT NULL,
    status ${t.text} NOT NULL CHECK (status IN ('active', 'cordoned', 'draining')),
    capacity_vcpu ${t.bigint} NOT NULL,
    capacity_memory_mb ${t.bigint} NOT NULL,
    capacity_disk_gb ${t.bigint} NOT NULL,
    capacity_max_sandboxes ${t.bigint} NOT NULL,
    usage_sandboxes ${t.bigint} NOT NULL DEFAULT 0,
    usage_vcpu ${t.bigint} NOT NULL DEFAULT 0,
    usage_memory_mb ${t.bigint} NOT NULL DEFAULT 0,
    usage_disk_gb ${t.bigint} NOT NULL DEFAULT 0,
    warm ${t.json} NOT NULL DEFAULT '{}',
    layers_digest ${t.text},
    version ${t.integer} NOT NULL,
    heartbeat_at ${t.ordered} NOT NULL,
    lease_expires_at ${t.ordered} NOT NULL,
    registered_at ${t.ordered} NOT NULL,
    updated_at ${t.ordered} NOT NULL
  );
  CREATE INDEX nodes_lease ON nodes (lease_expires_at);
`),

  /** Rate-limited events (issue 10): a sliding window that every replica of control counts alike. */
  both('rate events', (t) => `
  CREATE TABLE rate_events (
    id ${t.ordered} PRIMARY KEY,
    key ${t.ordered} NOT NULL,
    at ${t.bigint} NOT NULL
  );
  CREATE INDEX rate_events_key_at ON rate_events (key, at);
`),

  /**
   * Uploaded files' bytes and build logs in the store (issue 10): every control replica reads what
   * any other received or wrote. A blob's chunks are written under its id and it takes its sha256
   * only when complete (a partial one is never readable by content); a build log is rows of bytes at
   * known offsets, so a reader on another replica asks from any offset. PostgreSQL keeps chunks out
   * of line without trying to compress them: uploads are mostly compressed already (tarballs).
   */
  both('upload blobs and build logs', (t, dialect) => `
  CREATE TABLE upload_blobs (
    id ${t.ordered} PRIMARY KEY,
    sha256 ${t.ordered} UNIQUE,
    size ${t.bigint},
    created_at ${t.ordered} NOT NULL
  );
  CREATE INDEX upload_blobs_uncommitted ON upload_blobs (created_at) WHERE sha256 IS NULL;
  CREATE TABLE upload_blob_chunks (
    blob_id ${t.ordered} NOT NULL,
    seq ${t.integer} NOT NULL,
    data ${t.bytes} NOT NULL,
    PRIMARY KEY (blob_id, seq)
  );
  ${dialect === 'postgres' ? 'ALTER TABLE upload_blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;' : ''}
  CREATE TABLE build_logs (
    build_id ${t.ordered} NOT NULL,
    start_offset ${t.bigint} NOT NULL,
    end_offset ${t.bigint} NOT NULL,
    data ${t.bytes} NOT NULL,
    PRIMARY KEY (build_id, start_offset)
  );
`),

  /**
   * A build's heartbeat (issue 10): with replicas, a build left `building` is known to be abandoned
   * only when the replica running it stopped saying it still runs it.
   */
  both('build heartbeat', (t) => `
  ALTER TABLE builds ADD COLUMN heartbeat_at ${t.ordered};
`),

  /**
   * Nodes an operator removed (issue 29): kept apart from `nodes`, whose row goes, so that the
   * registry refuses the node's credentials issued before the removal, and a node on the database
   * until `sandboxd nodes admit`.
   */
  both('node removals', (t) => `
  CREATE TABLE node_removals (
    id ${t.ordered} PRIMARY KEY,
    removed_at ${t.ordered} NOT NULL
  );
`),

  /**
   * The processes that serve from the store (issue 29): the all-in-one daemon, each control
   * replica and each edge records itself and beats, so that `sandboxd cluster status` shows which
   * run and which went away without a word.
   */
  both('replicas', (t) => `
  CREATE TABLE replicas (
    id ${t.ordered} PRIMARY KEY,
    role ${t.text} NOT NULL,
    hostname ${t.text} NOT NULL,
    pid ${t.bigint} NOT NULL,
    url ${t.text} NOT NULL,
    version ${t.text} NOT NULL,
    started_at ${t.ordered} NOT NULL,
    seen_at ${t.ordered} NOT NULL,
    stopped_at ${t.ordered}
  );
  CREATE INDEX replicas_seen ON replicas (seen_at);
`),

  /** What a node reports of the sandboxes it holds that no one owns (issue 29): null until it says. */
  both('node orphans', (t) => `
  ALTER TABLE nodes ADD COLUMN orphans ${t.bigint};
`),

  /**
   * A built-in template building behind a serving daemon (issue 27): its percent and when it should
   * be ready, in the store so that every control replica shows (and answers 503 with) the same.
   */
  both('built-in template progress', (t) => `
  ALTER TABLE templates ADD COLUMN build_progress ${t.integer};
  ALTER TABLE templates ADD COLUMN build_eta_at ${t.ordered};
`),

  /**
   * E2B's clients (issue 30): a sandbox's metadata (labels its list is filtered by; null: none),
   * and the one access token their API hands out for it (signed file URLs are checked against it).
   */
  both('sandbox metadata and E2B access token', (t) => `
  ALTER TABLE sandboxes ADD COLUMN metadata ${t.json};
  ALTER TABLE sandboxes ADD COLUMN e2b_access_token ${t.text};
`),

  /**
   * Volumes (issue 32): each lives on the node it was made on; names are unique per organization.
   * A sandbox's row, and a snapshot's, name the volumes it mounts (null: none).
   */
  both('volumes', (t) => `
  CREATE TABLE volumes (
    id ${t.ordered} PRIMARY KEY,
    org_id ${t.ordered} NOT NULL,
    name ${t.ordered} NOT NULL,
    size_gb ${t.bigint} NOT NULL,
    node_id ${t.ordered} NOT NULL,
    created_at ${t.ordered} NOT NULL,
    UNIQUE (org_id, name)
  );
  ALTER TABLE sandboxes ADD COLUMN volumes ${t.json};
  ALTER TABLE snapshots ADD COLUMN volumes ${t.json};
`),
];

/** The SQL of a dialect's steps, in order: its version N means the first N are applied. */
export function migrationsFor(dialect: DialectName): string[] {
  return MIGRATIONS.flatMap((m) => (m[dialect] === null ? [] : [m[dialect]]));
}
