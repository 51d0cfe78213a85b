import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ServiceError } from '@sandboxd/protocol';
import { SqliteStore } from '../store/sqlite.js';
import type { SandboxRow } from '../store/types/index.js';
import { checkSize, checkTimeout, quotaError, resolveLimits, timeoutFor, type OrgLimits } from './limits.js';
import { KeyedMutex } from './locks.js';
import { QuotaService } from './quotas.js';
import { SlidingWindowLimiter } from './rate-limit.js';

const LIMITS: OrgLimits = {
  max_vcpu: 2,
  max_memory_mb: 4096,
  max_disk_gb: 20,
  max_sandboxes: 3,
  max_total_memory_mb: 2048,
  max_total_disk_gb: 10,
  default_timeout_seconds: 300,
  max_timeout_seconds: 3600,
  max_snapshot_storage_mb: null,
};

function refused(fn: () => unknown, code: string, limit: string): ServiceError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof ServiceError, `expected a ServiceError, got ${String(caught)}`);
  assert.equal(caught.code, code);
  assert.equal(caught.extra.limit, limit);
  assert.match(caught.message, new RegExp(limit), 'the message names the limit');
  return caught;
}

test('overrides replace defaults by name; null means no limit; unknown names are ignored', () => {
  const l = resolveLimits(LIMITS, { max_vcpu: 8, max_sandboxes: null, bogus: 1 });
  assert.equal(l.max_vcpu, 8);
  assert.equal(l.max_sandboxes, null);
  assert.equal(l.max_memory_mb, 4096);
  assert.equal((l as Record<string, unknown>).bogus, undefined);
});

test('timeouts: the default when none is asked, the maximum caps it, above the maximum is a 400 naming it', () => {
  assert.equal(timeoutFor(LIMITS, undefined), 300);
  assert.equal(timeoutFor(LIMITS, null), 300, 'null is "not given", as real clients send it');
  assert.equal(timeoutFor(LIMITS, 3600), 3600);
  const err = refused(() => timeoutFor(LIMITS, 3601), 'LIMIT_EXCEEDED', 'max_timeout_seconds');
  assert.equal(err.status, 400);
  assert.deepEqual([err.extra.max, err.extra.requested], [3600, 3601]);
  refused(() => checkTimeout(LIMITS, 7200), 'LIMIT_EXCEEDED', 'max_timeout_seconds');
  assert.equal(timeoutFor({ ...LIMITS, default_timeout_seconds: 7200 }, undefined), 3600, 'a default above the maximum is the maximum');
  assert.equal(timeoutFor({ ...LIMITS, default_timeout_seconds: null }, undefined), 3600, '"never" under a maximum is the maximum');
  assert.equal(timeoutFor({ ...LIMITS, default_timeout_seconds: null, max_timeout_seconds: null }, undefined), null, 'never expires');
  assert.equal(timeoutFor({ ...LIMITS, max_timeout_seconds: null }, 10_000_000), 10_000_000);
});

test('per-sandbox maximums: each resource above its maximum is a 400 naming the limit; at the maximum passes', () => {
  checkSize(LIMITS, { vcpu: 2, memoryMb: 4096, diskGb: 20 }, 'x');
  for (const [size, limit] of [
    [{ vcpu: 3, memoryMb: 1, diskGb: 1 }, 'max_vcpu'],
    [{ vcpu: 1, memoryMb: 4097, diskGb: 1 }, 'max_memory_mb'],
    [{ vcpu: 1, memoryMb: 1, diskGb: 21 }, 'max_disk_gb'],
  ] as const) {
    const err = refused(() => checkSize(LIMITS, size, 'template "big"'), 'LIMIT_EXCEEDED', limit);
    assert.match(err.message, /template "big"/);
  }
  checkSize({ ...LIMITS, max_vcpu: null, max_memory_mb: null, max_disk_gb: null }, { vcpu: 64, memoryMb: 1e6, diskGb: 1e4 }, 'x');
});

test('quotas: the first limit the demand would pass is a 409 with the limit, the maximum and the usage', () => {
  const used = { sandboxes: 3, stoppedSandboxes: 1, memoryMb: 1536, diskGb: 9, builds: 1 };
  const slot = quotaError(LIMITS, used, { sandboxes: 1, memoryMb: 1, diskGb: 1 })!;
  assert.equal(slot.status, 409);
  assert.equal(slot.code, 'ORG_QUOTA_EXCEEDED');
  assert.deepEqual([slot.extra.limit, slot.extra.max, slot.extra.used, slot.extra.requested], ['max_sandboxes', 3, 3, 1]);
  assert.match(slot.message, /3 of 3 concurrent sandboxes/);
  const memory = quotaError(LIMITS, { ...used, sandboxes: 0 }, { sandboxes: 1, memoryMb: 1024, diskGb: 1 })!;
  assert.equal(memory.extra.limit, 'max_total_memory_mb');
  assert.match(memory.message, /1024 MB.*1536 of the organization's 2048 MB.*1 running template build/);
  const disk = quotaError(LIMITS, { ...used, sandboxes: 0 }, { sandboxes: 1, memoryMb: 512, diskGb: 2 })!;
  assert.equal(disk.extra.limit, 'max_total_disk_gb');
  assert.match(disk.message, /stopped ones keep their disk/);
  assert.doesNotMatch(`${slot.message}${memory.message}${disk.message}`, /not found/, 'real clients read "sandbox ... not found" as expired');
  assert.equal(quotaError(LIMITS, { ...used, sandboxes: 0 }, { sandboxes: 1, memoryMb: 512, diskGb: 1 }), undefined, 'exactly at the limits fits');
  assert.equal(quotaError(LIMITS, used, { sandboxes: 0, memoryMb: 512, diskGb: 1 }), undefined, 'a build needs no sandbox slot');
  const none = { ...LIMITS, max_sandboxes: null, max_total_memory_mb: null, max_total_disk_gb: null };
  assert.equal(quotaError(none, { ...used, sandboxes: 1e6 }, { sandboxes: 1, memoryMb: 1e6, diskGb: 1e6 }), undefined);
});

test('max_total_disk_gb counts what the organization stores beside its disks: an upload or a snapshot past it is a 409 naming both', () => {
  const GIB = 1024 ** 3;
  const used = { sandboxes: 0, stoppedSandboxes: 0, memoryMb: 0, diskGb: 6, builds: 0, storedBytes: 3.5 * GIB };
  assert.equal(quotaError(LIMITS, used, { sandboxes: 0, memoryMb: 0, diskGb: 0, storedBytes: 0.5 * GIB }), undefined, 'exactly at the limit fits');
  const upload = quotaError(LIMITS, used, { sandboxes: 0, memoryMb: 0, diskGb: 0, storedBytes: 0.75 * GIB })!;
  assert.equal(upload.status, 409);
  assert.deepEqual([upload.extra.limit, upload.extra.max, upload.extra.used, upload.extra.requested], ['max_total_disk_gb', 10, 9.5, 0.75]);
  assert.match(upload.message, /6 GB are its sandboxes' disks .* and 3\.5 GB its snapshots, templates and uploads/);
  // A create of a 1 GB disk no longer fits either: the stored bytes count against disks too.
  assert.equal(quotaError(LIMITS, used, { sandboxes: 1, memoryMb: 1, diskGb: 1 })?.extra.limit, 'max_total_disk_gb');
  // A start adds nothing: never refused by what is stored.
  assert.equal(quotaError(LIMITS, { ...used, storedBytes: 100 * GIB }, { sandboxes: 1, memoryMb: 1, diskGb: 0 }), undefined);
});

test('the stored bytes come from the organization storage and are part of usage', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const q = new QuotaService(store, LIMITS, new KeyedMutex(), () => undefined, async (org) => (org === 'org_a' ? 5 * 1024 ** 3 : 0));
    assert.equal((await q.usage('org_a')).storedBytes, 5 * 1024 ** 3);
    await assert.rejects(q.checkStored('org_a', 6 * 1024 ** 3), (err: unknown) => err instanceof ServiceError && err.extra.limit === 'max_total_disk_gb');
    await q.checkStored('org_a', 5 * 1024 ** 3);
    await q.checkStored('org_b', 10 * 1024 ** 3);
  } finally {
    store.close();
  }
});

function row(id: string, over: Partial<SandboxRow>): SandboxRow {
  const now = new Date().toISOString();
  return {
    id, orgId: 'org_a', templateId: 't', templateName: 'base', status: 'running', region: 'local', internetAccess: true, egress: null,
    timeoutSeconds: null, expiresAt: null, vcpu: 1, memoryMb: 512, diskGb: 2, layers: [], templateEnv: {}, envVars: {},
    gatewayPort: null, nodeId: 'n', version: 0, deletedReason: null, createdAt: now, updatedAt: now, deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [], ...over,
  };
}

test('usage: active sandboxes, stopped ones for disk, running builds for memory and disk', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const q = new QuotaService(store, LIMITS);
    await store.sandboxes.insert(row('a', { status: 'creating' }));
    await store.sandboxes.insert(row('b', { status: 'paused' }));
    await store.sandboxes.insert(row('c', { status: 'stopped' }));
    await store.sandboxes.insert(row('d', { status: 'deleted' }));
    const build = { id: 'b1', orgId: 'org_a', templateId: 't', alias: 'a', status: 'building' as const, progress: 0, currentStep: null, errorMessage: null, createdAt: 'x', startedAt: null, completedAt: null };
    await store.builds.insert({ ...build, request: { memoryMb: 1000, diskGb: 5 } });
    await store.builds.insert({ ...build, id: 'b2', status: 'failed', request: { memoryMb: 9999, diskGb: 99 } });
    assert.deepEqual(await q.usage('org_a'), { sandboxes: 2, stoppedSandboxes: 1, memoryMb: 2024, diskGb: 11, builds: 1 });
  } finally {
    store.close();
  }
});

test('admission is race-free: 10 concurrent admissions against a quota of 3 admit exactly 3', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const q = new QuotaService(store, { ...LIMITS, max_total_memory_mb: null, max_total_disk_gb: null });
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) =>
        q.admit('org_a', { sandboxes: 1, memoryMb: 512, diskGb: 2 }, async () => {
          // A claim takes time (a warm sandbox answers first): without one admission at a time,
          // every create would see the same usage and pass.
          await new Promise((r) => setTimeout(r, 5));
          await store.sandboxes.insert(row(`sb${i}`, { status: 'creating' }));
        }),
      ),
    );
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 3);
    const errs = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as ServiceError] : []));
    assert.equal(errs.length, 7);
    for (const e of errs) assert.deepEqual([e.code, e.extra.limit, e.extra.used], ['ORG_QUOTA_EXCEEDED', 'max_sandboxes', 3]);
    assert.equal((await q.usage('org_a')).sandboxes, 3);
    assert.equal((await q.usage('org_b')).sandboxes, 0, 'another organization is untouched');
    await q.admit('org_b', { sandboxes: 1, memoryMb: 512, diskGb: 2 }, async () => undefined);
  } finally {
    store.close();
  }
});

/** A KeyedMutex that counts its turns, and fails them while `failing` is set (a store away). */
class CountingMutex extends KeyedMutex {
  turns = 0;
  failing: Error | undefined;
  override async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    this.turns++;
    if (this.failing) throw this.failing;
    return super.run(key, fn);
  }
}

test('a burst of admissions takes the lock once per batch, not once each; each admitted claim runs, and each caller gets its own answer', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const locks = new CountingMutex();
    const q = new QuotaService(store, { ...LIMITS, max_sandboxes: 30, max_total_memory_mb: null, max_total_disk_gb: null }, locks);
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) =>
        q.admit('org_a', { sandboxes: 1, memoryMb: 512, diskGb: 2 }, async () => {
          await new Promise((r) => setTimeout(r, 5));
          await store.sandboxes.insert(row(`sb${i}`, { status: 'creating' }));
          return `sb${i}`;
        }),
      ),
    );
    const admitted = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    assert.equal(admitted.length, 30);
    assert.deepEqual(admitted, Array.from({ length: 30 }, (_, i) => `sb${i}`), 'in the order they came, each with its own claim\'s value');
    assert.equal((await q.usage('org_a')).sandboxes, 30);
    assert.ok(locks.turns <= 2, `the lock was taken ${locks.turns} times for 50 admissions`);
    // Those that come while a batch holds the lock go in the next one, checked against what it admitted.
    const before = locks.turns;
    const late = await Promise.allSettled([q.admit('org_a', { sandboxes: 1, memoryMb: 1, diskGb: 1 }, async () => 'x')]);
    assert.equal(late[0]!.status, 'rejected');
    assert.equal(locks.turns, before + 1);
  } finally {
    store.close();
  }
});

test("a claim that fails fails its own admission only; a lock that cannot be had fails those waiting, and the next admissions work", async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const locks = new CountingMutex();
    const q = new QuotaService(store, { ...LIMITS, max_total_memory_mb: null, max_total_disk_gb: null }, locks);
    const results = await Promise.allSettled(
      [0, 1, 2].map((i) =>
        q.admit('org_a', { sandboxes: 1, memoryMb: 1, diskGb: 1 }, async () => {
          if (i === 1) throw new Error('the insert failed');
          await store.sandboxes.insert(row(`sb${i}`, { status: 'creating' }));
          return i;
        }),
      ),
    );
    assert.deepEqual(
      results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message)),
      [0, 'the insert failed', 2],
    );
    locks.failing = new Error('store unavailable');
    const failed = await Promise.allSettled([1, 2, 3].map(() => q.admit('org_a', { sandboxes: 0, memoryMb: 1, diskGb: 0 }, async () => 'in')));
    assert.deepEqual(
      failed.map((r) => (r.status === 'rejected' ? (r.reason as Error).message : 'admitted')),
      ['store unavailable', 'store unavailable', 'store unavailable'],
    );
    locks.failing = undefined;
    assert.equal(await q.admit('org_a', { sandboxes: 0, memoryMb: 1, diskGb: 0 }, async () => 'in'), 'in', 'nothing is stuck');
  } finally {
    store.close();
  }
});

test("an organization's overrides apply at the next admission", async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const q = new QuotaService(store, LIMITS);
    const org = await store.orgs.create('acme');
    await store.sandboxes.insert(row('a', { orgId: org.id }));
    await store.orgs.setLimits(org.id, { max_sandboxes: 1 });
    await assert.rejects(q.admit(org.id, { sandboxes: 1, memoryMb: 1, diskGb: 1 }, async () => undefined), { code: 'ORG_QUOTA_EXCEEDED' });
    await store.orgs.setLimits(org.id, { max_sandboxes: null });
    assert.equal(await q.admit(org.id, { sandboxes: 1, memoryMb: 1, diskGb: 1 }, async () => 'in'), 'in');
    assert.equal((await q.limitsFor(org.id)).max_sandboxes, null);
  } finally {
    store.close();
  }
});

test('the creation rate limit is taken in the admission, after the quota: a burst past it gets 429s, one quota refused takes no slot', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const limiter = new SlidingWindowLimiter(3, 60_000, 'sandbox creation rate limit');
    const q = new QuotaService(store, { ...LIMITS, max_total_memory_mb: null, max_total_disk_gb: null, max_sandboxes: 100 });
    const results = await Promise.allSettled(Array.from({ length: 5 }, (_, i) => q.admit('org_a', { sandboxes: 1, memoryMb: 1, diskGb: 1 }, async () => i, { rate: limiter })));
    assert.deepEqual(
      results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as ServiceError).code)),
      [0, 1, 2, 'RATE_LIMIT_EXCEEDED', 'RATE_LIMIT_EXCEEDED'],
    );
    assert.equal(limiter.usage('org_a'), 3);
    const tight = new QuotaService(store, { ...LIMITS, max_sandboxes: 0 });
    await assert.rejects(tight.admit('org_b', { sandboxes: 1, memoryMb: 1, diskGb: 1 }, async () => 'in', { rate: limiter }), { code: 'ORG_QUOTA_EXCEEDED' });
    assert.equal(limiter.usage('org_b'), 0, 'a create the quota refused takes no slot');
  } finally {
    store.close();
  }
});

test('likelyAdmits: only from a reading of the last 2 s that left room for the demand twice over beside those waiting, quotas and creation rate both', async () => {
  const store = SqliteStore.open(':memory:');
  // An admission is answered as its claim ends; its batch's reading is kept once the batch ends.
  const settled = () => new Promise((r) => setImmediate(r));
  try {
    const limiter = new SlidingWindowLimiter(4, 60_000, 'sandbox creation rate limit');
    const q = new QuotaService(store, { ...LIMITS, max_sandboxes: 10, max_total_memory_mb: 1000, max_total_disk_gb: null });
    const one = { sandboxes: 1, memoryMb: 100, diskGb: 1 };
    assert.equal(q.likelyAdmits('org_a', one), false, 'no reading yet');
    await q.admit('org_a', one, async () => 'in', { rate: limiter });
    await settled();
    assert.equal(q.likelyAdmits('org_a', one), true, '1 of 4 creates this minute, 100 of 1000 MB');
    assert.equal(q.likelyAdmits('org_a', { ...one, memoryMb: 460 }), false, 'twice 460 MB does not fit beside 100 in 1000');
    assert.equal(q.likelyAdmits('org_a', { ...one, memoryMb: 450 }), true, 'twice 450 does');
    assert.equal(q.likelyAdmits('org_b', one), false, "another organization's reading is not this one's");
    await q.admit('org_a', one, async () => 'in', { rate: limiter });
    await settled();
    assert.equal(q.likelyAdmits('org_a', one), true, '2 of 4: room for two more');
    await q.admit('org_a', one, async () => 'in', { rate: limiter });
    await settled();
    assert.equal(q.likelyAdmits('org_a', one), false, '3 of 4 creates this minute: one left is not ample room');
    // A batch under way counts too, not only those waiting for the next: 3 of 6 held when read,
    // then three whose claims are slow taken into a batch, then one waiting for the next batch.
    const six = new QuotaService(store, { ...LIMITS, max_sandboxes: 6, max_total_memory_mb: null, max_total_disk_gb: null });
    const rate = new SlidingWindowLimiter(100, 60_000, 'x');
    await six.admit('org_d', one, async () => 'in', { rate });
    await settled();
    assert.equal(six.likelyAdmits('org_d', one), true, '1 of 6');
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const slow = Array.from({ length: 3 }, () => six.admit('org_d', one, () => gate, { rate }));
    await settled();
    assert.equal(six.likelyAdmits('org_d', one), true, '1 held and 3 being admitted: room for 2 more');
    const next = six.admit('org_d', one, async () => 'in', { rate });
    assert.equal(six.likelyAdmits('org_d', one), false, '1 held, 3 being admitted, 1 waiting: room for 1 only');
    open();
    await Promise.all([...slow, next]);
    // A batch that takes no rate slot (a start's, a build's) leaves the rate room as old as it was.
    const rated = new QuotaService(store, { ...LIMITS, max_sandboxes: 10, max_total_memory_mb: null, max_total_disk_gb: null });
    await rated.admit('org_e', one, async () => 'in', { rate });
    await settled();
    (rated as unknown as { readings: Map<string, { rateAt: number }> }).readings.get('org_e')!.rateAt -= 2500;
    await rated.admit('org_e', one, async () => 'in');
    await settled();
    assert.equal(rated.likelyAdmits('org_e', one), false, 'the usage is fresh, the rate room is not');
    // A reading goes stale.
    const fresh = new QuotaService(store, { ...LIMITS, max_sandboxes: 10, max_total_memory_mb: null, max_total_disk_gb: null });
    await fresh.admit('org_c', one, async () => 'in', { rate: new SlidingWindowLimiter(100, 60_000, 'x') });
    await settled();
    assert.equal(fresh.likelyAdmits('org_c', one), true);
    (fresh as unknown as { readings: Map<string, { at: number }> }).readings.get('org_c')!.at -= 2500;
    assert.equal(fresh.likelyAdmits('org_c', one), false, 'a reading older than 2 s is not used');
  } finally {
    store.close();
  }
});
