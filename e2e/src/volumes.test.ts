import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { api, agent, createSandbox, REPO_ROOT, startServer, type CreatedSandbox, type TestServer } from './harness.js';
import { loopDevices, mounts } from '../../packages/server/dist/testing/host-objects.js';

// Volumes (issue 32) on a real daemon with real sandboxes: shared, size-enforced, owned by root in
// each sandbox, refused across organizations, kept across a restart, and gone without a trace.

let server: TestServer;
let other: { baseUrl: string; apiKey: string };

function operator(args: string[]): any {
  return JSON.parse(execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args, '--json'], { env: server.env, encoding: 'utf8' }));
}

before(async () => {
  server = await startServer({ templates: ['base'] });
  operator(['orgs', 'create', 'volume-outsider']);
  other = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', 'volume-outsider']).api_key };
});
after(async () => {
  for (const s of (await api(other, 'GET', '/v1/sandboxes')).body?.data ?? []) await api(other, 'DELETE', `/v1/sandboxes/${s.id}`);
  await server?.stop();
});

async function sh(sb: CreatedSandbox, cmd: string): Promise<{ exit: number; out: string; err: string }> {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', cmd], timeout: 120 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { exit: r.body.exit_code, out: String(r.body.stdout), err: String(r.body.stderr) };
}

const volumeDir = (id: string) => join(server.dataDir, 'volumes', id);
const traces = (id: string) => [
  ...(existsSync(volumeDir(id)) ? [volumeDir(id)] : []),
  ...mounts().filter((m) => m.target.startsWith(volumeDir(id))).map((m) => m.line),
  ...loopDevices().filter((l) => l.backing.startsWith(volumeDir(id))).map((l) => l.line),
];

test('a volume: shared read-write, size enforced, kept past its sandboxes and a restart, refused to others, gone on delete', async () => {
  // Bad input: 400 in the documented shape.
  for (const body of [{ name: 'Bad Name', size_gb: 1 }, { name: 'ok', size_gb: 0 }, { name: 'ok' }, { name: 'ok', size_gb: 1, extra: 1 }]) {
    const r = await api(server, 'POST', '/v1/volumes', body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.body.code, 'VALIDATION_ERROR');
  }
  const made = await api(server, 'POST', '/v1/volumes', { name: 'shared', size_gb: 1 });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const vol = made.body;
  assert.equal(vol.object, 'volume');
  assert.match(vol.id, /^vol-/);
  assert.equal((await api(server, 'POST', '/v1/volumes', { name: 'shared', size_gb: 1 })).status, 409, 'names are unique per organization');
  // Another organization may use the same name, and sees none of ours.
  const theirs = await api(other, 'POST', '/v1/volumes', { name: 'shared', size_gb: 1 });
  assert.equal(theirs.status, 201, JSON.stringify(theirs.body));
  assert.equal((await api(other, 'GET', `/v1/volumes/${vol.id}`)).status, 404);
  assert.equal((await api(other, 'DELETE', `/v1/volumes/${vol.id}`)).status, 404);
  const list = await api(server, 'GET', '/v1/volumes');
  assert.deepEqual(list.body.data.map((v: any) => v.id), [vol.id]);

  // Hostile mount paths: 400 before anything is made.
  for (const path of ['/', 'data', '/proc/x', '/sys', '/dev/shm/v', '/.sb/agent', '/a/../etc', '/a//b', '/data/']) {
    const r = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', volumes: [{ name: 'shared', path }] });
    assert.equal(r.status, 400, `${path}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.code, 'VALIDATION_ERROR');
  }
  // Another organization's create naming our volume (by id or by its own name's twin): 404 for ours.
  const stolen = await api(other, 'POST', '/v1/sandboxes', { template_name: 'base', volumes: [{ name: vol.id, path: '/data' }] });
  assert.equal(stolen.status, 404, JSON.stringify(stolen.body));
  assert.equal(stolen.body.code, 'VOLUME_NOT_FOUND');

  const a = await createSandbox(server, { volumes: [{ name: 'shared', path: '/data' }] });
  const b = await createSandbox(server, { volumes: [{ name: vol.id, path: '/mnt/shared' }] });
  assert.deepEqual(a.body.volumes, [{ volume_id: vol.id, name: 'shared', path: '/data', read_only: false }]);
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${b.id}`)).body.volumes[0].path, '/mnt/shared');

  // Root in each sandbox (each its own id range) owns the files, and both write at once.
  const [wa, wb] = await Promise.all([
    sh(a, 'for i in $(seq 1 200); do echo a$i >> /data/a.log; done; mkdir -p /data/dir && echo from-a > /data/dir/f && stat -c %u:%g /data /data/dir/f'),
    sh(b, 'for i in $(seq 1 200); do echo b$i >> /mnt/shared/b.log; done; stat -c %u:%g /mnt/shared'),
  ]);
  assert.equal(wa.exit, 0, wa.err);
  assert.equal(wb.exit, 0, wb.err);
  assert.deepEqual(wa.out.trim().split('\n'), ['0:0', '0:0']);
  assert.equal(wb.out.trim(), '0:0');
  const seen = await sh(b, 'cat /mnt/shared/dir/f; wc -l < /mnt/shared/a.log; stat -c %u /mnt/shared/dir/f; echo from-b >> /mnt/shared/dir/f');
  assert.equal(seen.exit, 0, seen.err);
  assert.deepEqual(seen.out.trim().split('\n'), ['from-a', '200', '0']);
  assert.equal((await sh(a, 'cat /data/dir/f')).out, 'from-a\nfrom-b\n');
  // On the host the files are in canonical ownership (ids no host user holds), whoever wrote them.
  for (const f of ['dir/f', 'a.log', 'b.log']) assert.equal(statSync(join(volumeDir(vol.id), 'mnt', f)).uid, 900_000_000, f);

  // The size is a hard limit: ENOSPC inside at about 1 GB, not the sandbox's own disk.
  const fill = await sh(a, 'dd if=/dev/zero of=/data/fill bs=1M count=1200 2>&1; echo rc=$?');
  assert.match(fill.out, /No space left on device/);
  assert.match(fill.out, /rc=1/);
  const got = await api(server, 'GET', '/v1/volumes/shared');
  assert.equal(got.status, 200);
  assert.ok(got.body.used_bytes > 900 * 1024 ** 2 && got.body.used_bytes <= 1024 ** 3, String(got.body.used_bytes));
  assert.deepEqual([...got.body.mounted_by].sort(), [a.id, b.id].sort());
  await sh(a, 'rm /data/fill');

  // Delete while mounted: 409.
  const busy = await api(server, 'DELETE', '/v1/volumes/shared');
  assert.equal(busy.status, 409, JSON.stringify(busy.body));
  assert.equal(busy.body.code, 'VOLUME_IN_USE');

  // A daemon restart keeps the volume and the sandboxes' mounts.
  await server.shutdown();
  await server.restart();
  assert.equal((await sh(a, 'cat /data/dir/f')).out, 'from-a\nfrom-b\n');
  assert.equal((await api(server, 'GET', `/v1/volumes/${vol.id}`)).body.name, 'shared');
  // ...and a sandbox stopped and started mounts it again.
  assert.equal((await api(server, 'POST', `/v1/sandboxes/${b.id}/stop`)).status, 200);
  assert.equal((await api(server, 'POST', `/v1/sandboxes/${b.id}/start`)).status, 200);
  assert.equal((await sh(b, 'wc -l < /mnt/shared/b.log')).out.trim(), '200');

  // Forks and snapshots keep the mounts (the same volume, not a copy).
  const forks = await api(server, 'POST', `/v1/sandboxes/${a.id}/fork`, {});
  assert.equal(forks.status, 201, JSON.stringify(forks.body));
  const fork = { id: forks.body.data[0].id, publicHost: forks.body.data[0].public_host, authToken: forks.body.data[0].auth_token, body: forks.body.data[0] };
  assert.deepEqual(fork.body.volumes, a.body.volumes);
  await sh(fork, 'echo from-fork > /data/fork.txt');
  assert.equal((await sh(a, 'cat /data/fork.txt')).out, 'from-fork\n', 'the fork writes to the same volume');
  const snap = await api(server, 'POST', `/v1/sandboxes/${a.id}/snapshots`, {});
  assert.equal(snap.status, 201, JSON.stringify(snap.body));
  assert.deepEqual(snap.body.volumes, a.body.volumes);
  const fromSnap = await createSandbox(server, { snapshot_id: snap.body.id, template_name: undefined });
  assert.deepEqual(fromSnap.body.volumes, a.body.volumes);
  assert.equal((await sh(fromSnap, 'cat /data/fork.txt')).out, 'from-fork\n');
  for (const s of [fork, fromSnap]) assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${s.id}`)).status, 200);
  assert.equal((await api(server, 'DELETE', `/v1/snapshots/${snap.body.id}`)).status, 200);

  // Read-only mounts refuse writes.
  const ro = await createSandbox(server, { volumes: [{ name: 'shared', path: '/ro', read_only: true }] });
  const roWrite = await sh(ro, 'cat /ro/dir/f >/dev/null && touch /ro/x 2>&1; echo rc=$?');
  assert.match(roWrite.out, /Read-only file system/);
  assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${ro.id}`)).status, 200);

  // A third sandbox after the first two are gone still sees the files.
  assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${a.id}`)).status, 200);
  assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${b.id}`)).status, 200);
  const c = await createSandbox(server, { volumes: [{ name: 'shared', path: '/work/v' }] });
  const later = await sh(c, 'cat /work/v/dir/f; wc -l < /work/v/b.log');
  assert.deepEqual(later.out.trim().split('\n'), ['from-a', 'from-b', '200']);

  // Forced delete: its sandboxes are deleted first, then the volume, with nothing left on the host.
  const forced = await api(server, 'DELETE', '/v1/volumes/shared?force=true');
  assert.equal(forced.status, 200, JSON.stringify(forced.body));
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${c.id}`)).status, 404);
  assert.equal((await api(server, 'GET', `/v1/volumes/${vol.id}`)).status, 404);
  assert.deepEqual(traces(vol.id), []);

  // Deleted when nothing mounts it: gone at once, no mount, loop device or file left.
  const gone = await api(other, 'DELETE', '/v1/volumes/shared');
  assert.equal(gone.status, 200, JSON.stringify(gone.body));
  assert.deepEqual(traces(theirs.body.id), []);
  assert.equal((await api(other, 'GET', '/v1/volumes')).body.data.length, 0);
});

test("volumes count in the organization's max_total_disk_gb", async () => {
  operator(['orgs', 'limits', 'volume-outsider', '--max-total-disk-gb', '3']);
  const r = await api(other, 'POST', '/v1/volumes', { name: 'big', size_gb: 4 });
  assert.equal(r.status, 409, JSON.stringify(r.body));
  assert.equal(r.body.code, 'ORG_QUOTA_EXCEEDED');
});

test("a mount path the sandbox made a symlink (a snapshot's files) stays inside the sandbox: nothing is mounted on the host", async (t) => {
  const hostTarget = join(server.dataDir, 'symlink-target');
  const made = await api(server, 'POST', '/v1/volumes', { name: 'sym', size_gb: 1 });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const src = await createSandbox(server);
  // Absolute and relative escapes toward a host directory, and one onto the runtime's own mounts.
  const ln = await sh(src, `ln -s ${hostTarget} /evil-abs && ln -s ../../../../../../..${hostTarget} /evil-rel && ln -s /.sb/agent /evil-sb`);
  assert.equal(ln.exit, 0, ln.err);
  const snap = await api(server, 'POST', `/v1/sandboxes/${src.id}/snapshots`, {});
  assert.equal(snap.status, 201, JSON.stringify(snap.body));
  for (const path of ['/evil-abs', '/evil-rel', '/evil-sb']) {
    const r = await api(server, 'POST', '/v1/sandboxes', { snapshot_id: snap.body.id, volumes: [{ name: 'sym', path }] });
    t.diagnostic(`${path}: ${r.status} ${r.status === 201 ? '' : JSON.stringify(r.body)}`);
    assert.ok(!existsSync(hostTarget), `${path}: nothing was made on the host at ${hostTarget}`);
    assert.deepEqual(mounts().filter((m) => m.target.startsWith(hostTarget) || m.target.includes('/.sb')), [], path);
    if (r.status === 201) {
      const sb = { id: r.body.id, publicHost: r.body.public_host, authToken: r.body.auth_token, body: r.body };
      // The sandbox works (its agent answers: the runtime's binds were not covered) and the volume is inside it.
      const seen = await sh(sb, 'echo ok');
      assert.equal(seen.out, 'ok\n', path);
      assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    } else {
      assert.ok(r.status >= 400 && r.status < 600, `${path}: ${r.status} ${JSON.stringify(r.body)}`);
    }
  }
  assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${src.id}`)).status, 200);
  assert.equal((await api(server, 'DELETE', `/v1/snapshots/${snap.body.id}`)).status, 200);
  assert.equal((await api(server, 'DELETE', '/v1/volumes/sym')).status, 200);
  assert.deepEqual(traces(made.body.id), []);
});
