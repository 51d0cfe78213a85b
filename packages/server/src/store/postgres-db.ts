import pg from 'pg';
import { StoreUnavailableError } from './errors.js';
import { migrationsFor } from './migrations.js';
import type { Dialect, Params, Raw, SqlDb } from './sql/db.js';

/**
 * Errors that say the server cannot be reached now, not that the statement was wrong: connection
 * exceptions (class 08), the server shutting down or starting (57P01-57P03), no connection slot
 * left (53300), the socket's own failures, and pg's messages for a connection lost or never made.
 */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300']);
const UNAVAILABLE_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN', 'ENOENT']);
const UNAVAILABLE_MESSAGES = /^(Connection terminated|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error|Client was closed)/;

export function isUnavailable(err: unknown): boolean {
  if (err instanceof StoreUnavailableError) return true;
  const e = err as { code?: unknown; message?: unknown } | null;
  if (typeof e?.code === 'string') return e.code.startsWith('08') || UNAVAILABLE_SQLSTATES.has(e.code) || UNAVAILABLE_ERRNOS.has(e.code);
  return typeof e?.message === 'string' && UNAVAILABLE_MESSAGES.test(e.message);
}

/** An unavailable server's error as StoreUnavailableError; any other error as it is. */
export function storeError(err: unknown): unknown {
  if (err instanceof StoreUnavailableError || !isUnavailable(err)) return err;
  return new StoreUnavailableError(`the PostgreSQL store is unavailable: ${(err as Error).message}`, { cause: err });
}

/** A timestamptz as the rows carry times: toISOString()'s text, in UTC to the millisecond. */
const iso = (t: string): string => `to_char((${t}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/**
 * PostgreSQL's ways: times from the database server's clock, the one that every replica and node
 * on other machines shares (a lease does not hang on how well their clocks agree).
 */
const POSTGRES: Dialect = {
  name: 'postgres',
  schemaVersion: 'SELECT coalesce(max(version), 0) AS version FROM schema_migrations',
  clock(p: Params, now: string | undefined, leaseMs?: number) {
    const at = `coalesce(${p.add(now ?? null)}::timestamptz, now())`;
    const lease = leaseMs === undefined ? '' : iso(`${at} + ${p.add(leaseMs)}::bigint * interval '1 millisecond'`);
    return { at: iso(at), lease };
  },
  arrayTexts: (table, column) => `SELECT DISTINCT jsonb_array_elements_text(${column}) AS value FROM ${table}`,
  isUniqueViolation: (err) => (err as { code?: unknown }).code === '23505',
};

const JSON_OIDS = new Set<number>([pg.types.builtins.JSON, pg.types.builtins.JSONB]);

/**
 * The pool's type parsers: json and jsonb as their text, which the row mappers parse as they do
 * SQLite's JSON columns (one reading for both; pg's own parse would hand back objects).
 */
export const PG_TYPES: pg.CustomTypesConfig = {
  getTypeParser: (oid, format) => (JSON_OIDS.has(oid) ? (text: string) => text : pg.types.getTypeParser(oid, format)),
};

/**
 * The pool behind the repositories. A query takes a connection, runs, gives it back; a connection
 * whose server went away is dropped (not given back), so queries after the server returns open new
 * ones and succeed without a restart of the daemon.
 */
export class PgDb implements SqlDb {
  readonly dialect = POSTGRES;

  constructor(private readonly pool: pg.Pool) {}

  async query(sql: string, args: unknown[] = []): Promise<pg.QueryResult<Raw>> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw storeError(err);
    }
    try {
      const res = await client.query<Raw>(sql, args);
      client.release();
      return res;
    } catch (err) {
      // A statement's own error (a constraint, say) leaves the connection fine; a lost one goes.
      client.release(isUnavailable(err) ? (err as Error) : undefined);
      throw storeError(err);
    }
  }

  async all(sql: string, args: unknown[] = []): Promise<Raw[]> {
    return (await this.query(sql, args)).rows;
  }

  async get(sql: string, args: unknown[] = []): Promise<Raw | undefined> {
    return (await this.query(sql, args)).rows[0];
  }

  /** The number of rows the statement changed. */
  async run(sql: string, args: unknown[] = []): Promise<number> {
    return (await this.query(sql, args)).rowCount ?? 0;
  }
}

/** Taken for the migrations' transaction: replicas that start together apply them once. ('sbd-migr') */
const MIGRATION_LOCK = '8314318008351287154';

/**
 * Applies the migrations not yet recorded in schema_migrations, all in one transaction under a
 * transaction-scoped advisory lock: a second replica waits for the first, then finds nothing to do.
 */
export async function migrate(pool: pg.Pool): Promise<void> {
  const steps = migrationsFor('postgres');
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())');
    const current = Number((await client.query<Raw>('SELECT coalesce(max(version), 0) AS v FROM schema_migrations')).rows[0]!.v);
    if (current > steps.length) {
      throw new Error(`the database's schema is at version ${current}, newer than this sandboxd knows (${steps.length}): run a newer sandboxd`);
    }
    for (let i = current; i < steps.length; i++) {
      await client.query(steps[i]!);
      await client.query('INSERT INTO schema_migrations (version) VALUES ($1)', [i + 1]);
    }
    await client.query('COMMIT');
    client.release();
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release(err as Error);
    throw err;
  }
}
