import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../config/index.js';
import { openStore } from './shared.js';
import { PostgresStore } from '../store/postgres.js';
import { SqliteStore } from '../store/sqlite.js';
import { startPostgres } from '../testing/postgres.js';

const HOST = { cpus: 2, memoryMb: 4096, diskGb: 20 };

test('the store: SQLite in the data dir by default; PostgreSQL (and no database file) when SANDBOXD_DATABASE_URL names one, its password kept out of the log', async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'sbd-store-'));
  const server = await startPostgres();
  try {
    const sqlite = await openStore(loadConfig({ SANDBOXD_DATA_DIR: dataDir }, HOST));
    assert.ok(sqlite instanceof SqliteStore);
    sqlite.close();
    assert.ok(existsSync(join(dataDir, 'sandboxd.db')));
    await rm(join(dataDir, 'sandboxd.db'));

    const lines: string[] = [];
    const url = await server.createDatabase();
    const store = await openStore(loadConfig({ SANDBOXD_DATA_DIR: dataDir, SANDBOXD_DATABASE_URL: url }, HOST), (line) => lines.push(line));
    assert.ok(store instanceof PostgresStore);
    await store.orgs.create('acme');
    await store.end();
    assert.equal(existsSync(join(dataDir, 'sandboxd.db')), false);
    assert.deepEqual(lines, [`store: PostgreSQL at ${url.replace(`:${server.password}@`, '@')}`]);
  } finally {
    await server.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
});
