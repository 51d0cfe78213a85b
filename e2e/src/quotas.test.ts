import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, crunContainers, REPO_ROOT, startServer, type ApiResponse, type TestServer } from './harness.js';
import { writeBusyboxImage } from '../../packages/server/dist/testing/oci-fixtures.js';

/**
 * Issue 8, item 4: a tenant must not take the host's memory or disk, nor other tenants' share.
 * Every limit is hit for real, through a real daemon and real sandboxes: per-sandbox maximums on
 * create and build, the concurrent-sandbox quota (with concurrent creates racing for it), memory
 * and disk totals, running builds holding resources, default and maximum timeouts, the account
 * limits endpoint, and organization overrides set with `sandboxd orgs limits`.
 */

// The bootstrap (default) organization gets its limits from the configuration; other organizations
// get theirs from `sandboxd orgs limits`, set while the daemon runs.
const ENV = {
  SANDBOXD_MAX_SANDBOXES: '3',
  SANDBOXD_DEFAULT_TIMEOUT_SECONDS: '4',
  SANDBOXD_MAX_TIMEOUT_SECONDS: '900',
  SANDBOXD_REGISTRY_URL: 'none',
  SANDBOXD_BUILDS_PER_HOUR: '100',
  SANDBOXD_BUILDS_PER_DAY: '100',
};

type Client = Pick<TestServer, 'baseUrl' | 'apiKey'>;

let server: TestServer;
let scratch: string;
/** Every sandbox a test made, with the key that can delete it (other organizations' included). */
const made: Array<{ client: Client; id: string }> = [];

before(async () => {
  server = await startServer({ templates: ['base'], env: ENV });
  scratch = mkdtempSync(join(tmpdir(), 'sbd-quotas-'));
  // A tiny base image (busybox) for builds, so that building costs no Debian bootstrap.
  mkdirSync(join(scratch, 'import'));
  writeBusyboxImage(join(scratch, 'import'), 'node:20', join(scratch, 'busybox.tar'));
  operator(['images', 'import', 'node:20', join(scratch, 'busybox.tar')]);
});

after(async () => {
  for (const { client, id } of made) await api(client, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
  await server?.stop();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

function operator(args: string[]): string {
  return execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args], { env: server.env, encoding: 'utf8' });
}

/** A new organization with an API key; `limits` are `sandboxd orgs limits` flags. */
function organization(name: string, limits: string[] = []): Client {
  const key = JSON.parse(operator(['keys', 'create', '--org', name, '--json'])) as { api_key: string };
  if (limits.length) operator(['orgs', 'limits', name, ...limits]);
  return { baseUrl: server.baseUrl, apiKey: key.api_key };
}

async function create(client: Client, body: Record<string, unknown> = {}): Promise<ApiResponse> {
  const res = await api(client, 'POST', '/v1/sandboxes', { template_name: 'base', timeout_seconds: 600, ...body });
  if (res.status === 201) made.push({ client, id: res.body.id });
  return res;
}

async function created(client: Client, body: Record<string, unknown> = {}): Promise<string> {
  const res = await create(client, body);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id as string;
}

function refused(res: ApiResponse, status: number, code: string, limit: string): void {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.code, code, JSON.stringify(res.body));
  assert.equal(res.body.limit, limit);
  assert.equal(typeof res.body.request_id, 'string');
  assert.match(res.body.message, new RegExp(limit), 'the message names the limit');
}

async function action(client: Client, id: string, verb: string): Promise<ApiResponse> {
  return api(client, 'POST', `/v1/sandboxes/${id}/${verb}`);
}

async function limits(client: Client): Promise<any> {
  const res = await api(client, 'GET', '/v1/account/limits');
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

function containers(): string[] {
  return crunContainers(server.dataDir);
}

async function build(client: Client, body: Record<string, unknown>): Promise<ApiResponse> {
  return api(client, 'POST', '/v1/templates/build', body);
}

/** The build's final status. */
async function finished(client: Client, buildId: string): Promise<string> {
  return until('the build', async () => {
    const status = (await api(client, 'GET', `/v1/templates/build/${buildId}/status`)).body.status as string;
    return status === 'building' ? undefined : status;
  }, 120_000);
}

describe('concurrent sandboxes', () => {
  test('8 concurrent creates against max_sandboxes 3 give exactly 3; each refusal is a 409 with the limit and the usage', async () => {
    const results = await Promise.all(Array.from({ length: 8 }, () => create(server)));
    const ok = results.filter((r) => r.status === 201);
    const no = results.filter((r) => r.status !== 201);
    assert.equal(ok.length, 3, results.map((r) => `${r.status} ${r.body.code ?? ''}`).join(', '));
    assert.equal(no.length, 5);
    for (const r of no) {
      refused(r, 409, 'ORG_QUOTA_EXCEEDED', 'max_sandboxes');
      assert.deepEqual([r.body.max, r.body.used, r.body.requested], [3, 3, 1]);
      assert.match(r.body.message, /3 of 3 concurrent sandboxes/);
    }
    const l = await limits(server);
    assert.deepEqual(l.concurrent_sandboxes, { used: 3, limit: 3, stopped: 0 });
    assert.deepEqual(l.committed_memory_mb.used, 3 * 512);
    assert.deepEqual(l.committed_disk_gb.used, 3 * 2);
    for (const r of ok) assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${r.body.id}`)).status, 200);
  });

  test('stopped sandboxes free their slot, paused ones do not, start is admitted like a create; the warm pool counts for no one', async () => {
    const [a, b, c] = [await created(server), await created(server), await created(server)];
    // The warm pool boots base sandboxes ahead of time: they run, but belong to no organization yet.
    const pooled = await until('the warm pool to refill', async () => (containers().length >= 5 ? containers() : undefined));
    assert.ok(pooled.length >= 5, `containers: ${pooled.length}`);
    assert.equal((await limits(server)).concurrent_sandboxes.used, 3);
    refused(await create(server), 409, 'ORG_QUOTA_EXCEEDED', 'max_sandboxes');

    assert.equal((await action(server, a, 'stop')).status, 200);
    assert.deepEqual((await limits(server)).concurrent_sandboxes, { used: 2, limit: 3, stopped: 1 });
    const d = await created(server); // a warm one, handed to this organization and counted from now
    assert.equal((await limits(server)).concurrent_sandboxes.used, 3);
    refused(await action(server, a, 'start'), 409, 'ORG_QUOTA_EXCEEDED', 'max_sandboxes');
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${a}`)).body.status, 'stopped', 'a refused start leaves it stopped');

    assert.equal((await action(server, b, 'pause')).status, 200);
    refused(await create(server), 409, 'ORG_QUOTA_EXCEEDED', 'max_sandboxes');

    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${d}`)).status, 200);
    assert.equal((await action(server, a, 'start')).status, 200);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${a}`)).body.status, 'running');
    for (const id of [a, b, c]) assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${id}`)).status, 200);
    assert.equal((await limits(server)).concurrent_sandboxes.used, 0);
  });

  test("one organization at its quota does not stop another's creates", async () => {
    const other = organization('quota-neighbour');
    const mine = [await created(server), await created(server), await created(server)];
    refused(await create(server), 409, 'ORG_QUOTA_EXCEEDED', 'max_sandboxes');
    const theirs = await created(other);
    assert.equal((await limits(other)).concurrent_sandboxes.used, 1);
    for (const id of mine) await api(server, 'DELETE', `/v1/sandboxes/${id}`);
    await api(other, 'DELETE', `/v1/sandboxes/${theirs}`);
  });
});

describe('memory and disk totals', () => {
  test('memory is held by running and paused sandboxes, disk by stopped ones too; the limits are set with sandboxd orgs limits', async () => {
    const org = organization('quota-totals', ['--max-total-memory-mb', '1024', '--max-total-disk-gb', '5', '--max-sandboxes', 'unlimited']);
    const s1 = await created(org);
    const s2 = await created(org);
    const memory = await create(org);
    refused(memory, 409, 'ORG_QUOTA_EXCEEDED', 'max_total_memory_mb');
    assert.deepEqual([memory.body.max, memory.body.used, memory.body.requested], [1024, 1024, 512]);

    assert.equal((await action(org, s2, 'stop')).status, 200);
    const disk = await create(org);
    refused(disk, 409, 'ORG_QUOTA_EXCEEDED', 'max_total_disk_gb');
    assert.deepEqual([disk.body.max, disk.body.used, disk.body.requested], [5, 4, 2]);
    assert.match(disk.body.message, /stopped ones keep their disk/);

    const l = await limits(org);
    assert.deepEqual(l.concurrent_sandboxes, { used: 1, limit: null, stopped: 1 });
    assert.deepEqual(l.committed_memory_mb, { used: 512, limit: 1024 });
    assert.deepEqual(l.committed_disk_gb, { used: 4, limit: 5 });
    const shown = JSON.parse(operator(['orgs', 'limits', 'quota-totals', '--json']));
    assert.deepEqual(shown.usage, { sandboxes: 1, stopped_sandboxes: 1, memory_mb: 512, disk_gb: 4, running_builds: 0 });

    assert.equal((await api(org, 'DELETE', `/v1/sandboxes/${s2}`)).status, 200);
    const s3 = await created(org);
    // The operator raises the limit: it applies at the next request, without a restart.
    refused(await create(org), 409, 'ORG_QUOTA_EXCEEDED', 'max_total_memory_mb');
    operator(['orgs', 'limits', 'quota-totals', '--max-total-memory-mb', '1536', '--max-total-disk-gb', 'default']);
    const s4 = await created(org);
    for (const id of [s1, s3, s4]) await api(org, 'DELETE', `/v1/sandboxes/${id}`);
  });
});

describe('per-sandbox maximums', () => {
  test('create: a built-in template above max_memory_mb, and an own template built before max_vcpu was lowered, are 400s naming the limit', async () => {
    const org = organization('quota-small', ['--max-memory-mb', '256']);
    const base = await create(org);
    refused(base, 400, 'LIMIT_EXCEEDED', 'max_memory_mb');
    assert.deepEqual([base.body.max, base.body.requested], [256, 512]);
    assert.match(base.body.message, /template "base" asks for 512 MB of memory/);

    operator(['orgs', 'limits', 'quota-small', '--max-memory-mb', 'default']);
    const started = await build(org, { alias: 'two-cpus', cpu: 2, memory: 256, diskGB: 1, steps: [{ type: 'from', image: 'node:20' }, { type: 'run', command: 'echo ok > /mark' }] });
    assert.equal(started.status, 202, JSON.stringify(started.body));
    assert.equal(await finished(org, started.body.build_id), 'active');
    const before = await created(org, { template_name: 'two-cpus' });
    assert.equal((await api(org, 'GET', `/v1/sandboxes/${before}`)).body.resources.vcpu, 2);
    await api(org, 'DELETE', `/v1/sandboxes/${before}`);

    operator(['orgs', 'limits', 'quota-small', '--max-vcpu', '1']);
    const after = await create(org, { template_name: 'two-cpus' });
    refused(after, 400, 'LIMIT_EXCEEDED', 'max_vcpu');
    assert.match(after.body.message, /template "two-cpus" asks for 2 vCPU; the organization's maximum per sandbox is 1 vCPU/);
  });

  test('build: cpu, memory or diskGB above the maximums is a 400 naming the limit, and nothing is built', async () => {
    const org = organization('quota-builds', ['--max-vcpu', '1', '--max-memory-mb', '512', '--max-disk-gb', '2']);
    const steps = [{ type: 'from', image: 'node:20' }];
    for (const [body, limit] of [
      [{ cpu: 2 }, 'max_vcpu'],
      [{ memory: 1024 }, 'max_memory_mb'],
      [{ diskGB: 3 }, 'max_disk_gb'],
    ] as const) {
      const res = await build(org, { alias: 'too-big', steps, ...body });
      refused(res, 400, 'LIMIT_EXCEEDED', limit);
      assert.match(res.body.message, /this build asks for/);
    }
    assert.equal((await api(org, 'GET', '/v1/templates/too-big')).status, 404);
    assert.equal((await limits(org)).template_builds.per_hour.used, 0, 'refused builds do not count against the build rate limit');
  });

  test('a running build holds its memory and disk: a create that would pass the total waits for the build to end', async () => {
    const org = organization('quota-running-build', ['--max-total-memory-mb', '1024']);
    const started = await build(org, { alias: 'slow', cpu: 1, memory: 768, diskGB: 1, steps: [{ type: 'from', image: 'node:20' }, { type: 'run', command: 'sleep 8' }] });
    assert.equal(started.status, 202, JSON.stringify(started.body));
    const l = await limits(org);
    assert.equal(l.template_builds.running, 1);
    assert.deepEqual(l.committed_memory_mb, { used: 768, limit: 1024 });
    const res = await create(org);
    refused(res, 409, 'ORG_QUOTA_EXCEEDED', 'max_total_memory_mb');
    assert.match(res.body.message, /1 running template build/);
    assert.equal(await finished(org, started.body.build_id), 'active');
    assert.equal((await limits(org)).committed_memory_mb.used, 0);
    const id = await created(org);
    await api(org, 'DELETE', `/v1/sandboxes/${id}`);
  });
});

describe('timeouts', () => {
  test('a sandbox created without timeout_seconds gets the default and really expires', async () => {
    const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base' });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    made.push({ client: server, id: res.body.id });
    assert.equal(res.body.timeout_seconds, 4);
    const left = Date.parse(res.body.expires_at) - Date.now();
    assert.ok(left > 0 && left <= 4000, `expires in ${left} ms`);
    const gone = await until('the sandbox to expire', async () => {
      const r = await api(server, 'GET', `/v1/sandboxes/${res.body.id}`);
      return r.status === 200 ? undefined : r;
    });
    assert.equal(gone.status, 410);
    assert.equal(gone.body.code, 'SANDBOX_EXPIRED');
    await assert.rejects(fetch(`${res.body.public_host}/health`), 'its public_host is closed');
  });

  test('above max_timeout_seconds is a 400 naming the limit on create and on PUT timeout; at the maximum is accepted', async () => {
    refused(await create(server, { timeout_seconds: 901 }), 400, 'LIMIT_EXCEEDED', 'max_timeout_seconds');
    const id = await created(server, { timeout_seconds: 900 });
    const put = await api(server, 'PUT', `/v1/sandboxes/${id}/timeout`, { timeout_seconds: 901 });
    refused(put, 400, 'LIMIT_EXCEEDED', 'max_timeout_seconds');
    assert.deepEqual([put.body.max, put.body.requested], [900, 901]);
    const ok = await api(server, 'PUT', `/v1/sandboxes/${id}/timeout`, { timeout_seconds: 900 });
    assert.equal(ok.status, 200);
    assert.equal(ok.body.timeout_seconds, 900);
    await api(server, 'DELETE', `/v1/sandboxes/${id}`);
  });

  test('an organization may have no timeout at all when the operator says so', async () => {
    const org = organization('quota-forever', ['--default-timeout-seconds', 'none', '--max-timeout-seconds', 'unlimited']);
    const res = await create(org, { timeout_seconds: undefined });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.deepEqual([res.body.timeout_seconds, res.body.expires_at], [null, null]);
    assert.deepEqual((await limits(org)).sandbox_timeout_seconds, { default: null, max: null });
    await api(org, 'DELETE', `/v1/sandboxes/${res.body.id}`);
  });
});

describe('account limits and the operator CLI', () => {
  test('/v1/account/limits shows every limit (from the configuration and the host) and its usage', async () => {
    const l = await limits(server);
    assert.deepEqual(Object.keys(l).sort(), [
      'committed_disk_gb', 'committed_memory_mb', 'concurrent_sandboxes', 'organization_id', 'per_sandbox', 'rate_limits', 'request_id',
      'sandbox_timeout_seconds', 'snapshot_storage_mb', 'storage', 'template_builds',
    ]);
    assert.equal(l.snapshot_storage_mb.used, 0);
    // Everything it stores, and what max_total_disk_gb holds it to (its disks and what it stores).
    assert.deepEqual(Object.keys(l.storage).sort(), ['limit_gb', 'sandbox_disks_gb', 'sandbox_disks_held_bytes', 'snapshots_bytes', 'templates_bytes', 'uploads_bytes', 'used_gb']);
    assert.equal(l.storage.limit_gb, l.committed_disk_gb.limit);
    assert.equal(l.storage.sandbox_disks_gb, l.committed_disk_gb.used);
    assert.ok(l.storage.used_gb >= l.storage.sandbox_disks_gb);
    assert.ok(l.snapshot_storage_mb.limit >= 10_240, 'a quarter of the data disk, at least 10 GB');
    assert.equal(l.concurrent_sandboxes.limit, 3);
    assert.equal(l.per_sandbox.vcpu, Math.max(2, availableParallelism()), 'the host cores (at least 2)');
    assert.ok(l.per_sandbox.memory_mb >= 2048 && l.committed_memory_mb.limit >= l.per_sandbox.memory_mb);
    assert.ok(l.per_sandbox.disk_gb >= 10 && l.committed_disk_gb.limit >= l.per_sandbox.disk_gb);
    assert.deepEqual(l.sandbox_timeout_seconds, { default: 4, max: 900 });
    assert.deepEqual(l.template_builds.per_hour.limit, 100);
    assert.equal(l.rate_limits.sandbox_creates_per_minute.limit, 120);
  });

  test('sandboxd orgs list shows each organization with its limits, overrides marked; bad values are refused', async () => {
    organization('quota-listed', ['--max-vcpu', '1', '--max-sandboxes', '7']);
    const table = operator(['orgs', 'list']);
    const line = table.split('\n').find((l) => /\squota-listed\s/.test(l));
    assert.ok(line, table);
    assert.match(line, /\s7\*\s+1\*\s/, 'max_sandboxes and max_vcpu set for it');
    const json = JSON.parse(operator(['orgs', 'list', '--json'])) as Array<{ name: string; limits: Record<string, unknown>; overrides: Record<string, unknown> }>;
    const listed = json.find((o) => o.name === 'quota-listed')!;
    assert.deepEqual(listed.overrides, { max_vcpu: 1, max_sandboxes: 7 });
    assert.equal(listed.limits.max_timeout_seconds, 900, 'the rest from the configuration');

    for (const args of [['--max-vcpu', '0.5'], ['--max-memory-mb', '64'], ['--max-sandboxes', 'lots']]) {
      const r = spawnSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'orgs', 'limits', 'quota-listed', ...args], { env: server.env, encoding: 'utf8' });
      assert.notEqual(r.status, 0, args.join(' '));
      assert.match(r.stderr, new RegExp(args[0]!));
    }
    const unknown = spawnSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'orgs', 'limits', 'no-such-org', '--max-vcpu', '1'], { env: server.env, encoding: 'utf8' });
    assert.notEqual(unknown.status, 0);
    assert.match(unknown.stderr, /no organization named no-such-org/);
    assert.deepEqual(JSON.parse(operator(['orgs', 'limits', 'quota-listed', '--json'])).overrides, { max_vcpu: 1, max_sandboxes: 7 }, 'refused flags changed nothing');
  });
});
