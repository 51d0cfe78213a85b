import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { agent, api, createSandbox, startServer, REPO_ROOT, type CreatedSandbox, type TestServer } from './harness.js';

// Issue 13: snapshots, creates from them, forks, rollbacks and templates made of them, through the
// real daemon and real containers: what is saved (files, owners, whiteouts, symlinks, the env set),
// what is not (processes), what each sandbox gets of its own, and that nothing is left behind.

let server: TestServer;
let other: { baseUrl: string; apiKey: string };

function operator(args: string[]): any {
  return JSON.parse(execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args, '--json'], { env: server.env, encoding: 'utf8' }));
}

before(async () => {
  server = await startServer({ templates: ['base'] });
  operator(['orgs', 'create', 'snap-other']);
  other = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', 'snap-other']).api_key };
});
after(async () => {
  await server?.stop();
});

async function sh(sb: Pick<CreatedSandbox, 'publicHost' | 'authToken'>, script: string): Promise<{ stdout: string; stderr: string; exit_code: number }> {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', script], timeout: 60 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

/** Whether a `sleep` runs in the sandbox (from /proc: the image need not have procps). */
const SLEEPING = 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sleep ] && echo alive && exit 0; done; echo none';

const asSandbox = (b: any): CreatedSandbox => ({ id: b.id, publicHost: b.public_host, authToken: b.auth_token, body: b });

/** The snapshot layers on the host (finished ones, and anything half-made). */
function snapshotLayers(): { done: string[]; tmp: string[] } {
  const dir = join(server.dataDir, 'snapshot-layers');
  const names = existsSync(dir) ? readdirSync(dir) : [];
  return { done: names.filter((n) => /^[0-9a-f]{64}$/.test(n)), tmp: names.filter((n) => n.startsWith('.tmp-')) };
}

async function waitUntil(what: string, fn: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Files of every kind and owner, a deleted template file, a symlink out, an env set, a process. */
const PREPARE = [
  'mkdir -p /workspace/proj/sub && echo hello > /workspace/proj/a.txt',
  'head -c 3000000 /dev/urandom > /workspace/proj/big.bin && sha256sum /workspace/proj/big.bin > /workspace/proj/big.sha',
  'echo owned > /workspace/proj/owned && chown 1234:4321 /workspace/proj/owned && chmod 4750 /workspace/proj/owned',
  'chown 65534:65534 /workspace/proj/sub',
  'ln -s /etc/shadow /workspace/proj/link',
  'mkfifo /workspace/proj/fifo',
  'rm /etc/debian_version',
  'rm -rf /usr/share/doc && mkdir /usr/share/doc && echo only > /usr/share/doc/only',
].join(' && ');

const CHECK =
  'cat /workspace/proj/a.txt; cd /workspace/proj && sha256sum -c big.sha >/dev/null && echo big-ok; stat -c "%u:%g %a" /workspace/proj/owned /workspace/proj/sub; ' +
  'readlink /workspace/proj/link; test -p /workspace/proj/fifo && echo fifo; test -e /etc/debian_version || echo no-debian_version; ls /usr/share/doc';
const CHECK_OUT = 'hello\nbig-ok\n1234:4321 4750\n65534:65534 755\n/etc/shadow\nfifo\nno-debian_version\nonly\n';

describe('snapshots', () => {
  let src: CreatedSandbox;
  let snap: any;

  before(async () => {
    src = await createSandbox(server, { template_name: 'base', env_vars: { CREATED: 'at-create' }, timeout_seconds: 900 });
    const prep = await sh(src, PREPARE);
    assert.equal(prep.exit_code, 0, prep.stderr);
    assert.equal((await agent(src, 'PATCH', '/env', { env_vars: { SET_LATER: 'by-env-api' } })).status, 200);
    const bg = await agent(src, 'POST', '/commands/background', { command: 'sleep 1000' });
    assert.ok(bg.status === 200 || bg.status === 202, JSON.stringify(bg.body));
  });

  test('a running sandbox: frozen for the copy, running after it, its process alive; the snapshot is listed and readable by its organization only', async () => {
    const r = await api(server, 'POST', `/v1/sandboxes/${src.id}/snapshots`, { name: 'prepared' });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    snap = r.body;
    assert.match(snap.snapshot_id, /^snap_[0-9a-f]{24}$/);
    assert.equal(snap.id, snap.snapshot_id);
    assert.equal(snap.sandbox_id, src.id);
    assert.equal(snap.name, 'prepared');
    assert.equal(snap.template_name, 'base');
    assert.equal(snap.parent_snapshot_id, null);
    assert.ok(snap.size >= 3_000_000 && snap.size < 20_000_000, `size ${snap.size}: what changed, not the template`);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${src.id}`)).body.status, 'running');
    assert.equal((await sh(src, SLEEPING)).stdout, 'alive\n');

    const got = await api(server, 'GET', `/v1/snapshots/${snap.snapshot_id}`);
    assert.equal(got.status, 200);
    assert.equal(got.body.size, snap.size);
    const list = await api(server, 'GET', `/v1/snapshots?sandbox_id=${src.id}`);
    assert.deepEqual(
      list.body.data.map((s: any) => s.snapshot_id),
      [snap.snapshot_id],
    );
    assert.equal((await api(other, 'GET', `/v1/snapshots/${snap.snapshot_id}`)).status, 403);
    assert.equal((await api(other, 'GET', '/v1/snapshots')).body.data.length, 0);
    assert.equal((await api(other, 'POST', `/v1/sandboxes/${src.id}/snapshots`, {})).status, 403);
    assert.equal((await api(other, 'POST', '/v1/sandboxes', { snapshot_id: snap.snapshot_id })).status, 403);
    const unknown = await api(server, 'GET', '/v1/snapshots/snap_000000000000000000000000');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.code, 'SNAPSHOT_NOT_FOUND');
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${src.id}/snapshots`, { name: 'x'.repeat(129) })).status, 400);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${src.id}/snapshots`, { name: 'a', extra: 1 })).status, 400);
    assert.equal((await api(server, 'POST', '/v1/sandboxes/sbnonexistent00000000/snapshots', {})).status, 404);
    assert.equal((await api(server, 'POST', '/v1/sandboxes', { snapshot_id: snap.snapshot_id, template_name: 'base' })).status, 400);
  });

  test('a sandbox made from it has its files, owners, deletions, symlinks and env, in its own id range, and none of its processes', async () => {
    const r = await api(server, 'POST', '/v1/sandboxes', { snapshot_id: snap.snapshot_id, env_vars: { EXTRA: 'mine' } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.template_name, 'base');
    const sb = asSandbox(r.body);
    assert.equal((await sh(sb, CHECK)).stdout, CHECK_OUT);
    const env = await agent(sb, 'GET', '/env');
    assert.deepEqual(
      { c: env.body.env_vars.CREATED, s: env.body.env_vars.SET_LATER, e: env.body.env_vars.EXTRA },
      { c: 'at-create', s: 'by-env-api', e: 'mine' },
    );
    assert.equal((await sh(src, SLEEPING)).stdout, 'alive\n');
    assert.equal((await sh(sb, SLEEPING)).stdout, 'none\n');
    const map = async (s: CreatedSandbox) => (await sh(s, 'cat /proc/self/uid_map')).stdout.trim().split(/\s+/)[1];
    assert.notEqual(await map(sb), await map(src), 'each sandbox runs as a host id range of its own');
    // Its own changes stay its own.
    await sh(sb, 'echo changed > /workspace/proj/a.txt');
    assert.equal((await sh(src, 'cat /workspace/proj/a.txt')).stdout, 'hello\n');
  });

  test('fork: N running sandboxes with the source files as they are now; all or none; bad counts are 400s', async () => {
    await sh(src, 'echo after-snapshot > /workspace/proj/late.txt');
    const r = await api(server, 'POST', `/v1/sandboxes/${src.id}/fork`, { count: 3, timeout_seconds: 600 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.source_id, src.id);
    assert.equal(r.body.data.length, 3);
    const forks = r.body.data.map(asSandbox);
    assert.equal(new Set(forks.map((f: CreatedSandbox) => f.id)).size, 3);
    for (const f of forks) {
      assert.equal(f.body.status, 'running');
      assert.equal(f.body.timeout_seconds, 600);
      assert.ok(f.authToken && f.authToken !== src.authToken);
      assert.equal((await sh(f, CHECK)).stdout, CHECK_OUT);
      assert.equal((await sh(f, 'cat /workspace/proj/late.txt')).stdout, 'after-snapshot\n');
    }
    await sh(forks[0], 'echo only-in-0 > /workspace/proj/mine');
    assert.match((await sh(forks[1], 'cat /workspace/proj/mine 2>&1 || true')).stdout, /No such file/);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${src.id}`)).body.status, 'running');

    for (const count of [0, 21, 'two']) assert.equal((await api(server, 'POST', `/v1/sandboxes/${src.id}/fork`, { count })).status, 400, `count ${count}`);
    assert.equal((await api(other, 'POST', `/v1/sandboxes/${src.id}/fork`, {})).status, 403);
    for (const f of forks) assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${f.id}`)).status, 200);
  });

  test('a fork that cannot be made whole removes what it made: the quota admits 2 of 3', async () => {
    const name = 'snap-quota';
    operator(['orgs', 'create', name]);
    const org = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', name]).api_key };
    execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'orgs', 'limits', name, '--max-sandboxes', '3'], { env: server.env });
    const s = await createSandbox(org, { template_name: 'base' });
    await sh(s, 'echo x > /workspace/x');
    const layersBefore = snapshotLayers().done.length;
    const r = await api(org, 'POST', `/v1/sandboxes/${s.id}/fork`, { count: 3 });
    assert.equal(r.status, 409, JSON.stringify(r.body));
    assert.equal(r.body.code, 'ORG_QUOTA_EXCEEDED');
    const left = (await api(org, 'GET', '/v1/sandboxes')).body.data.map((x: any) => x.id);
    assert.deepEqual(left, [s.id], 'the forks it made are deleted');
    await waitUntil('the fork layer is freed', () => snapshotLayers().done.length === layersBefore);
    assert.equal((await api(org, 'DELETE', `/v1/sandboxes/${s.id}`)).status, 200);
  });

  test('restore: back to the snapshot, same id, URL and token; processes restart; only a snapshot of its lineage', async () => {
    const r = await api(server, 'POST', '/v1/sandboxes', { snapshot_id: snap.snapshot_id });
    const sb = asSandbox(r.body);
    await sh(sb, 'rm /workspace/proj/a.txt && echo new > /workspace/new.txt');
    assert.equal((await agent(sb, 'POST', '/commands/background', { command: 'sleep 1000' })).status < 300, true);
    await waitUntil('the sleep runs', async () => (await sh(sb, SLEEPING)).stdout === 'alive\n');
    const mine = await api(server, 'POST', `/v1/sandboxes/${sb.id}/snapshots`, { name: 'mine' });
    assert.equal(mine.status, 201);
    assert.equal(mine.body.parent_snapshot_id, snap.snapshot_id);
    await sh(sb, 'echo later > /workspace/later.txt');

    // To the snapshot it was made from (taken of another sandbox it descends from).
    const t0 = performance.now();
    const back = await api(server, 'POST', `/v1/sandboxes/${sb.id}/restore`, { snapshot_id: snap.snapshot_id });
    const ms = performance.now() - t0;
    assert.equal(back.status, 200, JSON.stringify(back.body));
    assert.equal(back.body.id, sb.id);
    assert.equal(back.body.status, 'running');
    assert.equal((await sh(sb, CHECK)).stdout, CHECK_OUT, 'the same token reaches it at the same URL');
    assert.equal((await sh(sb, 'ls /workspace')).stdout, 'proj\n');
    assert.equal((await sh(sb, SLEEPING)).stdout, 'none\n');
    assert.ok(ms < 5000, `restore took ${ms} ms`);

    // To its own later snapshot.
    const again = await api(server, 'POST', `/v1/sandboxes/${sb.id}/restore`, { snapshot_id: mine.body.snapshot_id });
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal((await sh(sb, 'ls /workspace; cat /workspace/new.txt; test -e /workspace/proj/a.txt || echo gone')).stdout, 'new.txt\nproj\nnew\ngone\n');

    // Not of its lineage: the source's later snapshot (taken of src, which sb does not descend from after it) is fine, another's not.
    const stranger = await createSandbox(server, { template_name: 'base' });
    const strangerSnap = await api(server, 'POST', `/v1/sandboxes/${stranger.id}/snapshots`, {});
    const refused = await api(server, 'POST', `/v1/sandboxes/${sb.id}/restore`, { snapshot_id: strangerSnap.body.snapshot_id });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.match(refused.body.message, /lineage/);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/restore`, { snapshot_id: 'snap_000000000000000000000000' })).status, 404);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/restore`, {})).status, 400);
    assert.equal((await api(other, 'POST', `/v1/sandboxes/${sb.id}/restore`, { snapshot_id: snap.snapshot_id })).status, 403);

    // A stopped sandbox stays stopped, and starts with the snapshot's files.
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`)).status, 200);
    const stopped = await api(server, 'POST', `/v1/sandboxes/${sb.id}/restore`, { snapshot_id: snap.snapshot_id });
    assert.equal(stopped.body.status, 'stopped');
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/start`)).status, 200);
    assert.equal((await sh(sb, CHECK)).stdout, CHECK_OUT);
    // A stopped sandbox can be snapshotted and forked as it is.
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`)).status, 200);
    const ofStopped = await api(server, 'POST', `/v1/sandboxes/${sb.id}/snapshots`, {});
    assert.equal(ofStopped.status, 201, JSON.stringify(ofStopped.body));
    const fk = await api(server, 'POST', `/v1/sandboxes/${sb.id}/fork`, {});
    assert.equal(fk.status, 201, JSON.stringify(fk.body));
    assert.equal((await sh(asSandbox(fk.body.data[0]), CHECK)).stdout, CHECK_OUT);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).body.status, 'stopped');
  });

  test('promote to a template: listed, used by creates, its name checked; it keeps its layers when the snapshot goes', async () => {
    const r = await api(server, 'POST', `/v1/snapshots/${snap.snapshot_id}/template`, { alias: 'prepared-env' });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.name, 'prepared-env');
    assert.equal(r.body.status, 'active');
    assert.ok((await api(server, 'GET', '/v1/templates')).body.data.some((t: any) => t.name === 'prepared-env'));
    assert.equal((await api(server, 'POST', `/v1/snapshots/${snap.snapshot_id}/template`, { alias: 'prepared-env' })).status, 409);
    assert.equal((await api(server, 'POST', `/v1/snapshots/${snap.snapshot_id}/template`, { alias: 'base' })).status, 409);
    assert.equal((await api(server, 'POST', `/v1/snapshots/${snap.snapshot_id}/template`, { alias: 'Bad Name' })).status, 400);
    assert.equal((await api(other, 'POST', `/v1/snapshots/${snap.snapshot_id}/template`, { alias: 'theirs' })).status, 403);
    const sb = await createSandbox(server, { template_name: 'prepared-env' });
    assert.equal((await sh(sb, CHECK)).stdout, CHECK_OUT);
    assert.equal((await agent(sb, 'GET', '/env')).body.env_vars.SET_LATER, undefined, 'the env set is the create\'s; the snapshot\'s is template env');
    assert.equal((await sh(sb, 'echo $SET_LATER')).stdout, 'by-env-api\n');
  });

  test('delete: the snapshot goes at once, its storage when nothing mounts it; the quota counts what snapshots store', async () => {
    const s = await createSandbox(server, { template_name: 'base' });
    await sh(s, 'head -c 2000000 /dev/urandom > /workspace/blob');
    const taken = await api(server, 'POST', `/v1/sandboxes/${s.id}/snapshots`, {});
    assert.equal(taken.status, 201);
    const layers0 = snapshotLayers().done.length;
    const made = await api(server, 'POST', '/v1/sandboxes', { snapshot_id: taken.body.snapshot_id });
    assert.equal(made.status, 201);
    assert.equal((await api(server, 'DELETE', `/v1/snapshots/${taken.body.snapshot_id}`)).status, 200);
    assert.equal((await api(server, 'GET', `/v1/snapshots/${taken.body.snapshot_id}`)).status, 404);
    assert.equal((await api(server, 'DELETE', `/v1/snapshots/${taken.body.snapshot_id}`)).status, 404);
    // The sandbox made from it still mounts its layer, and still works.
    assert.equal(snapshotLayers().done.length, layers0);
    assert.equal((await sh(asSandbox(made.body), 'wc -c < /workspace/blob')).stdout, '2000000\n');
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${made.body.id}`)).status, 200);
    await waitUntil('the last user of the layer is gone, and so is the layer', () => snapshotLayers().done.length === layers0 - 1);

    // Storage quota: 1 MB, and a snapshot of 2 MB does not fit; nothing is left of it.
    const name = 'snap-storage';
    operator(['orgs', 'create', name]);
    const org = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', name]).api_key };
    execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'orgs', 'limits', name, '--max-snapshot-storage-mb', '1'], { env: server.env });
    const q = await createSandbox(org, { template_name: 'base' });
    await sh(q, 'head -c 2000000 /dev/urandom > /workspace/blob');
    const before = snapshotLayers().done.length;
    const over = await api(org, 'POST', `/v1/sandboxes/${q.id}/snapshots`, {});
    assert.equal(over.status, 409, JSON.stringify(over.body));
    assert.equal(over.body.code, 'ORG_QUOTA_EXCEEDED');
    assert.equal(over.body.limit, 'max_snapshot_storage_mb');
    assert.equal(snapshotLayers().done.length, before);
    assert.deepEqual(snapshotLayers().tmp, []);
    await sh(q, 'rm /workspace/blob');
    const small = await api(org, 'POST', `/v1/sandboxes/${q.id}/snapshots`, {});
    assert.equal(small.status, 201, JSON.stringify(small.body));
    assert.equal((await api(org, 'DELETE', `/v1/sandboxes/${q.id}`)).status, 200);
  });

  test('a tree of many names is saved off the event loop: other organizations\' calls and deadlines go on meanwhile', async () => {
    const s = await createSandbox(server, { template_name: 'base', timeout_seconds: 900 });
    // 400,000 names for 8 inodes: hard links cost no inode and almost no space (ext4 takes 65,000 a file).
    const made = await sh(s, "mkdir /workspace/links && cd /workspace/links && perl -e 'for $f (1..8) { open(F, \">f$f\") or die; close F; link(\"f$f\", \"l${f}_$_\") or die for 1..50000 }' && echo made");
    assert.equal(made.stdout, 'made\n', made.stderr);
    const theirs = await createSandbox(other, { template_name: 'base', timeout_seconds: 3 });
    const taking = api(server, 'POST', `/v1/sandboxes/${s.id}/snapshots`, {});
    let slowest = 0;
    let done = false;
    void taking.finally(() => (done = true));
    const t0 = Date.now();
    while (!done && Date.now() - t0 < 120_000) {
      const a = performance.now();
      assert.equal((await api(other, 'GET', `/v1/sandboxes/${theirs.id}`).catch(() => ({ status: 0 }))).status === 0, false);
      slowest = Math.max(slowest, performance.now() - a);
      await new Promise((r) => setTimeout(r, 50));
    }
    const r = await taking;
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.ok(Date.now() - t0 > 1000, 'the snapshot took long enough to tell');
    assert.ok(slowest < 1500, `another organization's call waited ${Math.round(slowest)} ms during the snapshot`);
    // Its 3 s deadline passed while the snapshot ran, or soon after: the sweep did not wait for it.
    await waitUntil('the other organization\'s sandbox expired', async () => (await api(other, 'GET', `/v1/sandboxes/${theirs.id}`)).status === 410, 20_000);
    const made2 = await api(server, 'POST', '/v1/sandboxes', { snapshot_id: r.body.snapshot_id });
    assert.equal((await sh(asSandbox(made2.body), 'ls /workspace/links | wc -l; stat -c %h /workspace/links/f3')).stdout, '400008\n50001\n', 'the links are links in the copy too');
    for (const id of [s.id, made2.body.id]) await api(server, 'DELETE', `/v1/sandboxes/${id}`);
    await api(server, 'DELETE', `/v1/snapshots/${r.body.snapshot_id}`);
  });

  test('forks and templates made from snapshots count against the storage quota for as long as they hold their copy', async () => {
    const name = 'snap-forks';
    operator(['orgs', 'create', name]);
    const org = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', name]).api_key };
    execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'orgs', 'limits', name, '--max-snapshot-storage-mb', '3'], { env: server.env });
    const s = await createSandbox(org, { template_name: 'base' });
    await sh(s, 'head -c 2000000 /dev/urandom > /workspace/blob');
    const used = async () => (await api(org, 'GET', '/v1/account/limits')).body.snapshot_storage_mb.used as number;
    const fork = await api(org, 'POST', `/v1/sandboxes/${s.id}/fork`, {});
    assert.equal(fork.status, 201, JSON.stringify(fork.body));
    assert.ok((await used()) >= 2, 'the fork\'s copy counts');
    const second = await api(org, 'POST', `/v1/sandboxes/${s.id}/fork`, {});
    assert.equal(second.status, 409, 'a second copy does not fit');
    assert.equal(second.body.limit, 'max_snapshot_storage_mb');
    // A snapshot of the fork adds little, and a template promoted from it keeps counting after the snapshot goes.
    const snap = await api(org, 'POST', `/v1/sandboxes/${fork.body.data[0].id}/snapshots`, {});
    assert.equal(snap.status, 201, JSON.stringify(snap.body));
    const tpl = await api(org, 'POST', `/v1/snapshots/${snap.body.snapshot_id}/template`, { alias: 'kept-by-template' });
    assert.equal(tpl.status, 201);
    assert.equal((await api(org, 'DELETE', `/v1/snapshots/${snap.body.snapshot_id}`)).status, 200);
    for (const id of [s.id, fork.body.data[0].id]) assert.equal((await api(org, 'DELETE', `/v1/sandboxes/${id}`)).status, 200);
    assert.ok((await used()) >= 2, 'the template holds the copy');
    assert.equal((await api(org, 'DELETE', '/v1/templates/kept-by-template')).status, 200);
    await waitUntil('nothing holds the copy any more', async () => (await used()) === 0);
  });

  test('snapshots survive the sandbox and a restart of the daemon; a crash in the middle of one leaves its sandbox running and nothing half-made', async () => {
    const s = await createSandbox(server, { template_name: 'base', timeout_seconds: 900 });
    await sh(s, 'echo kept > /workspace/kept && head -c 400000000 /dev/zero > /workspace/big');
    const kept = await api(server, 'POST', `/v1/sandboxes/${s.id}/snapshots`, {});
    assert.equal(kept.status, 201);
    // Cut short by a crash: the request is under way when the daemon dies.
    const inFlight = api(server, 'POST', `/v1/sandboxes/${s.id}/snapshots`, {}).catch(() => undefined);
    await waitUntil('the copy has begun', () => snapshotLayers().tmp.length > 0, 10_000);
    await server.kill9();
    await inFlight;
    await server.restart();
    assert.deepEqual(snapshotLayers().tmp, [], 'no half-made layer');
    const mounts = readFileSync('/proc/self/mountinfo', 'utf8');
    assert.ok(!mounts.includes(join(server.dataDir, 'sandboxes', s.id, 'snap')), 'the copy\'s mount of the disk is gone');
    const after = await api(server, 'GET', `/v1/sandboxes/${s.id}`);
    assert.equal(after.body.status, 'running');
    assert.equal((await sh(s, 'echo thawed')).stdout, 'thawed\n', 'the sandbox frozen by the cut copy runs again');
    assert.equal((await api(server, 'GET', `/v1/snapshots?sandbox_id=${s.id}`)).body.data.length, 1);
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${s.id}`)).status, 200);
    const made = await api(server, 'POST', '/v1/sandboxes', { snapshot_id: kept.body.snapshot_id });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal((await sh(asSandbox(made.body), 'cat /workspace/kept')).stdout, 'kept\n');
    assert.equal((await api(server, 'GET', `/v1/snapshots/${snap.snapshot_id}`)).status, 200);
  });
});
