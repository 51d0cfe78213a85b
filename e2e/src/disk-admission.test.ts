import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, agent, REPO_ROOT, startServer, type ApiResponse, type CreatedSandbox, type TestServer } from './harness.js';
import { writeBusyboxImage } from '../../packages/server/dist/testing/oci-fixtures.js';

/**
 * Issue 28, item 1: the disk is a fair share. On a data filesystem of its own (an 8 GiB ext4 image,
 * loop-mounted, sparse), organization A fills what it can every way it can: its sandbox's disk,
 * uploads until its quota (max_total_disk_gb, which counts what it stores) says 409, a second
 * sandbox; B, within its share, still creates. C, with no quota, fills the host up to the reserve:
 * every write past it (upload, create, snapshot, fork, build) is a 507 INSUFFICIENT_STORAGE before
 * anything is written, and B's running sandbox writes and reads most of its disk without an I/O
 * error. Before the fix, uploads counted for nothing and were admitted until the filesystem was
 * full under B's sparse disk.
 */

const FS_BYTES = 8 * 2 ** 30;
const MIB = 2 ** 20;

type Client = Pick<TestServer, 'baseUrl' | 'apiKey'>;

let scratch: string;
let mnt: string;
let server: TestServer | undefined;
let a: Client;
let b: Client;
let c: Client;

function mountTestFs(): void {
  scratch = mkdtempSync(join(tmpdir(), 'sbd-disk-'));
  // Sandboxes' mounts are made from inside their user namespaces: the path must be searchable.
  chmodSync(scratch, 0o711);
  const image = join(scratch, 'fs.img');
  mnt = join(scratch, 'data');
  mkdirSync(mnt);
  execFileSync('truncate', ['-s', String(FS_BYTES), image]);
  // No blocks reserved for root: the daemon is root, and its free space is f_bavail.
  execFileSync('mkfs.ext4', ['-q', '-F', '-m', '0', image]);
  execFileSync('mount', ['-o', 'loop', image, mnt]);
}

function unmountTestFs(): void {
  if (!scratch) return;
  if (mnt && spawnSync('mountpoint', ['-q', mnt]).status === 0) {
    if (spawnSync('umount', [mnt]).status !== 0) spawnSync('umount', ['-l', mnt]);
  }
  rmSync(scratch, { recursive: true, force: true });
}

before(async () => {
  mountTestFs();
  try {
    server = await startServer({
      templates: ['base'],
      env: { SANDBOXD_DATA_DIR: mnt, SANDBOXD_DISK_ADMISSION: 'on', SANDBOXD_DISK_OVERCOMMIT: '1', SANDBOXD_DISK_RESERVE_GB: '0.25', SANDBOXD_REGISTRY_URL: 'none', SANDBOXD_BUILDS_PER_HOUR: '100', SANDBOXD_BUILDS_PER_DAY: '100' },
    });
  } catch (err) {
    unmountTestFs();
    throw err;
  }
  // A is held to 3 GB of everything it stores; B and C have the defaults (the filesystem's size).
  a = organization('disk-a', ['--max-total-disk-gb', '3']);
  b = organization('disk-b');
  c = organization('disk-c');
  // A tiny base image (busybox) for builds, so that building costs no Debian bootstrap.
  writeBusyboxImage(join(scratch, 'import'), 'node:20', join(scratch, 'busybox.tar'));
  operator(['images', 'import', 'node:20', join(scratch, 'busybox.tar')]);
});

after(async () => {
  try {
    await server?.stop();
  } finally {
    unmountTestFs();
  }
});

function operator(args: string[]): string {
  return execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args], { env: server!.env, encoding: 'utf8' });
}

function organization(name: string, limits: string[] = []): Client {
  const key = JSON.parse(operator(['keys', 'create', '--org', name, '--json'])) as { api_key: string };
  if (limits.length) operator(['orgs', 'limits', name, ...limits]);
  return { baseUrl: server!.baseUrl, apiKey: key.api_key };
}

async function create(client: Client): Promise<ApiResponse> {
  return api(client, 'POST', '/v1/sandboxes', { template_name: 'base', timeout_seconds: 900 });
}

async function created(client: Client): Promise<CreatedSandbox> {
  const res = await create(client);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return { id: res.body.id, publicHost: res.body.public_host, authToken: res.body.auth_token, body: res.body };
}

async function sh(sb: CreatedSandbox, script: string, timeout = 300): Promise<{ stdout: string; stderr: string; exit_code: number }> {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', script], timeout });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

/** 507 INSUFFICIENT_STORAGE in the documented shape, naming what it was for. */
function noRoom(res: ApiResponse, what: RegExp): void {
  assert.equal(res.status, 507, JSON.stringify(res.body));
  assert.equal(res.body.code, 'INSUFFICIENT_STORAGE', JSON.stringify(res.body));
  assert.equal(typeof res.body.error, 'string');
  assert.equal(typeof res.body.request_id, 'string');
  assert.match(res.body.message, what);
  assert.match(res.body.message, /kept in reserve/);
  assert.equal(typeof res.body.requested_bytes, 'number');
  assert.equal(typeof res.body.available_bytes, 'number');
}

/** What the admission would let a write take now (the metrics' gauge). */
async function admits(): Promise<number> {
  const r = await fetch(`${server!.baseUrl}/metrics`, { headers: { 'x-api-key': server!.apiKey } });
  const m = /^sandboxd_node_disk_bytes\{kind="admits"\} (\S+)$/m.exec(await r.text());
  assert.ok(m, 'the admits gauge is there');
  return Number(m[1]);
}

/**
 * The gauge once a reading begun after everything so far has landed: the admission reads at most
 * once a second, in the background (until then an older reading, counting what was admitted since
 * in full, serves).
 */
async function settledAdmits(): Promise<number> {
  await new Promise((r) => setTimeout(r, 1100));
  await admits();
  await new Promise((r) => setTimeout(r, 300));
  return admits();
}

/** B's sandbox writes `mb` MiB, syncs, and reads it back: no error at any step. */
async function bWritesAndReads(sb: CreatedSandbox, mb: number, name: string): Promise<void> {
  // In its root (the overlay's upper, on its own disk), not a tmpfs.
  const r = await sh(sb, `set -e; head -c ${mb}M /dev/urandom > /${name}; sync; sha256sum /${name} > /${name}.sha; sha256sum -c /${name}.sha`);
  assert.equal(r.exit_code, 0, `B's sandbox: ${r.stderr}`);
  assert.doesNotMatch(r.stderr, /Input\/output error|No space left/);
}

/** Kernel log lines since `from` (the host's): a full filesystem under a loop disk shows as I/O errors there. */
function kernelLog(): string[] {
  return spawnSync('dmesg', [], { encoding: 'utf8' }).stdout.split('\n');
}

function dirEntries(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir) : [];
}

/** 64 MiB uploads of fresh content by `client` until one is refused; how many were stored, and the refusal. */
async function uploadUntilRefused(client: Client): Promise<{ stored: number; refusal: ApiResponse }> {
  for (let stored = 0; stored < 128; stored++) {
    const link = await api(client, 'POST', '/v1/templates/files/upload-link', { files_hash: `sha256:${randomBytes(32).toString('hex')}`, content_length: PIECE });
    assert.equal(link.status, 200, JSON.stringify(link.body));
    const res = await fetch(link.body.upload_url, { method: 'PUT', body: new Uint8Array(randomBytes(PIECE)), headers: { 'content-type': 'application/octet-stream' } });
    const body = (await res.json()) as Record<string, any>;
    if (res.status !== 200 && res.status !== 201) return { stored, refusal: { status: res.status, body, headers: res.headers } };
  }
  throw new Error('128 uploads and no refusal');
}

const PIECE = 64 * MIB;

describe('the disk is a fair share: quotas on everything stored, and 507 before the host fills', () => {
  let sbA: CreatedSandbox;
  let sbB: CreatedSandbox;
  let blobsBefore: number;

  test('A builds a template (its steps admitted, its layers counted), gets a sandbox as B does; A fills its own disk, which takes nothing more from the others', async () => {
    const started = await api(a, 'POST', '/v1/templates/build', { alias: 'small', cpu: 1, memory: 256, diskGB: 1, steps: [{ type: 'from', image: 'node:20' }, { type: 'run', command: 'head -c 3000000 /dev/urandom > /blob' }, { type: 'run', command: 'echo two > /two' }] });
    assert.equal(started.status, 202, JSON.stringify(started.body));
    let status = 'building';
    for (let i = 0; i < 600 && status === 'building'; i++) {
      await new Promise((r) => setTimeout(r, 200));
      status = (await api(a, 'GET', `/v1/templates/build/${started.body.build_id}/status`)).body.status;
    }
    assert.equal(status, 'active');
    assert.ok((await api(a, 'GET', '/v1/account/limits')).body.storage.templates_bytes >= 3_000_000, 'its steps\' layers are its own');
    sbA = await created(a);
    sbB = await created(b);
    await bWritesAndReads(sbB, 64, 'first');
    const before = await settledAdmits();
    const r = await sh(sbA, 'dd if=/dev/zero of=/fill bs=1M count=1024 conv=fsync 2>&1; echo done');
    assert.match(r.stdout, /done/);
    // Its disk was promised when it was made: writing into it takes no more room from the others.
    const after = await settledAdmits();
    assert.ok(Math.abs(after - before) < 64 * MIB, `the room left did not move by what A wrote in its own disk (${before} → ${after})`);
  });

  test("A's uploads stop at its quota (max_total_disk_gb counts its disks and what it stores): 409, and it is shown", async () => {
    blobsBefore = dirEntries(join(mnt, 'blobs', 'sha256')).length;
    // What is left of its 3 GB beside its 2 GB disk and its template's layers, in whole uploads.
    const room = 3 * 2 ** 30 - 2 * 2 ** 30 - (await api(a, 'GET', '/v1/account/limits')).body.storage.templates_bytes;
    const { stored, refusal } = await uploadUntilRefused(a);
    assert.equal(refusal.status, 409, JSON.stringify(refusal.body));
    assert.equal(refusal.body.code, 'ORG_QUOTA_EXCEEDED');
    assert.equal(refusal.body.limit, 'max_total_disk_gb');
    assert.match(refusal.body.message, /its snapshots, templates and uploads/);
    // 2 GB of disk, its template, then uploads up to the 3 GB.
    assert.equal(stored, Math.floor(room / PIECE), JSON.stringify(refusal.body));
    assert.equal(dirEntries(join(mnt, 'blobs', 'sha256')).length, blobsBefore + stored, 'the refused one left no blob');
    const l = (await api(a, 'GET', '/v1/account/limits')).body;
    assert.equal(l.storage.limit_gb, 3);
    assert.equal(l.storage.uploads_bytes, stored * PIECE);
    assert.equal(l.storage.sandbox_disks_gb, 2);
    assert.ok(l.storage.sandbox_disks_held_bytes >= 1024 * MIB, JSON.stringify(l.storage));
    assert.ok(l.storage.used_gb > 2.9 && l.storage.used_gb <= 3, String(l.storage.used_gb));
    const m = await (await fetch(`${server!.baseUrl}/metrics`, { headers: { 'x-api-key': server!.apiKey } })).text();
    assert.match(m, new RegExp(`^sandboxd_org_storage_bytes\\{org="disk-a",kind="uploads"\\} ${stored * PIECE}$`, 'm'));
    // A second sandbox is past the quota too.
    const res = await create(a);
    assert.equal(res.status, 409, JSON.stringify(res.body));
    assert.equal(res.body.limit, 'max_total_disk_gb');
  });

  test('B, within its share, still creates', async () => {
    const res = await create(b);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.ok((await api(b, 'DELETE', `/v1/sandboxes/${res.body.id}`)).status < 300);
  });

  test('C, with no quota to stop it, fills the host to its reserve: every write past it is a 507 before anything is written', async () => {
    const { refusal } = await uploadUntilRefused(c);
    noRoom(refusal, /no room for an upload of 67108864 bytes/);
    assert.ok((await admits()) < PIECE);
    assert.deepEqual(dirEntries(join(mnt, 'blobs')).filter((n) => n.startsWith('.tmp')), [], 'no half-written blob');
    noRoom(await create(c), /no room for a sandbox disk of 2 GB/);
    const layersBefore = dirEntries(join(mnt, 'snapshot-layers')).filter((n) => !n.startsWith('.'));
    noRoom(await api(a, 'POST', `/v1/sandboxes/${sbA.id}/snapshots`, {}), /no room for a copy of sandbox/);
    noRoom(await api(a, 'POST', `/v1/sandboxes/${sbA.id}/fork`, {}), /no room for a copy of sandbox/);
    const layersAfter = dirEntries(join(mnt, 'snapshot-layers'));
    assert.deepEqual(layersAfter.filter((n) => !n.startsWith('.')), layersBefore);
    assert.deepEqual(layersAfter.filter((n) => n.startsWith('.tmp')), [], 'no half-made copy');
    assert.equal((await api(a, 'GET', '/v1/snapshots')).body.data.length, 0);
    const build = await api(c, 'POST', '/v1/templates/build', { alias: 'filler', cpu: 1, memory: 256, diskGB: 1, steps: [{ type: 'from', image: 'node:20' }, { type: 'run', command: 'true' }] });
    noRoom(build, /no room for a template build of 1 GB/);
    assert.doesNotMatch(JSON.stringify((await api(c, 'GET', '/v1/templates')).body), /filler/, 'no template row is left');
    // The sandboxes go on.
    assert.equal((await sh(sbA, 'echo alive')).stdout.trim(), 'alive');
  });

  test("B's running sandbox writes and reads most of its disk on the full host, without an I/O error", async () => {
    const logFrom = kernelLog().length;
    await bWritesAndReads(sbB, 1536, 'big');
    const errors = kernelLog().slice(logFrom).filter((l) => /I\/O error|EXT4-fs error|EXT4-fs warning/.test(l));
    assert.deepEqual(errors, [], 'no I/O error on any loop disk');
  });

  test('B, refused while the host is full, creates again once A frees room; a stopped sandbox starts again', async () => {
    noRoom(await create(b), /no room for a sandbox disk of 2 GB/);
    assert.ok((await api(a, 'DELETE', `/v1/sandboxes/${sbA.id}`)).status < 300);
    let res: ApiResponse | undefined;
    for (let i = 0; i < 50; i++) {
      res = await create(b);
      if (res.status !== 507) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(res!.status, 201, JSON.stringify(res!.body));
    assert.ok((await api(b, 'DELETE', `/v1/sandboxes/${res!.body.id}`)).status < 300);
    // Its disk was counted when it was made: a start needs only the host within its reserve.
    assert.ok((await api(b, 'POST', `/v1/sandboxes/${sbB.id}/stop`)).status < 300);
    const started = await api(b, 'POST', `/v1/sandboxes/${sbB.id}/start`);
    assert.equal(started.status, 200, JSON.stringify(started.body));
    await bWritesAndReads(sbB, 16, 'after-start');
  });
});
