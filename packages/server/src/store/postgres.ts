import pg from 'pg';
import { StoreUnavailableError } from './errors.js';
import { isUnavailable, migrate, PG_TYPES, PgDb } from './postgres-db.js';
import { describeUrl, isPostgresUrl } from './postgres-url.js';
import { PgCoordination } from './pg-coordination.js';
import { SqlStore } from './sql/store.js';

export interface PostgresStoreOptions {
  /** Connections the pool opens at most (default 10). */
  maxConnections?: number;
  /** How long a query waits for a connection, connecting included, before it fails as unavailable (default 5000). */
  connectTimeoutMs?: number;
  /** A query with no answer for this long fails as unavailable (default 30000): a server that hangs does not hang requests. */
  queryTimeoutMs?: number;
}

export class PostgresStore extends SqlStore {
  readonly coordination: PgCoordination;
  private ending: Promise<void> | undefined;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly db: PgDb,
    url: string,
    opts: PostgresStoreOptions,
  ) {
    super(db);
    // A lock's query is answered at once by a server that answers at all: one that does not, for
    // 10 s, fails the lock's wait as unavailable (503) even where other queries may take longer.
    this.coordination = new PgCoordination(pool, url, {
      connectTimeoutMs: opts.connectTimeoutMs ?? 5000,
      queryTimeoutMs: Math.min(opts.queryTimeoutMs ?? 30_000, 10_000),
    });
  }

  /** Answers when the server does (StoreUnavailableError when it does not): for readiness checks. */
  async ping(): Promise<void> {
    await this.db.run('SELECT 1');
  }

  /**
   * Connects to `url` (postgres:// or postgresql://) and brings the schema up to date. Fails with
   * StoreUnavailableError when the server cannot be reached, with an Error naming the database
   * (never its password) for anything else.
   */
  static async open(url: string, opts: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const where = describeUrl(url);
    if (!isPostgresUrl(url)) throw new Error(`a PostgreSQL store needs a postgres:// or postgresql:// URL (postgresql://user:password@host:5432/database), got ${where}`);
    const pool = new pg.Pool({
      connectionString: url,
      application_name: 'sandboxd',
      max: opts.maxConnections ?? 10,
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 5000,
      query_timeout: opts.queryTimeoutMs ?? 30_000,
      keepAlive: true,
      types: PG_TYPES,
    });
    // An idle connection whose server went away: the pool drops it and opens a new one when asked.
    pool.on('error', () => undefined);
    try {
      await migrate(pool);
    } catch (err) {
      await pool.end().catch(() => undefined);
      const reason = err instanceof Error ? err.message : String(err);
      if (isUnavailable(err)) throw new StoreUnavailableError(`the PostgreSQL store at ${where} is unavailable: ${reason}`, { cause: err });
      throw new Error(`cannot open the PostgreSQL store at ${where}: ${reason}`, { cause: err });
    }
    return new PostgresStore(pool, new PgDb(pool), url, opts);
  }

  /** Ends the pool once its queries are done. */
  end(): Promise<void> {
    this.ending ??= this.coordination
      .close()
      .then(() => this.pool.end())
      .catch(() => undefined);
    return this.ending;
  }

  /** The Store interface's close is synchronous: the pool ends in the background (end() to wait for it). */
  close(): void {
    void this.end();
  }
}
