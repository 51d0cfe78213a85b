import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { agent, api, createSandbox, startServer, TEST_DATA_DIR, type TestServer } from './harness.js';

// Issue 8, item 12: the database (every organization's env_vars), its WAL, build logs, uploaded
// files and template layers were readable by any local user. After real use, an unprivileged host
// user must be able to read none of them, also on an installation made before the fix.

const SECRET = `sekrit-${randomBytes(12).toString('hex')}`;
let server: TestServer;
/** A private layer store: hard links of the shared test layers, so its root's mode is ours to change. */
const layersDir = join(TEST_DATA_DIR, `layers-private-${randomBytes(4).toString('hex')}`);

/** Runs a command as nobody (uid/gid 65534, no supplementary groups), as any local user could. */
function asNobody(cmd: string): { status: number; stdout: string; stderr: string } {
  const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', 'sh', '-c', cmd], { encoding: 'utf8' });
  return { status: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

function mode(path: string): number {
  return statSync(path).mode & 0o7777;
}

/** Everything a local user can learn: files holding the secret, and every file it can read at all. */
function whatNobodySees(where: string[] = [server.dataDir, layersDir]): { withSecret: string[]; readable: string[] } {
  const dirs = where.join(' ');
  const withSecret = asNobody(`grep -rl -- '${SECRET}' ${dirs} 2>/dev/null; true`).stdout.split('\n').filter(Boolean);
  const readable = asNobody(`find ${dirs} -type f -readable 2>/dev/null; true`)
    .stdout.split('\n')
    .filter(Boolean)
    // The agent's runtime is bind-mounted into every sandbox: public by design, no tenant data.
    .filter((p) => !p.startsWith(join(server.dataDir, 'agent-runtime/')));
  return { withSecret, readable };
}

async function waitBuild(id: string): Promise<any> {
  for (const deadline = Date.now() + 600_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 300))) {
    const st = await api(server, 'GET', `/v1/templates/build/${id}/status`);
    if (st.body.status !== 'building') return st.body;
  }
  throw new Error(`build ${id} still running`);
}

function layerKind(dir: string): string {
  try {
    return JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8')).kind;
  } catch {
    return '';
  }
}

before(async () => {
  mkdirSync(layersDir, { mode: 0o755 });
  const shared = join(TEST_DATA_DIR, 'layers');
  // The cached base images only: layers other tests of this run built (one holds 800 000 files)
  // are not this test's, and linking them one by one took minutes.
  const kinds = new Set(['debian-rootfs', 'python-compat', 'skeleton']);
  const ids = readdirSync(shared).filter((n) => /^[0-9a-f]{64}$/.test(n) && kinds.has(layerKind(join(shared, n))));
  execFileSync('cp', ['-al', ...ids.map((n) => join(shared, n)), layersDir]);
  chmodSync(layersDir, 0o755);
  server = await startServer({ templates: ['base'], env: { SANDBOXD_LAYERS_DIR: layersDir, SANDBOXD_REGISTRY_URL: 'none' } });
});
after(async () => {
  await server?.stop();
  // Hard links only: removing them leaves the shared layers as they are.
  rmSync(layersDir, { recursive: true, force: true });
});

describe("a local user cannot read the service's secrets or tenants' data", () => {
  let templateId = '';

  test('after real use: a sandbox with a secret env var, an upload, a build that prints and bakes the secret', async () => {
    const sb = await createSandbox(server, { env_vars: { API_TOKEN: SECRET } });
    const echo = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', 'echo "$API_TOKEN" | tee /workspace/token.txt'] });
    assert.equal(echo.body.stdout, `${SECRET}\n`);

    const file = Buffer.from(`uploaded ${SECRET}\n`);
    const link = await api(server, 'POST', '/v1/templates/files/upload-link', {
      files: [{ path: 'cfg.txt', size: file.length, hash: `sha256:${createHash('sha256').update(file).digest('hex')}` }],
    });
    const u = link.body.upload_urls[0];
    assert.equal((await fetch(u.upload_url, { method: 'PUT', body: new Uint8Array(file) })).status, 200);
    const res = await api(server, 'POST', '/v1/templates/build', {
      alias: 'secretive',
      steps: [
        { type: 'from', image: 'debian:11' },
        { type: 'copy', file_id: u.file_id, dest: '/etc/app/' },
        { type: 'env', key: 'BAKED_TOKEN', value: SECRET },
        { type: 'run', command: `echo "printing $BAKED_TOKEN"; echo "$BAKED_TOKEN" > /baked.txt` },
      ],
    });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    templateId = res.body.template_id;
    const st = await waitBuild(res.body.build_id);
    assert.equal(st.status, 'active', JSON.stringify(st));
    const logs = await api(server, 'GET', `/v1/templates/build/${res.body.build_id}/logs`);
    assert.match(logs.body.logs, new RegExp(`printing ${SECRET}`), 'the secret is in the build log');
    // The COPY step read the upload (0600, root's) through its own staged copy.
    const sb2 = await createSandbox(server, { template_id: templateId });
    const cat = await agent(sb2, 'POST', '/commands/run', { command: 'sh', args: ['-c', 'cat /etc/app/cfg.txt /baked.txt; ls -l /etc/app/cfg.txt'] });
    assert.match(cat.body.stdout, new RegExp(`^uploaded ${SECRET}\n${SECRET}\n-rw-r--r-- 1 root root`));

    // The files that hold it all exist, and root can read the secret in them...
    const db = join(server.dataDir, 'sandboxd.db');
    for (const f of [db, `${db}-wal`, `${db}-shm`]) assert.ok(existsSync(f), f);
    assert.match(execFileSync('grep', ['-rl', SECRET, join(server.dataDir, 'build-logs')], { encoding: 'utf8' }), /build-logs\//);
    // ...and nobody else can.
    const seen = whatNobodySees();
    assert.deepEqual(seen.withSecret, [], 'files holding the secret that a local user can read');
    assert.deepEqual(seen.readable, [], 'files a local user can read');
    for (const f of [db, `${db}-wal`, `${db}-shm`]) assert.equal(mode(f), 0o600, f);
    for (const d of ['build-logs', 'blobs', 'keys', 'build-cache']) assert.equal(mode(join(server.dataDir, d)) & 0o077, 0, d);
    assert.equal(mode(layersDir), 0o700, 'the layer store');
    assert.equal(mode(server.dataDir), 0o711, 'the data directory stays searchable (crun needs it), not listable');
    assert.notEqual(asNobody(`cat ${db}`).status, 0);
    assert.notEqual(asNobody(`ls ${server.dataDir}`).status, 0);
  });

  test("a running build step's filesystem is closed to local users, though /proc/mounts shows where it is", async () => {
    const res = await api(server, 'POST', '/v1/templates/build', {
      alias: 'slow-step',
      steps: [
        { type: 'from', image: 'debian:11' },
        { type: 'run', command: `echo ${SECRET} > /in-progress.txt; touch /ready; sleep 6` },
      ],
    });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    // Where the step's root is mounted: any local user can read /proc/mounts.
    let rootfs = '';
    for (const deadline = Date.now() + 120_000; !rootfs; await new Promise((r) => setTimeout(r, 100))) {
      assert.ok(Date.now() < deadline, 'the step never started');
      const m = readFileSync('/proc/mounts', 'utf8')
        .split('\n')
        .map((l) => l.split(' ')[1] ?? '')
        .find((p) => p.startsWith(join(server.dataDir, 'steps/')) && p.endsWith('/rootfs'));
      if (m && existsSync(join(m, 'ready'))) rootfs = m;
    }
    assert.equal(readFileSync(join(rootfs, 'in-progress.txt'), 'utf8'), `${SECRET}\n`, 'root sees the step at work');
    const r = asNobody(`cat ${rootfs}/in-progress.txt; ls ${rootfs}`);
    assert.notEqual(r.status, 0);
    assert.ok(!r.stdout.includes(SECRET), r.stdout);
    assert.match(r.stderr, /Permission denied/);
    assert.equal((await waitBuild(res.body.build_id)).status, 'active');
  });

  test('an installation made before (0644 files, 0755 directories) is fixed at start, and keeps working', async () => {
    await server.shutdown();
    const db = join(server.dataDir, 'sandboxd.db');
    for (const f of [db, `${db}-wal`, `${db}-shm`]) if (existsSync(f)) chmodSync(f, 0o644);
    for (const d of ['build-logs', 'blobs', 'blobs/sha256', 'build-cache']) {
      chmodSync(join(server.dataDir, d), 0o755);
      for (const f of readdirSync(join(server.dataDir, d), { withFileTypes: true })) if (f.isFile()) chmodSync(join(server.dataDir, d, f.name), 0o644);
    }
    chmodSync(layersDir, 0o755);
    chmodSync(server.dataDir, 0o755);
    // (The data directory alone: with the layer store open too, grep would read every layer, ~100 s.)
    assert.notDeepEqual(whatNobodySees([server.dataDir]).withSecret, [], 'the old modes leaked the secret');

    await server.restart();
    const seen = whatNobodySees();
    assert.deepEqual(seen.withSecret, []);
    assert.deepEqual(seen.readable, []);
    assert.equal(mode(db), 0o600);
    assert.equal(mode(layersDir), 0o700);
    assert.equal(mode(server.dataDir), 0o711);
    const log = execFileSync('cat', [server.logFile], { encoding: 'utf8' });
    assert.match(log, /sandboxd\.db: mode 644 → 600/, 'the fix is logged');
    const sb = await createSandbox(server, { template_id: templateId, env_vars: { API_TOKEN: SECRET } });
    const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', 'cat /baked.txt; echo "$API_TOKEN"'] });
    assert.equal(r.body.stdout, `${SECRET}\n${SECRET}\n`);
    assert.deepEqual(whatNobodySees().withSecret, []);
  });
});
