import pg from 'pg';
import { createHash } from 'node:crypto';
import { storeError } from './postgres-db.js';

/** The advisory lock key of a name: the first 8 bytes of its sha256, as a signed bigint. */
export function lockKey(name: string): string {
  return createHash('sha256').update(`sandboxd-lock:${name}`).digest().readBigInt64BE(0).toString();
}

/** A lock held elsewhere is asked for again after this long at first, then twice as long each time, up to the last. */
const FIRST_RETRY_MS = 5;
const LAST_RETRY_MS = 250;
/**
 * The server's keepalives on the locks' connection (seconds: idle, interval, count): a holder
 * whose machine vanished without closing its connection (a partition, a frozen host) loses its
 * locks within about 25 s, not after the system's default of two hours and more, during which no
 * other replica would sweep or touch its sandboxes.
 */
const LOCK_KEEPALIVES = "SELECT set_config('tcp_keepalives_idle', '10', false), set_config('tcp_keepalives_interval', '5', false), set_config('tcp_keepalives_count', '3', false)";

export interface PgLocksOptions {
  connectionString: string;
  /** Connecting fails after this long (StoreUnavailableError). */
  connectTimeoutMs: number;
  /** A lock's query with no answer for this long fails, and its connection is dropped (with every lock on it). */
  queryTimeoutMs: number;
}

/**
 * Named locks across the processes that share a PostgreSQL server: session advisory locks, every
 * name this process holds on one connection of its own. A burst of creates (a lock per sandbox and
 * per organization) opens no connection per lock and takes none from the pool, so the queries run
 * inside a lock never wait for a connection another lock holds.
 *
 * - A lock is asked for with pg_try_advisory_lock, again until it is free, never with a query that
 *   waits: on the shared connection, a wait would hold up every other name (and a query timeout
 *   would cut a wait for a long reconcile). The server does not queue such askers, so the process
 *   that holds a name and has more work for it usually takes it again first; each process's work
 *   still goes in order, and the others get it when that work is done.
 * - Session locks stack within a session, so one holder per name in this process: the names held
 *   (or being asked for) here are kept, and a second asker here waits as one elsewhere would.
 * - The connection lost (the server restarted, the connection cut) frees every lock on it: the
 *   holders still running hold nothing from then until they end (while the server is away their
 *   store calls fail too; rows change only by compare-and-set either way). A lock query that fails
 *   or times out drops the connection, so a lock the server granted late is never left held.
 */
export class PgLocks {
  private client: pg.Client | undefined;
  private connecting: Promise<pg.Client> | undefined;
  /** Each name held here, with the connection it was taken on (null: being asked for). */
  private readonly held = new Map<string, pg.Client | null>();
  private readonly dropped = new WeakSet<pg.Client>();
  /** Each connection's last query: the next waits for it (pg is to stop queueing a client's queries itself). */
  private readonly tails = new WeakMap<pg.Client, Promise<unknown>>();
  private closed = false;

  constructor(private readonly opts: PgLocksOptions) {}

  async exclusive<T>(name: string, fn: () => Promise<T>): Promise<T> {
    let wait = FIRST_RETRY_MS;
    for (;;) {
      const client = await this.take(name);
      if (client) return this.holding(name, client, fn);
      // A little jitter, so that replicas waiting for one name do not ask in step.
      await new Promise((r) => setTimeout(r, wait * (0.75 + Math.random() / 2)));
      wait = Math.min(wait * 2, LAST_RETRY_MS);
    }
  }

  async tryExclusive<T>(name: string, fn: () => Promise<T>): Promise<{ ran: true; value: T } | { ran: false }> {
    const client = await this.take(name);
    if (!client) return { ran: false };
    return { ran: true, value: await this.holding(name, client, fn) };
  }

  /** The number of names held here now (tests). */
  heldCount(): number {
    return [...this.held.values()].filter((c) => c !== null).length;
  }

  /** Takes `name` if nobody holds it: the connection it is held on, or undefined. */
  private async take(name: string): Promise<pg.Client | undefined> {
    if (this.closed) throw storeError(new Error('Client was closed'));
    if (this.held.has(name)) return undefined;
    this.held.set(name, null);
    let client: pg.Client | undefined;
    try {
      client = await this.connection();
      const got = (await this.ask<{ got: boolean }>(client, 'SELECT pg_try_advisory_lock($1) AS got', [lockKey(name)])).rows[0]!.got;
      if (got && this.client === client) {
        this.held.set(name, client);
        return client;
      }
      this.held.delete(name);
      return undefined;
    } catch (err) {
      this.held.delete(name);
      if (client) this.drop(client);
      throw storeError(err);
    }
  }

  private async holding<T>(name: string, client: pg.Client, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } finally {
      this.held.delete(name);
      // Sent before any later ask for the name here (one connection answers in order); a connection
      // that was lost meanwhile took the lock with it.
      if (this.client === client) {
        await this.ask(client, 'SELECT pg_advisory_unlock($1)', [lockKey(name)]).catch(() => this.drop(client));
      }
    }
  }

  /** A query on the locks' connection, after the ones asked before it (in the order asked, at once). */
  private ask<R extends pg.QueryResultRow>(client: pg.Client, sql: string, args: unknown[]): Promise<pg.QueryResult<R>> {
    const run = (this.tails.get(client) ?? Promise.resolve()).then(() => client.query<R>(sql, args));
    this.tails.set(
      client,
      run.catch(() => undefined),
    );
    return run;
  }

  private connection(): Promise<pg.Client> {
    if (this.client) return Promise.resolve(this.client);
    this.connecting ??= (async () => {
      const client = new pg.Client({
        connectionString: this.opts.connectionString,
        application_name: 'sandboxd-locks',
        keepAlive: true,
        connectionTimeoutMillis: this.opts.connectTimeoutMs,
        query_timeout: this.opts.queryTimeoutMs,
      });
      // A server that goes away makes the connection emit 'error': heard here, never an uncaught exception.
      client.on('error', () => this.drop(client));
      client.on('end', () => this.drop(client));
      try {
        await client.connect();
        await client.query(LOCK_KEEPALIVES);
      } catch (err) {
        this.drop(client);
        throw err;
      }
      if (this.closed) {
        this.drop(client);
        throw new Error('Client was closed');
      }
      this.client = client;
      return client;
    })().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  private drop(client: pg.Client): void {
    if (this.client === client) this.client = undefined;
    if (this.dropped.has(client)) return;
    this.dropped.add(client);
    client.end().catch(() => undefined);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.connecting?.catch(() => undefined);
    const c = this.client;
    if (c) {
      this.client = undefined;
      this.dropped.add(c);
      await c.end().catch(() => undefined);
    }
  }
}
