import type Database from 'better-sqlite3';
import type { Dialect, Params, Raw, SqlDb } from './sql/db.js';

/** SQLite's ways: times from this process's clock (on one machine, the database's too), JSON arrays through json_each. */
const SQLITE: Dialect = {
  name: 'sqlite',
  schemaVersion: 'SELECT user_version AS version FROM pragma_user_version',
  clock(p: Params, now: string | undefined, leaseMs?: number) {
    const at = now ?? new Date().toISOString();
    return { at: p.add(at), lease: leaseMs === undefined ? '' : p.add(new Date(Date.parse(at) + leaseMs).toISOString()) };
  },
  arrayTexts: (table, column) => `SELECT DISTINCT e.value AS value FROM ${table}, json_each(${table}.${column}) AS e`,
  isUniqueViolation: (err) => (err as { code?: unknown }).code === 'SQLITE_CONSTRAINT_UNIQUE',
};

/** better-sqlite3 binds no booleans (SQLite keeps them as 1 and 0) and no undefined. */
const bindable = (v: unknown): unknown => (typeof v === 'boolean' ? (v ? 1 : 0) : (v ?? null));

/**
 * The repositories' view of a better-sqlite3 database. Each SQL text is compiled once per
 * connection and its statement reused (the queries a request makes run on every create, lookup and
 * update); SQL built from a request's fields comes from a fixed set of column names, so the cache
 * stays small. `$1`, `$2`, ... are SQLite named parameters, bound from an object keyed 1, 2, ...
 */
export class SqliteDb implements SqlDb {
  readonly dialect = SQLITE;
  private readonly cache = new Map<string, Database.Statement>();

  constructor(private readonly db: Database.Database) {}

  private statement(sql: string): Database.Statement {
    let st = this.cache.get(sql);
    if (!st) {
      st = this.db.prepare(sql);
      this.cache.set(sql, st);
    }
    return st;
  }

  private static bind(args: unknown[]): unknown[] {
    return args.length === 0 ? [] : [Object.fromEntries(args.map((v, i) => [i + 1, bindable(v)]))];
  }

  async all(sql: string, args: unknown[] = []): Promise<Raw[]> {
    return this.statement(sql).all(...SqliteDb.bind(args)) as Raw[];
  }

  async get(sql: string, args: unknown[] = []): Promise<Raw | undefined> {
    return this.statement(sql).get(...SqliteDb.bind(args)) as Raw | undefined;
  }

  async run(sql: string, args: unknown[] = []): Promise<number> {
    return this.statement(sql).run(...SqliteDb.bind(args)).changes;
  }
}
