import pg from 'pg';
import { storeError } from './postgres-db.js';
import { PgLocks } from './pg-locks.js';
import type { Coordination } from './types/index.js';

/** PostgreSQL channel names are identifiers: ours are short and plain. */
function checkChannel(channel: string): void {
  if (!/^[a-z][a-z0-9_]{0,40}$/.test(channel)) throw new Error(`not a channel name: ${JSON.stringify(channel)}`);
}

/** NOTIFY payloads must stay under 8000 bytes. */
const MAX_PAYLOAD = 7900;
/**
 * What the processes sharing a PostgreSQL store coordinate through:
 * - named locks (store/pg-locks.ts: session advisory locks, all of a process's on one connection
 *   of their own, released with it if the process dies), one holder across every replica;
 * - messages (NOTIFY on `sandboxd_<channel>`), heard by every process listening, this one included.
 *   The listening connection comes back by itself after the server does; `onReconnect` runs then,
 *   since messages sent meanwhile were lost.
 */
export class PgCoordination implements Coordination {
  private listener: pg.Client | undefined;
  private connecting: Promise<void> | undefined;
  private readonly handlers = new Map<string, Set<(payload: string) => void>>();
  private readonly reconnectHandlers = new Set<() => void>();
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private everConnected = false;

  readonly locks: PgLocks;

  constructor(
    private readonly pool: pg.Pool,
    private readonly connectionString: string,
    timeouts: { connectTimeoutMs: number; queryTimeoutMs: number },
  ) {
    this.locks = new PgLocks({ connectionString, ...timeouts });
  }

  exclusive<T>(name: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.exclusive(name, fn);
  }

  tryExclusive<T>(name: string, fn: () => Promise<T>): Promise<{ ran: true; value: T } | { ran: false }> {
    return this.locks.tryExclusive(name, fn);
  }

  /**
   * A connection of the pool, for one message. A server that goes away meanwhile makes the
   * connection emit 'error': heard here (the next query on it fails and drops it), never an
   * uncaught exception of the daemon.
   */
  private async connect(): Promise<pg.PoolClient> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw storeError(err);
    }
    const quiet = () => undefined;
    client.on('error', quiet);
    const release = client.release.bind(client);
    client.release = (err?: Error | boolean) => {
      client.off('error', quiet);
      client.release = release;
      release(err);
    };
    return client;
  }

  async publish(channel: string, payload: string): Promise<void> {
    checkChannel(channel);
    if (Buffer.byteLength(payload) > MAX_PAYLOAD) throw new Error(`a message on ${channel} is over ${MAX_PAYLOAD} bytes`);
    const client = await this.connect();
    try {
      await client.query('SELECT pg_notify($1, $2)', [`sandboxd_${channel}`, payload]);
      client.release();
    } catch (err) {
      client.release(err as Error);
      throw storeError(err);
    }
  }

  subscribe(channel: string, fn: (payload: string) => void): () => void {
    checkChannel(channel);
    let set = this.handlers.get(channel);
    const fresh = !set;
    if (!set) this.handlers.set(channel, (set = new Set()));
    set.add(fn);
    if (fresh && this.listener) this.listener.query(`LISTEN sandboxd_${channel}`).catch(() => this.lost());
    void this.ensureListener();
    return () => {
      set.delete(fn);
    };
  }

  onReconnect(fn: () => void): () => void {
    this.reconnectHandlers.add(fn);
    return () => this.reconnectHandlers.delete(fn);
  }

  listening(): boolean {
    return this.listener !== undefined;
  }

  /** Resolves once the listening connection is up (tests; a start that wants it before serving). */
  ready(): Promise<void> {
    return this.ensureListener();
  }

  private ensureListener(): Promise<void> {
    if (this.closed || this.listener) return Promise.resolve();
    this.connecting ??= (async () => {
      const client = new pg.Client({ connectionString: this.connectionString, application_name: 'sandboxd-listen', keepAlive: true });
      client.on('error', () => this.lost(client));
      client.on('end', () => this.lost(client));
      client.on('notification', (n) => {
        const channel = n.channel.startsWith('sandboxd_') ? n.channel.slice('sandboxd_'.length) : undefined;
        for (const fn of (channel && this.handlers.get(channel)) || []) {
          try {
            fn(n.payload ?? '');
          } catch {
            /* a handler's fault is its own */
          }
        }
      });
      try {
        await client.connect();
        for (const channel of this.handlers.keys()) await client.query(`LISTEN sandboxd_${channel}`);
      } catch {
        client.end().catch(() => undefined);
        this.scheduleRetry();
        return;
      }
      if (this.closed) {
        await client.end().catch(() => undefined);
        return;
      }
      this.listener = client;
      if (this.everConnected) for (const fn of this.reconnectHandlers) fn();
      this.everConnected = true;
    })().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  private lost(client?: pg.Client): void {
    if (client && this.listener !== client) return;
    const old = this.listener;
    this.listener = undefined;
    old?.end().catch(() => undefined);
    this.scheduleRetry();
  }

  private scheduleRetry(): void {
    if (this.closed || this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.ensureListener();
    }, 1000);
    this.retryTimer.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.locks.close();
    if (this.retryTimer) clearTimeout(this.retryTimer);
    await this.connecting;
    const l = this.listener;
    this.listener = undefined;
    await l?.end().catch(() => undefined);
  }
}
