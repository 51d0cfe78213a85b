/**
 * The one repository logic's view of a database, SQLite or PostgreSQL. Statements name their
 * parameters `$1`, `$2`, ...: PostgreSQL's placeholders, and in SQLite named parameters of the
 * same spelling, so one SQL text serves both and a parameter may stand in a statement twice.
 */

/** A row as the driver returns it, by column name. */
export type Raw = Record<string, unknown>;

export interface SqlDb {
  all(sql: string, args?: unknown[]): Promise<Raw[]>;
  get(sql: string, args?: unknown[]): Promise<Raw | undefined>;
  /** The number of rows the statement changed. */
  run(sql: string, args?: unknown[]): Promise<number>;
  readonly dialect: Dialect;
}

/** The few things the two databases' SQL says differently. */
export interface Dialect {
  readonly name: 'sqlite' | 'postgres';
  /** A query of the number of schema steps the database has taken, as `version`. */
  readonly schemaVersion: string;
  /**
   * The time a node statement runs at (`now`, else the store's clock) and, given `leaseMs`, when a
   * lease from it ends: SQL that yields them as toISOString() writes times; adds its values to `p`.
   */
  clock(p: Params, now: string | undefined, leaseMs?: number): { at: string; lease: string };
  /** A query of the distinct texts in the JSON array `column` over every row of `table`, as `value`. */
  arrayTexts(table: string, column: string): string;
  /** Whether the statement failed on a unique constraint (another writer came first). */
  isUniqueViolation(err: unknown): boolean;
}

/** Builds a statement's `$n` placeholders as its values are added. */
export class Params {
  readonly values: unknown[] = [];
  add(v: unknown): string {
    this.values.push(v);
    return `$${this.values.length}`;
  }
}

/**
 * How each field of a row is kept: `json` as JSON text (jsonb in PostgreSQL), `value` as it is.
 * The column is the field's name in snake case (`memoryMb` → `memory_mb`).
 */
export type Fields<T> = Record<keyof T, 'value' | 'json'>;

export const columnOf = (field: string): string => field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** A value as its column takes it. */
function encode(kind: 'value' | 'json', v: unknown): unknown {
  if (kind === 'value') return v ?? null;
  return v === null || v === undefined ? null : JSON.stringify(v);
}

/** `INSERT INTO table (...) VALUES (...)` of every field of `row`. */
export function insertSql<T>(table: string, fields: Fields<T>, row: T, p: Params): string {
  const names = Object.keys(fields) as (keyof T & string)[];
  const values = names.map((f) => p.add(encode(fields[f], row[f])));
  return `INSERT INTO ${table} (${names.map(columnOf).join(', ')}) VALUES (${values.join(', ')})`;
}

/**
 * `column = $n, ...` of the fields in `patch`. Only fields of the row, and none of `fixed`, so no
 * SQL ever comes from a key a caller made up.
 */
export function setSql<T>(fields: Fields<T>, patch: NoInfer<Partial<T>>, p: Params, fixed: NoInfer<keyof T>[] = []): string[] {
  return Object.entries(patch).map(([field, v]) => {
    if (!Object.hasOwn(fields, field) || fixed.includes(field as keyof T)) throw new Error(`not a field that can be changed: ${field}`);
    return `${columnOf(field)} = ${p.add(encode(fields[field as keyof T], v))}`;
  });
}

/** The condition of the rows that follow `after` in a list newest first, by (created_at, id). */
export function olderThan(p: Params, after: { createdAt: string; id: string }): string {
  const at = p.add(after.createdAt);
  return `(created_at < ${at} OR (created_at = ${at} AND id < ${p.add(after.id)}))`;
}
