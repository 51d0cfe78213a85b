import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { storeConformance } from './conformance.js';
import { PostgresStore } from './postgres.js';
import { SqliteStore } from './sqlite.js';
import type { Store } from './types/index.js';
import { startPostgres, type TestPostgres } from '../testing/postgres.js';

/*
 * Databases made by a release already out there (fixtures/: dumps of what sandboxd wrote as of
 * commit f10e704) open with the code of the day: no applied migration runs again, the schema ends
 * as a new database's, every row reads as that release read it, and the conformance suite passes
 * on that schema.
 */

const FIXTURES = fileURLToPath(new URL('../../src/store/fixtures/', import.meta.url));
const fixture = (name: string): string => readFileSync(join(FIXTURES, name), 'utf8');
/** What the release that wrote the rows read of them (its own store, each dialect). */
const lastRead = JSON.parse(fixture('rows.json')) as { sqlite: unknown; postgres: unknown };
const LAST_SQLITE_VERSION = 17;
const LAST_POSTGRES_VERSIONS = [1, 2, 3, 4, 5, 6];

const dir = mkdtempSync(join(tmpdir(), 'sbd-upgrade-'));
let server: TestPostgres;
const opened: PostgresStore[] = [];
let databases = 0;

before(async () => {
  server = await startPostgres();
});

after(async () => {
  await Promise.all(opened.map((s) => s.end()));
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Reads, through the store, every kind of row the fixtures hold (a plain object, as JSON holds it). */
async function readAll(store: Store): Promise<unknown> {
  const acme = (await store.orgs.byName('acme'))!.id;
  const blob = (lastRead.sqlite as { blob: { sha256: string } }).blob.sha256;
  const sandboxes: Record<string, unknown> = {};
  for (const id of ['sb_run', 'sb_paused', 'sb_stopped', 'sb_dead']) {
    // Fields added since that release (metadata, the E2B access token): none on every old row.
    const { metadata, e2bAccessToken, ...row } = (await store.sandboxes.byId(id))!;
    assert.deepEqual([metadata, e2bAccessToken], [{}, null]);
    sandboxes[id] = row;
  }
  const read = {
    orgs: await store.orgs.list(),
    limits: await store.orgs.limits(acme),
    keys: await store.keys.list(),
    // Fields added since that release (a built-in's build progress): null on every old row, and not part of what it read.
    templates: (await store.templates.list('org_old')).map(({ buildProgress, buildEtaAt, ...t }) => {
      assert.deepEqual([buildProgress ?? null, buildEtaAt ?? null], [null, null]);
      return t;
    }),
    sandboxes,
    live: (await store.sandboxes.live()).map((s) => s.id).sort(),
    usage: await store.sandboxes.usage('org_old'),
    usageByNode: await store.sandboxes.usageByNode(),
    countByStatus: await store.sandboxes.countByStatus(),
    builds: [await store.builds.byId('bld_old'), await store.builds.byId('bld_run')],
    upload: await store.uploads.byPath('org_old', 'src/app.py'),
    previews: await store.previews.all(),
    snapshot: await store.snapshots.byId('snap_old'),
    layers: [...(await store.snapshots.referencedLayers())].sort(),
    nodes: await store.nodes.list(),
    kv: await store.kv.get('build-rate'),
    rates: await store.rates.count('creates:org_old', 0),
    blob: { sha256: blob, stat: await store.blobs.stat(blob), chunks: (await store.blobs.chunks(blob, 0, 10)).map((c) => c.toString('base64')) },
    log: (await store.buildLogs.read('bld_old', 0, 1000)).data.toString(),
  };
  return JSON.parse(JSON.stringify(read)) as unknown;
}

/** Writes of each kind on the old rows, each read back. */
async function takesWrites(store: Store): Promise<void> {
  const at = '2026-04-01T00:00:00.000Z';
  const run = (await store.sandboxes.update('sb_run', 0, { status: 'stopped', updatedAt: at }))!;
  assert.equal(run.version, 1);
  assert.equal(run.status, 'stopped');
  assert.equal(await store.sandboxes.update('sb_run', 0, { status: 'running' }), undefined, 'compare-and-set on the old version');
  assert.deepEqual(await store.sandboxes.usage('org_old'), { active: 1, activeVcpu: 1, activeMemoryMb: 512, stopped: 2, diskGb: 9 });
  const copy = { ...(await store.sandboxes.byId('sb_paused'))!, id: 'sb_new', lineage: ['sb_paused', 'sb_run'], autoResume: true };
  await store.sandboxes.insert(copy);
  assert.deepEqual(await store.sandboxes.byId('sb_new'), copy);
  await store.previews.remove('sb_run', 3000);
  assert.deepEqual((await store.previews.forSandbox('sb_run')).map((p) => p.port), [8080]);
  assert.equal((await store.nodes.heartbeat('node-b', { usage: { sandboxes: 1, vcpu: 2, memoryMb: 512, diskGb: 5 }, warm: {}, layersDigest: null }, 15_000, at))!.version, 2);
  await store.builds.update('bld_run', { status: 'active', progress: 100, completedAt: at });
  assert.equal((await store.builds.byId('bld_run'))!.status, 'active');
  assert.equal(await store.keys.revoke('key_old', at), true);
  const acme = (await store.orgs.byName('acme'))!.id;
  await store.orgs.setLimits(acme, {});
  assert.deepEqual(await store.orgs.limits(acme), {});
  assert.equal(await store.blobs.purgeUncommitted(at), 1, 'the blob left uncommitted');
  assert.equal(await store.buildLogs.append('bld_old', Buffer.from('step 3\n')), 'step 1\nstep 2: exit 2\nstep 3\n'.length);
  await store.kv.set('build-rate', '{"n":4}');
  assert.equal(await store.kv.get('build-rate'), '{"n":4}');
}

/** A SQLite database file made of the fixtures (with the rows, or the schema alone). */
function sqliteFile(withRows: boolean): string {
  const file = join(dir, `old-${++databases}.db`);
  const db = new Database(file);
  db.exec(fixture('sqlite-schema.sql'));
  if (withRows) db.exec(fixture('sqlite-rows.sql'));
  db.close();
  return file;
}

/** The schema as SQLite keeps it, whitespace aside. */
function sqliteSchema(file: string): unknown[] {
  const db = new Database(file, { readonly: true });
  try {
    const rows = db.prepare('SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name').all() as { sql: string | null }[];
    return rows.map((r) => ({ ...r, sql: r.sql?.replace(/\s+/g, ' ').replace(/\( /g, '(').replace(/ \)/g, ')') }));
  } finally {
    db.close();
  }
}

test('a SQLite database of the last release opens at its version, reads every row as it read them, and takes writes', async () => {
  const file = sqliteFile(true);
  const store = SqliteStore.open(file);
  try {
    assert.ok((store.db.pragma('user_version', { simple: true }) as number) >= LAST_SQLITE_VERSION);
    assert.deepEqual(await readAll(store), lastRead.sqlite);
    await takesWrites(store);
  } finally {
    store.close();
  }
  const fresh = join(dir, 'fresh.db');
  SqliteStore.open(fresh).close();
  assert.deepEqual(sqliteSchema(file), sqliteSchema(fresh), "the upgraded schema is a new database's");
});

storeConformance("SqliteStore on the last release's schema", async () => SqliteStore.open(sqliteFile(false)));

/** Runs `sql` (a dump: several statements) on the database at `url`. */
async function exec(url: string, sql: string): Promise<pg.QueryResult[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const res = (await client.query(sql)) as pg.QueryResult | pg.QueryResult[];
    return Array.isArray(res) ? res : [res];
  } finally {
    await client.end();
  }
}

async function postgresDatabase(withRows: boolean): Promise<string> {
  const url = await server.createDatabase();
  await exec(url, fixture('postgres-schema.sql'));
  if (withRows) await exec(url, fixture('postgres-rows.sql'));
  return url;
}

/** What PostgreSQL's catalog says of the schema: columns, constraints, indexes, triggers, functions, storage. */
async function postgresSchema(url: string): Promise<unknown[]> {
  const [res] = await exec(
    url,
    `SELECT 'column' AS kind, table_name || '.' || column_name AS name,
        concat_ws(' ', ordinal_position, data_type, collation_name, is_nullable, column_default) AS def
      FROM information_schema.columns WHERE table_schema = 'public'
    UNION ALL SELECT 'storage', c.relname || '.' || a.attname, a.attstorage::text
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
      WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL SELECT 'index', indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
    UNION ALL SELECT 'constraint', conrelid::regclass || '.' || conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace
    UNION ALL SELECT 'trigger', tgrelid::regclass || '.' || tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
    UNION ALL SELECT 'function', proname, pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace = 'public'::regnamespace
    ORDER BY 1, 2`,
  );
  return res!.rows;
}

test('a PostgreSQL database of the last release keeps its applied migrations, reads every row as it read them, and takes writes', async () => {
  const url = await postgresDatabase(true);
  const applied = async () => (await exec(url, 'SELECT version, applied_at::text FROM schema_migrations ORDER BY version'))[0]!.rows;
  const before = await applied();
  assert.deepEqual(before.map((r) => r.version), LAST_POSTGRES_VERSIONS);
  const store = await PostgresStore.open(url);
  opened.push(store);
  assert.deepEqual((await applied()).slice(0, before.length), before, 'no applied migration is recorded again');
  assert.deepEqual(await readAll(store), lastRead.postgres);
  await takesWrites(store);
  const fresh = await server.createDatabase();
  opened.push(await PostgresStore.open(fresh));
  assert.deepEqual(await postgresSchema(url), await postgresSchema(fresh), "the upgraded schema is a new database's");
});

storeConformance("PostgresStore on the last release's schema", async () => {
  const store = await PostgresStore.open(await postgresDatabase(false));
  opened.push(store);
  return store;
});
