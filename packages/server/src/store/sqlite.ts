import Database from 'better-sqlite3';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import { migrationsFor } from './migrations.js';
import { SqliteDb } from './sqlite-db.js';
import { SqlStore } from './sql/store.js';

type Db = Database.Database;

/**
 * The database holds every organization's env_vars and key hashes: root's alone. SQLite creates
 * its WAL and SHM files with the database file's mode, so a database made 0600 keeps them 0600;
 * files of an older installation (0644) are fixed here too.
 */
function makePrivate(file: string): void {
  if (!existsSync(file)) closeSync(openSync(file, 'a', 0o600));
  for (const f of [file, `${file}-wal`, `${file}-shm`, `${file}-journal`]) {
    try {
      chmodSync(f, 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}

export function openDatabase(file: string): Db {
  if (file !== ':memory:') {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    makePrivate(file);
  }
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  migrate(db);
  return db;
}

/** Takes the steps not taken yet, each in a transaction with the version it brings. */
export function migrate(db: Db): void {
  const steps = migrationsFor('sqlite');
  const current = db.pragma('user_version', { simple: true }) as number;
  for (let i = current; i < steps.length; i++) {
    db.transaction(() => {
      db.exec(steps[i]!);
      db.pragma(`user_version = ${i + 1}`);
    })();
  }
}

export class SqliteStore extends SqlStore {
  constructor(readonly db: Db) {
    super(new SqliteDb(db));
  }
  static open(file: string): SqliteStore {
    return new SqliteStore(openDatabase(file));
  }
  close() {
    this.db.close();
  }
}
