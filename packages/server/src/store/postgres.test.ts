import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { storeConformance } from './conformance.js';
import { StoreUnavailableError } from './errors.js';
import { migrationsFor } from './migrations.js';
import { PostgresStore } from './postgres.js';
import { PgDb } from './postgres-db.js';
import { SqliteStore } from './sqlite.js';
import type { SandboxRow, Store } from './types/index.js';
import { startPostgres, type TestPostgres } from '../testing/postgres.js';

let server: TestPostgres;
const opened: PostgresStore[] = [];

before(async () => {
  server = await startPostgres();
});

after(async () => {
  await Promise.all(opened.map((s) => s.end()));
  await server?.stop();
});

/** A store on a database of its own: each test starts from an empty schema. */
async function freshStore(): Promise<PostgresStore> {
  const store = await PostgresStore.open(await server.createDatabase());
  opened.push(store);
  return store;
}

storeConformance('PostgresStore', freshStore);

async function query(url: string, sql: string): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<Record<string, unknown>>(sql)).rows;
  } finally {
    await client.end();
  }
}

test('replicas that open one database at once migrate it once, and each of them works', async () => {
  const url = await server.createDatabase();
  const stores = await Promise.all([1, 2, 3, 4].map(() => PostgresStore.open(url)));
  opened.push(...stores);
  const applied = await query(url, 'SELECT version FROM schema_migrations ORDER BY version');
  assert.deepEqual(applied.map((r) => r.version), migrationsFor('postgres').map((_, i) => i + 1));
  await stores[0]!.orgs.create('acme');
  assert.equal((await stores[3]!.orgs.byName('acme'))?.name, 'acme');
  // A later start finds nothing to do.
  opened.push(await PostgresStore.open(url));
  assert.equal((await query(url, 'SELECT count(*)::int AS n FROM schema_migrations'))[0]!.n, migrationsFor('postgres').length);
});

test('rows order and page by bytes, as in SQLite, in a database whose own collation is linguistic (ICU en-US)', async () => {
  const pgStore = await PostgresStore.open(await server.createDatabase({ icuLocale: 'en-US' }));
  opened.push(pgStore);
  const sqlite = SqliteStore.open(':memory:');
  const at = '2026-01-01T00:00:00.000Z';
  // Linguistically a < B < c and _ sorts apart; by bytes B (0x42) < _ (0x5f) < a (0x61).
  const ids = ['sb_c', 'sbB', 'sb_a', 'sba', 'sbB_', 'sb-1'];
  const row = (id: string, createdAt: string): SandboxRow => ({
    id, orgId: 'org_a', templateId: 't', templateName: 'base', status: 'running', region: 'local', internetAccess: true, egress: null,
    timeoutSeconds: null, expiresAt: null, vcpu: 1, memoryMb: 1, diskGb: 1, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null,
    nodeId: 'n', version: 0, deletedReason: null, createdAt, updatedAt: createdAt, deletedAt: null, onTimeout: 'delete',
    idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
  });
  const both: Store[] = [pgStore, sqlite];
  for (const s of both) {
    for (const id of ids) await s.sandboxes.insert(row(id, at));
    await s.sandboxes.insert(row('later', '2026-01-01T00:00:00.001Z'));
    for (const name of ['beta', 'Alpha', 'alpha', '_x']) {
      await s.templates.upsert({
        id: `t-${name}`, orgId: null, name, displayName: name, description: '', category: '', language: '', vcpu: 1, memoryMb: 1, diskGb: 1,
        status: 'active', isPublic: true, buildId: null, features: [], tags: [], layers: [], env: {}, workdir: null, errorMessage: null, createdAt: at, updatedAt: at,
      });
    }
    for (const id of ['b', 'a1', 'a-2', '9z']) await s.nodes.register({ id, url: 'http://10.0.0.1:7000', capacity: { vcpu: 1, memoryMb: 1, diskGb: 1, maxSandboxes: 1 } }, 1000, at);
  }
  const [fromPg, fromSqlite] = await Promise.all(
    both.map(async (s) => ({
      all: (await s.sandboxes.list({ orgId: 'org_a', limit: 100 })).map((r) => r.id),
      page: (await s.sandboxes.list({ orgId: 'org_a', limit: 100, after: { createdAt: at, id: 'sb_a' } })).map((r) => r.id),
      templates: (await s.templates.list('org_a')).map((t) => t.name),
      nodes: (await s.nodes.list()).map((n) => n.id),
      live: (await s.nodes.live(at)).map((n) => n.id),
    })),
  );
  assert.deepEqual(fromPg, fromSqlite);
  assert.deepEqual(fromPg!.all, ['later', 'sba', 'sb_c', 'sb_a', 'sbB_', 'sbB', 'sb-1']);
  assert.deepEqual(fromPg!.nodes, ['9z', 'a-2', 'a1', 'b']);
  sqlite.close();
});

test('a restart of the server: calls while it is down fail soon as StoreUnavailableError, and the same store works again after', async () => {
  const store = await freshStore();
  await store.orgs.create('before');
  await server.restart(async () => {
    for (const call of [() => store.orgs.list(), () => store.kv.set('k', 'v'), () => store.ping()]) {
      const t0 = performance.now();
      await assert.rejects(call(), (err: unknown) => {
        assert.ok(err instanceof StoreUnavailableError, `got ${String(err)}`);
        assert.ok(!err.message.includes(server.password), 'no password in the message');
        return true;
      });
      assert.ok(performance.now() - t0 < 3000, `failed after ${Math.round(performance.now() - t0)} ms`);
    }
  });
  assert.deepEqual((await store.orgs.list()).map((o) => o.name), ['before']);
  await store.orgs.create('after');
  await store.ping();
  assert.deepEqual((await store.orgs.list()).map((o) => o.name).sort(), ['after', 'before']);
});

test('a query under way when the server shuts down fails as unavailable (57P01), and the pool then connects anew', async () => {
  const url = await server.createDatabase();
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => undefined);
  const db = new PgDb(pool);
  try {
    const backend = Number((await db.get('SELECT pg_backend_pid() AS pid'))!.pid);
    const sleeping = db.query('SELECT pg_sleep(30)');
    sleeping.catch(() => undefined);
    await server.restart(async () => {
      await assert.rejects(sleeping, (err: unknown) => {
        assert.ok(err instanceof StoreUnavailableError, `got ${String(err)}`);
        assert.match(err.message, /terminating connection due to administrator command|Connection terminated/);
        return true;
      });
    });
    const again = Number((await db.get('SELECT pg_backend_pid() AS pid'))!.pid);
    assert.notEqual(again, backend, 'a new connection');
  } finally {
    await pool.end();
  }
});

test('a server that accepts connections and never answers: open fails within its connect timeout, as unavailable', async () => {
  const sockets = new Set<import('node:net').Socket>();
  const silent = createServer((s) => sockets.add(s));
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  try {
    const port = (silent.address() as AddressInfo).port;
    const t0 = performance.now();
    await assert.rejects(PostgresStore.open(`postgresql://sbd:hunter2@127.0.0.1:${port}/db`, { connectTimeoutMs: 500 }), (err: unknown) => {
      assert.ok(err instanceof StoreUnavailableError, `got ${String(err)}`);
      assert.match(err.message, new RegExp(`postgresql://sbd@127\\.0\\.0\\.1:${port}/db is unavailable`));
      assert.doesNotMatch(err.message, /hunter2/);
      return true;
    });
    assert.ok(performance.now() - t0 < 3000);
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise((r) => silent.close(r));
  }
});

test('bad URLs fail with an error that names the database and never the password', async () => {
  const good = new URL(server.url);
  const withPassword = (password: string, database = 'postgres') => `postgresql://postgres:${password}@${good.host}/${database}`;
  const cases: [string, RegExp, boolean][] = [
    ['mysql://root:hunter2@localhost/db', /needs a postgres:\/\/ or postgresql:\/\/ URL .*got a mysql:\/\/ URL, not a PostgreSQL one$/, false],
    ['root:hunter2', /needs a postgres:\/\/ or postgresql:\/\/ URL .*got something that is not a URL$/, false],
    ['postgresql://root:hunter2@[::1/db', /needs a postgres:\/\/ or postgresql:\/\/ URL .*got a postgresql:\/\/ URL that does not parse$/, false],
    [withPassword('hunter2'), new RegExp(`cannot open the PostgreSQL store at postgresql://postgres@${good.host}/postgres: password authentication failed`), false],
    [withPassword(server.password, 'nosuchdb'), new RegExp(`cannot open the PostgreSQL store at postgresql://postgres@${good.host}/nosuchdb: database "nosuchdb" does not exist`), false],
    ['postgresql://postgres:hunter2@127.0.0.1:1/postgres', /the PostgreSQL store at postgresql:\/\/postgres@127\.0\.0\.1:1\/postgres is unavailable: .*ECONNREFUSED/, true],
  ];
  for (const [url, message, unavailable] of cases) {
    await assert.rejects(PostgresStore.open(url), (err: unknown) => {
      assert.ok(err instanceof Error);
      assert.match(err.message, message);
      assert.equal(err instanceof StoreUnavailableError, unavailable, err.message);
      assert.ok(!err.message.includes('hunter2') && !err.message.includes(server.password), err.message);
      return true;
    });
  }
});

test('coordination: a named lock has one holder across stores; tryExclusive passes while it is held; the lock goes with a dead connection', async () => {
  const url = await server.createDatabase();
  const [a, b] = await Promise.all([PostgresStore.open(url), PostgresStore.open(url)]);
  opened.push(a, b);
  const order: string[] = [];
  let releaseA!: () => void;
  const held = new Promise<void>((r) => (releaseA = r));
  const first = a.coordination.exclusive('sweep', async () => {
    order.push('a in');
    await held;
    order.push('a out');
  });
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(await b.coordination.tryExclusive('sweep', async () => 'ran'), { ran: false });
  assert.deepEqual(await b.coordination.tryExclusive('other', async () => 'ran'), { ran: true, value: 'ran' });
  const second = b.coordination.exclusive('sweep', async () => {
    order.push('b in');
  });
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(order, ['a in'], 'b waits for a');
  releaseA();
  await Promise.all([first, second]);
  assert.deepEqual(order, ['a in', 'a out', 'b in']);
  // A holder whose connection dies (its process was killed) holds nothing.
  const c = await PostgresStore.open(url);
  let stuck!: () => void;
  void c.coordination.exclusive('gone', () => new Promise<void>((r) => (stuck = r))).catch(() => undefined);
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(await a.coordination.tryExclusive('gone', async () => 1), { ran: false });
  await query(url, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()");
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(await a.coordination.tryExclusive('gone', async () => 1), { ran: true, value: 1 });
  stuck();
  await c.end();
});

test('coordination: messages reach every store subscribed, this one too; after a restart of the server the subscription comes back and says so', async () => {
  const url = await server.createDatabase();
  const [a, b] = await Promise.all([PostgresStore.open(url), PostgresStore.open(url)]);
  opened.push(a, b);
  const got: string[] = [];
  a.coordination.subscribe('bus', (p) => got.push(`a:${p}`));
  b.coordination.subscribe('bus', (p) => got.push(`b:${p}`));
  await Promise.all([a.coordination.ready(), b.coordination.ready()]);
  await a.coordination.publish('bus', 'hello');
  for (let i = 0; i < 50 && got.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(got.sort(), ['a:hello', 'b:hello']);
  assert.throws(() => a.coordination.subscribe('Bad-Name', () => undefined));
  await assert.rejects(a.coordination.publish('bus', 'x'.repeat(8000)));
  let reconnected = 0;
  b.coordination.onReconnect(() => reconnected++);
  await server.restart(async () => {
    await assert.rejects(a.coordination.publish('bus', 'lost'), StoreUnavailableError);
  });
  for (let i = 0; i < 100 && reconnected === 0; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(reconnected, 1, 'the subscriber heard it had lost messages');
  got.length = 0;
  await a.coordination.publish('bus', 'again');
  for (let i = 0; i < 100 && !got.includes('b:again'); i++) await new Promise((r) => setTimeout(r, 50));
  assert.ok(got.includes('b:again'), `got ${got.join(', ')}`);
});

test('a rate limit shared through the store: two replicas racing admit at most the limit together, and say when to retry', async () => {
  const url = await server.createDatabase();
  const [a, b] = await Promise.all([PostgresStore.open(url), PostgresStore.open(url)]);
  opened.push(a, b);
  const { SharedWindowLimiter } = await import('../services/rate-limit.js');
  const la = new SharedWindowLimiter(a, 5, 60_000, 'creates');
  const lb = new SharedWindowLimiter(b, 5, 60_000, 'creates');
  const now = Date.now();
  // One after the other, through either replica: five, then the sixth is refused with when to retry.
  for (let i = 0; i < 5; i++) await (i % 2 ? la : lb).take('org_seq', now + i);
  await assert.rejects(la.take('org_seq', now + 10), (err: unknown) => (err as { code?: string; extra?: { retry_after?: number } }).code === 'RATE_LIMIT_EXCEEDED');
  assert.equal(await lb.usage('org_seq', now + 10), 5);
  // At once from both: never more than the limit together (racing for the last slots, both may refuse).
  const results = await Promise.allSettled(Array.from({ length: 12 }, (_, i) => (i % 2 ? la : lb).take('org_a', now)));
  const admitted = results.filter((r) => r.status === 'fulfilled').length;
  assert.ok(admitted <= 5, `admitted ${admitted}`);
  for (const r of results) if (r.status === 'rejected') assert.equal((r.reason as { code?: string }).code, 'RATE_LIMIT_EXCEEDED');
  // Refused events were taken back: the count is what was admitted.
  assert.equal(await la.usage('org_a', now), admitted);
  // Another organization has its own window; a minute later the window has moved on.
  await lb.take('org_b', now);
  await la.take('org_a', now + 61_000);
});

test('replicas that record the same built-in template at once: each succeeds, one row', async () => {
  const url = await server.createDatabase();
  const stores = await Promise.all([1, 2, 3, 4].map(() => PostgresStore.open(url)));
  opened.push(...stores);
  const at = new Date().toISOString();
  for (let round = 0; round < 200; round++) {
    const row = {
      id: `tpl_race${round}`, orgId: null, name: `race-${round}`, displayName: 'Race', description: '', category: 'base', language: 'shell', vcpu: 1, memoryMb: 512, diskGb: 2,
      status: 'active' as const, isPublic: true, buildId: null, features: [], tags: [], layers: [], env: {}, workdir: null, errorMessage: null, createdAt: at, updatedAt: at,
    };
    // Each replica's insert sees no row by id yet; the others' conflict on the name instead.
    await Promise.all(stores.map((s) => s.templates.upsert(row)));
  }
  assert.equal((await query(url, "SELECT count(*)::int AS n FROM templates WHERE name LIKE 'race-%'"))[0]!.n, 200);
});
