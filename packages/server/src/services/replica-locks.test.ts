import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { ServiceError } from '@sandboxd/protocol';
import { StoreUnavailableError } from '../store/errors.js';
import { PostgresStore } from '../store/postgres.js';
import type { SandboxRow } from '../store/types/index.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { startPostgres, type TestPostgres } from '../testing/postgres.js';
import { EventBus } from './events.js';
import type { OrgLimits } from './limits.js';
import { ReplicaMutex } from './locks.js';
import { QuotaService } from './quotas.js';
import { SharedWindowLimiter, SlidingWindowLimiter } from './rate-limit.js';
import { RouteTable } from '../gateway/routes.js';
import { KeyService } from './keys.js';
import { SandboxService } from './sandboxes/index.js';
import { fixedPlacement, nodeOver } from '../testing/fake-node.js';
import { TemplateService } from './templates.js';
import { TokenService } from './tokens.js';

// Two "replicas" of control: two stores (each its pool and its locks' connection) on one database,
// as two processes have them.

let server: TestPostgres;
const opened: PostgresStore[] = [];

before(async () => {
  server = await startPostgres();
});

after(async () => {
  await Promise.all(opened.map((s) => s.end()));
  await server?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function replicas(opts: { maxConnections?: number } = {}): Promise<[PostgresStore, PostgresStore, string]> {
  const url = await server.createDatabase();
  const [a, b] = await Promise.all([PostgresStore.open(url, opts), PostgresStore.open(url, opts)]);
  opened.push(a, b);
  return [a, b, url];
}

async function query(url: string, sql: string): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<Record<string, unknown>>(sql)).rows;
  } finally {
    await client.end();
  }
}

const LIMITS: OrgLimits = {
  max_vcpu: 2,
  max_memory_mb: 4096,
  max_disk_gb: 20,
  max_sandboxes: 3,
  max_total_memory_mb: null,
  max_total_disk_gb: null,
  default_timeout_seconds: 300,
  max_timeout_seconds: 3600,
  max_snapshot_storage_mb: null,
};

function row(id: string, orgId: string): SandboxRow {
  const now = new Date().toISOString();
  return {
    id, orgId, templateId: 't', templateName: 'base', status: 'creating', region: 'local', internetAccess: true, egress: null,
    timeoutSeconds: null, expiresAt: null, vcpu: 1, memoryMb: 512, diskGb: 2, layers: [], templateEnv: {}, envVars: {},
    gatewayPort: null, nodeId: 'n', version: 0, deletedReason: null, createdAt: now, updatedAt: now, deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
  };
}

test("two replicas working on one sandbox take turns, each replica's own work in order; another sandbox does not wait", async () => {
  const [a, b] = await replicas();
  const locks = [new ReplicaMutex(a.coordination, 'sandbox'), new ReplicaMutex(b.coordination, 'sandbox')];
  let inside = 0;
  let most = 0;
  const done: string[] = [];
  // A verb reads the row, works on the container, writes the row: two at once on one sandbox leave them out of step.
  const verb = (replica: number, i: number) =>
    locks[replica]!.run('sb1', async () => {
      most = Math.max(most, ++inside);
      await sleep(15);
      inside--;
      done.push(`${replica}:${i}`);
    });
  const work = Array.from({ length: 12 }, (_, i) => verb(i % 2, i));
  await sleep(5);
  assert.ok(locks[0]!.busy('sb1') && locks[1]!.busy('sb1'), 'each replica knows its own work waits or runs');
  const t0 = Date.now();
  await locks[1]!.run('sb2', async () => undefined);
  assert.ok(Date.now() - t0 < 150, `another sandbox's lock was taken at once, not after ${Date.now() - t0} ms`);
  await Promise.all(work);
  assert.equal(most, 1, 'never two verbs on one sandbox at once, across replicas');
  assert.equal(done.length, 12);
  for (const r of [0, 1]) {
    const mine = done.filter((d) => d.startsWith(`${r}:`)).map((d) => Number(d.slice(2)));
    assert.deepEqual(mine, [...mine].sort((x, y) => x - y), `replica ${r}'s work went in the order it came`);
  }
  assert.ok(!locks[0]!.busy('sb1') && !locks[1]!.busy('sb1'));
  assert.equal(a.coordination.locks.heldCount() + b.coordination.locks.heldCount(), 0, 'nothing left held');
});

test("two replicas admitting creates for one organization at the same instant admit exactly its last slots, never one more", async () => {
  const [a, b] = await replicas();
  const org = await a.orgs.create('acme');
  await a.sandboxes.insert({ ...row('sb-old', org.id), status: 'running' });
  const quotas = [new QuotaService(a, LIMITS, new ReplicaMutex(a.coordination, 'org-quota')), new QuotaService(b, LIMITS, new ReplicaMutex(b.coordination, 'org-quota'))];
  const stores = [a, b];
  const results = await Promise.allSettled(
    Array.from({ length: 10 }, (_, i) =>
      quotas[i % 2]!.admit(org.id, { sandboxes: 1, memoryMb: 512, diskGb: 2 }, async () => {
        // The claim takes a moment (a store round trip on a busy server): two admissions that
        // overlap both read the same usage and pass.
        await sleep(10);
        await stores[i % 2]!.sandboxes.insert(row(`sb${i}`, org.id));
      }),
    ),
  );
  const admitted = results.filter((r) => r.status === 'fulfilled').length;
  assert.equal(admitted, 2, `1 running + 2 admitted = max_sandboxes 3 (admitted ${admitted})`);
  for (const r of results) if (r.status === 'rejected') assert.deepEqual([(r.reason as ServiceError).code, (r.reason as ServiceError).extra.limit], ['ORG_QUOTA_EXCEEDED', 'max_sandboxes']);
  assert.equal((await quotas[1]!.usage(org.id)).sandboxes, 3);
  // Another organization admits meanwhile, its lock its own.
  const other = await a.orgs.create('other');
  assert.equal(await quotas[0]!.admit(other.id, { sandboxes: 1, memoryMb: 1, diskGb: 1 }, async () => 'in'), 'in');
});

test('a burst of 100 lock holders at once takes one connection per replica for its locks, and the pool stays free for the work inside them', async () => {
  // Two connections in the pool: a connection per held lock would leave none for the queries inside.
  const [a, b, url] = await replicas({ maxConnections: 2 });
  const locks = [new ReplicaMutex(a.coordination, 'sandbox'), new ReplicaMutex(b.coordination, 'sandbox')];
  const stores = [a, b];
  let lockConnections = 0;
  const t0 = Date.now();
  await Promise.all(
    Array.from({ length: 100 }, (_, i) =>
      locks[i % 2]!.run(`sb${i}`, async () => {
        await stores[i % 2]!.sandboxes.byId(`sb${i}`);
        await sleep(50);
        if (i === 99) {
          const r = await query(url, "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'sandboxd-locks' AND datname = current_database()");
          lockConnections = Number(r[0]!.n);
        }
        await stores[i % 2]!.sandboxes.byId(`sb${i}`);
      }),
    ),
  );
  assert.equal(lockConnections, 2, 'one locks connection per replica');
  assert.ok(Date.now() - t0 < 4000, `100 holders of different sandboxes ran side by side (${Date.now() - t0} ms)`);
  assert.equal(a.coordination.locks.heldCount() + b.coordination.locks.heldCount(), 0);
  const held = await query(url, "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'");
  assert.equal(Number(held[0]!.n), 0, 'every lock given back to the server');
});

test('PostgreSQL stopped while a replica waits for a lock: the wait, the ones queued behind it and new ones fail as unavailable (503) in bounded time; after it is back, locks work again', async () => {
  const [a, b] = await replicas();
  const [la, lb] = [new ReplicaMutex(a.coordination, 'sandbox'), new ReplicaMutex(b.coordination, 'sandbox')];
  let releaseA!: () => void;
  const holding = la.run('sb1', () => new Promise<void>((r) => (releaseA = r)));
  holding.catch(() => undefined);
  await sleep(100);
  let ran = 0;
  const waits = [lb.run('sb1', async () => void ran++), lb.run('sb1', async () => void ran++)];
  for (const w of waits) w.catch(() => undefined);
  await sleep(300);
  assert.equal(ran, 0, "b waits for a's holder");
  await server.restart(async () => {
    const t0 = Date.now();
    const outcomes = await Promise.allSettled([...waits, lb.run('sb2', async () => void ran++)]);
    const ms = Date.now() - t0;
    for (const o of outcomes) {
      assert.equal(o.status, 'rejected');
      assert.ok((o as PromiseRejectedResult).reason instanceof StoreUnavailableError, String((o as PromiseRejectedResult).reason));
    }
    assert.ok(ms < 8000, `answered in ${ms} ms`);
    assert.equal(ran, 0, 'no work ran without its lock');
  });
  // The server's restart ended a's session: its lock went with it.
  assert.equal(await lb.run('sb1', async () => 'b after'), 'b after');
  releaseA();
  await holding;
  assert.equal(await la.run('sb1', async () => 'a after'), 'a after');
});

test("the sweep passes over a sandbox whose verb runs in another replica (it stays due), and takes it once that is done", async () => {
  const [a, b] = await replicas();
  const dir = await mkdtemp(join(tmpdir(), 'sbd-sweep-'));
  const runtime = new FakeRuntime({ socketDir: join(dir, 's') });
  try {
    const org = await a.orgs.create('acme');
    await a.sandboxes.insert({ ...row('sbdue', org.id), status: 'stopped', timeoutSeconds: 60, expiresAt: new Date(Date.now() - 1000).toISOString() });
    const sweeper = new SandboxService({
      store: b,
      placement: fixedPlacement(b, nodeOver(runtime, 'n')),
      tokens: new TokenService(join(dir, 'jwt.pem'), 60),
      templates: new TemplateService(b),
      layerPath: (l) => l,
      gateway: { open: async () => null, close: async () => undefined, publicHost: (id) => `http://${id}.sandbox.test` },
      routes: new RouteTable(),
      events: new EventBus(),
      locks: new ReplicaMutex(b.coordination, 'sandbox'),
      createLimiter: new SlidingWindowLimiter(0, 60_000, 'creates'),
      quotas: new QuotaService(b, LIMITS, new ReplicaMutex(b.coordination, 'org-quota')),
      agentReadyTimeoutMs: 1000,
      tombstoneSeconds: 60,
      log: () => undefined,
      replicas: { shared: true, used: () => undefined, interrupted: () => undefined, changed: () => undefined },
    });
    // Replica a works on it (a snapshot's long copy, say).
    let release!: () => void;
    const working = new ReplicaMutex(a.coordination, 'sandbox').run('sbdue', () => new Promise<void>((r) => (release = r)));
    await sleep(100);
    try {
      const turn = sweeper.sweep();
      const late = await Promise.race([turn.then(() => false), sleep(2000).then(() => true)]);
      assert.equal(late, false, "the sweep's turn went on, it did not wait for the other replica");
      assert.equal((await b.sandboxes.byId('sbdue'))!.status, 'stopped', 'passed over, still due');
    } finally {
      release();
      await working;
    }
    await sweeper.sweep();
    assert.equal((await b.sandboxes.byId('sbdue'))!.status, 'deleted', 'taken at the next turn');
    await sweeper.settle();
  } finally {
    await runtime.dispose();
    await rm(dir, { recursive: true, force: true });
  }
});

test('replicas starting at the same instant share one default organization and one bootstrap key, whichever makes them first', async () => {
  for (let round = 0; round < 5; round++) {
    const [a, b] = await replicas();
    const secret = `sbd_${'k'.repeat(20)}${round}`;
    const keys = [new KeyService(a), new KeyService(b), new KeyService(a), new KeyService(b)];
    const orgs = await Promise.all(keys.map((k) => k.ensureOrg('default')));
    assert.equal(new Set(orgs.map((o) => o.id)).size, 1, 'one organization');
    const made = await Promise.all(keys.map((k) => k.ensureBootstrapKey(secret)));
    assert.equal(new Set(made.map((k) => k.id)).size, 1, 'one key');
    assert.equal(made[0]!.orgId, orgs[0]!.id);
  }
});

test("two replicas admitting creates at the same instant take exactly the creation rate limit's last slots, one read of its window per batch; a create the quota refuses takes none", async () => {
  const [a, b] = await replicas();
  const org = await a.orgs.create('rated');
  const open = { ...LIMITS, max_sandboxes: null, max_total_memory_mb: null, max_total_disk_gb: null };
  const quotas = [new QuotaService(a, open, new ReplicaMutex(a.coordination, 'org-quota')), new QuotaService(b, open, new ReplicaMutex(b.coordination, 'org-quota'))];
  const limiters = [new SharedWindowLimiter(a, 4, 60_000, 'creates'), new SharedWindowLimiter(b, 4, 60_000, 'creates')];
  // One slot used already.
  await limiters[0]!.take(org.id);
  const stores = [a, b];
  const results = await Promise.allSettled(
    Array.from({ length: 10 }, (_, i) =>
      quotas[i % 2]!.admit(
        org.id,
        { sandboxes: 1, memoryMb: 512, diskGb: 2 },
        async () => {
          await sleep(10);
          await stores[i % 2]!.sandboxes.insert(row(`sbr${i}`, org.id));
        },
        { rate: limiters[i % 2]! },
      ),
    ),
  );
  const admitted = results.filter((r) => r.status === 'fulfilled').length;
  assert.equal(admitted, 3, `1 taken + 3 admitted = the limit of 4 (admitted ${admitted})`);
  for (const r of results) if (r.status === 'rejected') assert.equal((r.reason as ServiceError).code, 'RATE_LIMIT_EXCEEDED');
  assert.equal(await limiters[1]!.usage(org.id), 4, 'each admitted create recorded one slot');
  // Past a quota: refused with the quota's 409, and no slot is taken.
  const full = await a.orgs.create('full');
  const tight = new QuotaService(a, { ...LIMITS, max_sandboxes: 0 }, new ReplicaMutex(a.coordination, 'org-quota'));
  await assert.rejects(tight.admit(full.id, { sandboxes: 1, memoryMb: 1, diskGb: 1 }, async () => 'in', { rate: limiters[0]! }), { code: 'ORG_QUOTA_EXCEEDED' });
  assert.equal(await limiters[0]!.usage(full.id), 0);
});
