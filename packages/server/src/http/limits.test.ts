import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { loadConfig } from '../config/index.js';
import { SqliteStore } from '../store/sqlite.js';
import type { SandboxRow, TemplateRow } from '../store/types/index.js';
import { KeyService } from '../services/keys.js';
import { TemplateService } from '../services/templates.js';
import { TokenService } from '../services/tokens.js';
import { SandboxService } from '../services/sandboxes/index.js';
import { fixedPlacement, nodeOver, refusingRuntime } from '../testing/fake-node.js';
import { SlidingWindowLimiter } from '../services/rate-limit.js';
import { EventBus } from '../services/events.js';
import { KeyedMutex } from '../services/locks.js';
import { RouteTable } from '../gateway/routes.js';
import { UploadService, uploadKeyFromFile } from '../services/uploads.js';
import { localUploadBlobs } from '../services/upload-blobs.js';
import { fileBuildLogs } from '../services/build-logs.js';
import { TemplateBuildService } from '../services/template-builds/index.js';
import { QuotaService } from '../services/quotas.js';
import { FsBlobStore } from '../images/blob-store.js';
import { ApiShare } from '../services/api-share.js';
import { publicOrgId } from '../services/org-ids.js';

/**
 * The HTTP app over a real store, for the refusals: every one of them must happen before the
 * runtime is reached, so the runtime here fails every call (a refusal that came too late would
 * answer 503 RUNTIME_ERROR, not the 4xx these tests expect). Creates that pass are e2e/src/quotas.test.ts.
 */
const dir = mkdtempSync(join(tmpdir(), 'sbd-limits-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const ENV = {
  SANDBOXD_DATA_DIR: dir,
  SANDBOXD_MAX_VCPU: '2',
  SANDBOXD_MAX_MEMORY_MB: '2048',
  SANDBOXD_MAX_DISK_GB: '10',
  SANDBOXD_MAX_SANDBOXES: '3',
  SANDBOXD_MAX_TOTAL_MEMORY_MB: '2048',
  SANDBOXD_MAX_TOTAL_DISK_GB: '12',
  SANDBOXD_DEFAULT_TIMEOUT_SECONDS: '300',
  SANDBOXD_MAX_TIMEOUT_SECONDS: '3600',
};

let runtimeCalls = 0;

async function setup(share?: ApiShare) {
  const config = loadConfig(ENV, { cpus: 2, memoryMb: 4096, diskGb: 100 });
  const store = SqliteStore.open(':memory:');
  const keys = new KeyService(store, share);
  const templates = new TemplateService(store);
  const runtime = refusingRuntime(dir, () => runtimeCalls++);
  const createLimiter = new SlidingWindowLimiter(config.rateLimit.sandboxCreatesPerMinute, 60_000, 'creates');
  const quotas = new QuotaService(store, config.limits);
  const tokens = new TokenService(join(dir, 'jwt.pem'), 60);
  const sandboxes = new SandboxService({
    store,
    placement: fixedPlacement(store, nodeOver(runtime, 'test')),
    tokens,
    templates,
    layerPath: (id) => id,
    gateway: { open: async () => 1, close: async () => {}, publicHost: () => 'http://127.0.0.1:1' },
    routes: new RouteTable(),
    events: new EventBus(),
    locks: new KeyedMutex(),
    createLimiter,
    quotas,
    agentReadyTimeoutMs: 100,
    tombstoneSeconds: 60,
    log: () => {},
  });
  const uploads = new UploadService(store, localUploadBlobs(new FsBlobStore(join(dir, 'blobs'))), uploadKeyFromFile(join(dir, 'upload.key')), 'http://127.0.0.1:1');
  const engine = { run: () => Promise.reject(new Error('no build runs in this test')) };
  const builds = new TemplateBuildService({ store, uploads, engine, limits: { perHour: 100, perDay: 100 }, log: () => {}, quotas, logs: fileBuildLogs(join(dir, 'logs')) });
  const app = await buildApp({ services: { config, store, keys, tokens, sandboxes, templates, events: new EventBus(), createLimiter, quotas, builds, uploads } });
  const org = await keys.ensureOrg(`org-${Math.random()}`);
  const { secret } = await keys.createKey(org.id);
  const now = new Date().toISOString();
  const template = (name: string, over: Partial<TemplateRow>): TemplateRow => ({
    id: `tpl_${name}`, orgId: org.id, name, displayName: name, description: '', category: 'custom', language: 'custom', vcpu: 1,
    memoryMb: 512, diskGb: 2, status: 'active', isPublic: false, buildId: null, features: [], tags: [], layers: ['l'], env: {},
    workdir: null, errorMessage: null, createdAt: now, updatedAt: now, ...over,
  });
  await store.templates.upsert(template('small', {}));
  await store.templates.upsert(template('builtin-big', { orgId: null, isPublic: true, vcpu: 1, memoryMb: 4096, diskGb: 2 }));
  await store.templates.upsert(template('many-cpus', { vcpu: 4 }));
  await store.templates.upsert(template('big-disk', { diskGb: 11 }));
  const sandbox = (id: string, over: Partial<SandboxRow>) =>
    store.sandboxes.insert({
      id, orgId: org.id, templateId: 'tpl_small', templateName: 'small', status: 'running', region: 'local', internetAccess: true, egress: null,
      timeoutSeconds: null, expiresAt: null, vcpu: 1, memoryMb: 512, diskGb: 2, layers: ['l'], templateEnv: {}, envVars: {},
      gatewayPort: null, nodeId: 'test', version: 0, deletedReason: null, createdAt: now, updatedAt: now, deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [], ...over,
    });
  const call = async (method: 'GET' | 'POST' | 'PUT', url: string, payload?: unknown) => {
    const res = await app.inject({ method, url, headers: { 'x-api-key': secret }, ...(payload === undefined ? {} : { payload: payload as object }) });
    return { status: res.statusCode, body: res.json() };
  };
  return { app, store, org, sandbox, call, quotas, keys };
}

function assertRefusal(res: { status: number; body: any }, status: number, code: string, limit: string): void {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.code, code);
  assert.equal(res.body.limit, limit);
  assert.equal(typeof res.body.max, 'number');
  assert.equal(typeof res.body.request_id, 'string');
  assert.match(res.body.message, new RegExp(limit), 'the message names the limit');
}

async function closing(app: FastifyInstance, fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } finally {
    await app.close();
  }
}

test('create: a template above a per-sandbox maximum (built-in or own) is a 400 naming the limit', async () => {
  const { app, call } = await setup();
  await closing(app, async () => {
    const before = runtimeCalls;
    for (const [name, limit, asked] of [
      ['builtin-big', 'max_memory_mb', 4096],
      ['many-cpus', 'max_vcpu', 4],
      ['big-disk', 'max_disk_gb', 11],
    ] as const) {
      const res = await call('POST', '/v1/sandboxes', { template_name: name, timeout_seconds: 60 });
      assertRefusal(res, 400, 'LIMIT_EXCEEDED', limit);
      assert.equal(res.body.requested, asked);
      assert.match(res.body.message, new RegExp(`template "${name}"`));
    }
    assert.equal(runtimeCalls, before, 'refused before the runtime');
  });
});

test('create and PUT timeout: above max_timeout_seconds is a 400 naming it; at the maximum passes', async () => {
  const { app, call, sandbox } = await setup();
  await closing(app, async () => {
    assertRefusal(await call('POST', '/v1/sandboxes', { template_name: 'small', timeout_seconds: 3601 }), 400, 'LIMIT_EXCEEDED', 'max_timeout_seconds');
    await sandbox('sbtimeout', {});
    assertRefusal(await call('PUT', '/v1/sandboxes/sbtimeout/timeout', { timeout_seconds: 3601 }), 400, 'LIMIT_EXCEEDED', 'max_timeout_seconds');
    const ok = await call('PUT', '/v1/sandboxes/sbtimeout/timeout', { timeout_seconds: 3600 });
    assert.equal(ok.status, 200);
    assert.equal(ok.body.timeout_seconds, 3600);
    assert.equal((await call('PUT', '/v1/sandboxes/sbunknown/timeout', { timeout_seconds: 99999 })).status, 404, 'existence before limits');
  });
});

test('create past each quota is a 409 with the limit, the maximum and the usage, before the runtime', async () => {
  const { app, call, sandbox, store, org } = await setup();
  await closing(app, async () => {
    const before = runtimeCalls;
    // 3 active (creating, running, paused) of max_sandboxes 3; a stopped one does not count.
    await sandbox('sb1', { status: 'creating' });
    await sandbox('sb2', { status: 'running' });
    await sandbox('sb3', { status: 'paused' });
    await sandbox('sb4', { status: 'stopped' });
    await sandbox('sb5', { status: 'deleted' });
    const full = await call('POST', '/v1/sandboxes', { template_name: 'small' });
    assertRefusal(full, 409, 'ORG_QUOTA_EXCEEDED', 'max_sandboxes');
    assert.deepEqual([full.body.max, full.body.used, full.body.requested], [3, 3, 1]);
    assert.match(full.body.message, /3 of 3 concurrent sandboxes/);
    assert.equal(runtimeCalls, before, 'refused before the runtime');
    assert.equal((await store.sandboxes.usage(org.id)).active, 3, 'no row left by the refused create');
  });
});

test('memory and disk totals: memory of active sandboxes, disk of stopped ones too, running builds in both', async () => {
  const { app, call, sandbox, store, org } = await setup();
  await closing(app, async () => {
    await sandbox('m1', { memoryMb: 1024, diskGb: 2 });
    await sandbox('m2', { status: 'paused', memoryMb: 768, diskGb: 2 });
    const memory = await call('POST', '/v1/sandboxes', { template_name: 'small' });
    assertRefusal(memory, 409, 'ORG_QUOTA_EXCEEDED', 'max_total_memory_mb');
    assert.deepEqual([memory.body.max, memory.body.used, memory.body.requested], [2048, 1792, 512]);
    await store.sandboxes.update('m1', 0, { status: 'stopped' });
    await sandbox('d1', { status: 'stopped', memoryMb: 512, diskGb: 7 });
    // memory: 768 + 512 ≤ 2048; disk: 2 + 2 + 7 + 2 = 13 > 12 (stopped sandboxes keep their disk).
    const disk = await call('POST', '/v1/sandboxes', { template_name: 'small' });
    assertRefusal(disk, 409, 'ORG_QUOTA_EXCEEDED', 'max_total_disk_gb');
    assert.deepEqual([disk.body.used, disk.body.requested], [11, 2]);
    // A running build holds its memory: 768 + 1024 + 512 > 2048.
    await store.sandboxes.update('d1', 0, { status: 'deleted' });
    await store.builds.insert({
      id: 'bx', orgId: org.id, templateId: 'tpl_small', alias: 'x', status: 'building', progress: 0, currentStep: null,
      request: { memoryMb: 1024, diskGb: 1 }, errorMessage: null, createdAt: new Date().toISOString(), startedAt: null, completedAt: null,
    });
    const withBuild = await call('POST', '/v1/sandboxes', { template_name: 'small' });
    assertRefusal(withBuild, 409, 'ORG_QUOTA_EXCEEDED', 'max_total_memory_mb');
    assert.match(withBuild.body.message, /1 running template build/);
  });
});

test('start of a stopped sandbox is admitted like a create: refused at the quota, before the runtime', async () => {
  const { app, call, sandbox } = await setup();
  await closing(app, async () => {
    await sandbox('a1', {});
    await sandbox('a2', {});
    await sandbox('a3', {});
    await sandbox('s1', { status: 'stopped' });
    const before = runtimeCalls;
    const res = await call('POST', '/v1/sandboxes/s1/start');
    assertRefusal(res, 409, 'ORG_QUOTA_EXCEEDED', 'max_sandboxes');
    assert.equal(runtimeCalls, before);
    assert.equal((await call('GET', '/v1/sandboxes/s1')).body.status, 'stopped');
  });
});

test('build: resources above the maximums are a 400 naming the limit; unnamed ones default within them; running builds count', async () => {
  const { app, call, store, org } = await setup();
  await closing(app, async () => {
    const steps = [{ type: 'from', image: 'python:3.11' }];
    for (const [body, limit] of [
      [{ cpu: 3 }, 'max_vcpu'],
      [{ memory: 4096 }, 'max_memory_mb'],
      [{ diskGB: 11 }, 'max_disk_gb'],
    ] as const) {
      const res = await call('POST', '/v1/templates/build', { alias: `too-big-${limit.replaceAll('_', '-')}`, steps, ...body });
      assertRefusal(res, 400, 'LIMIT_EXCEEDED', limit);
      assert.match(res.body.message, /this build asks for/);
    }
    assert.equal((await call('POST', '/v1/templates/build', { alias: 'spec-range', cpu: 65, steps })).body.code, 'INVALID_TEMPLATE_DEFINITION', "the spec's range first");
    await store.orgs.setLimits(org.id, { max_vcpu: 1, max_memory_mb: 1024, max_disk_gb: 3 });
    const fits = await call('POST', '/v1/templates/build', { alias: 'defaults', steps });
    assert.equal(fits.status, 202, JSON.stringify(fits.body));
    const tpl = await call('GET', '/v1/templates/defaults');
    assert.deepEqual(tpl.body.default_resources, { vcpu: 1, memory_mb: 1024, disk_gb: 3 }, 'the build defaults (2, 2048, 10) lowered to the maximums');
    await store.orgs.setLimits(org.id, {});
    await store.builds.insert({
      id: 'running', orgId: org.id, templateId: 't', alias: 'r', status: 'building', progress: 0, currentStep: null,
      request: { memoryMb: 1536, diskGb: 1 }, errorMessage: null, createdAt: new Date().toISOString(), startedAt: null, completedAt: null,
    });
    const over = await call('POST', '/v1/templates/build', { alias: 'second', memory: 1024, steps });
    assertRefusal(over, 409, 'ORG_QUOTA_EXCEEDED', 'max_total_memory_mb');
    assert.equal((await call('GET', '/v1/templates/second')).status, 404, 'a refused build leaves no template');
  });
});

test('/v1/account/limits shows every limit and its usage; an override shows at once', async () => {
  const { app, call, sandbox, store, org } = await setup();
  await closing(app, async () => {
    await sandbox('u1', { memoryMb: 512, diskGb: 2 });
    await sandbox('u2', { status: 'paused', memoryMb: 256, diskGb: 1 });
    await sandbox('u3', { status: 'stopped', memoryMb: 512, diskGb: 4 });
    const res = await call('GET', '/v1/account/limits');
    assert.equal(res.status, 200);
    const b = res.body;
    assert.equal(b.organization_id, publicOrgId(org.id));
    assert.deepEqual(b.concurrent_sandboxes, { used: 2, limit: 3, stopped: 1 });
    assert.deepEqual(b.committed_memory_mb, { used: 768, limit: 2048 });
    assert.deepEqual(b.committed_disk_gb, { used: 7, limit: 12 });
    assert.deepEqual(b.per_sandbox, { vcpu: 2, memory_mb: 2048, disk_gb: 10 });
    assert.deepEqual(b.sandbox_timeout_seconds, { default: 300, max: 3600 });
    assert.deepEqual(b.template_builds, { per_hour: { used: 0, limit: 100 }, per_day: { used: 0, limit: 100 }, running: 0 });
    assert.deepEqual(b.rate_limits.sandbox_creates_per_minute, { limit: 120, used: 0 });
    await store.orgs.setLimits(org.id, { max_sandboxes: null, max_vcpu: 8, max_timeout_seconds: 60 });
    const after = (await call('GET', '/v1/account/limits')).body;
    assert.equal(after.concurrent_sandboxes.limit, null, 'null: no limit');
    assert.equal(after.per_sandbox.vcpu, 8);
    assert.deepEqual(after.sandbox_timeout_seconds, { default: 60, max: 60 }, 'the default is capped by a lower maximum');
  });
});

test('each organization has its share of the API: past its burst its requests wait their turn, others are served at once; past the longest wait, 429', async () => {
  const { app, keys, call } = await setup(new ApiShare({ rate: 10, burst: 3, maxWaitMs: 1500 }));
  await closing(app, async () => {
    const other = await keys.ensureOrg(`other-${Math.random()}`);
    const otherKey = (await keys.createKey(other.id)).secret;
    const timed = async (fn: () => Promise<{ status: number; body: any }>) => {
      const t0 = performance.now();
      const r = await fn();
      return { ...r, ms: performance.now() - t0 };
    };
    // Eight at once: three within the burst, five waiting 100, 200, ... 500 ms (10 a second).
    const noisy = Array.from({ length: 8 }, () => timed(() => call('GET', '/v1/sandboxes')));
    await new Promise((r) => setTimeout(r, 20));
    const quiet = await timed(async () => {
      const res = await app.inject({ method: 'GET', url: '/v1/sandboxes', headers: { 'x-api-key': otherKey } });
      return { status: res.statusCode, body: res.json() };
    });
    assert.equal(quiet.status, 200);
    // Bounds loose enough for a loaded CI machine: what is asserted is who waits for whom.
    assert.ok(quiet.ms < 300, `another organization's request waited ${quiet.ms.toFixed(0)} ms behind the first one's turn`);
    const done = await Promise.all(noisy);
    for (const r of done) assert.equal(r.status, 200);
    const ms = done.map((r) => r.ms).sort((a, b) => a - b);
    assert.ok(ms[2]! < 300, `the burst is served at once: ${ms.map((m) => m.toFixed(0)).join(', ')}`);
    assert.ok(ms[7]! >= 450, `the eighth waited its turn (~500 ms): ${ms.map((m) => m.toFixed(0)).join(', ')}`);
    assert.ok(quiet.ms < ms[7]! - 150, `the other organization did not wait for the first one's turns: ${quiet.ms.toFixed(0)} vs ${ms[7]!.toFixed(0)} ms`);
    // Now empty: 15 more at once; the turns past 1.5 s of waiting are refused at once, with when to retry.
    const flood = await Promise.all(Array.from({ length: 20 }, () => timed(() => call('GET', '/v1/sandboxes'))));
    const refused = flood.filter((r) => r.status === 429);
    assert.ok(refused.length >= 3, `some refused: ${flood.map((r) => r.status).join(',')}`);
    for (const r of refused) {
      assert.equal(r.body.code, 'RATE_LIMIT_EXCEEDED');
      assert.ok(r.body.retry_after >= 1);
      assert.match(r.body.message, /at most 10 per second/);
      assert.ok(r.ms < 400, 'refused without waiting');
    }
    assert.equal(flood.filter((r) => r.status === 200).length + refused.length, 20);
  });
});
