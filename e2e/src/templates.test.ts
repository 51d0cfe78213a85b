import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { api, agent, createSandbox, startServer, REPO_ROOT, type TestServer } from './harness.js';
import { startRegistry, pushBlob, pushManifest, type TestRegistry } from '../../packages/server/dist/testing/registry-fixtures.js';
import { writeBusyboxImage } from '../../packages/server/dist/testing/oci-fixtures.js';

let server: TestServer;
const scratch = mkdtempSync(join(tmpdir(), 'sbd-tpl-'));
before(async () => {
  server = await startServer({ templates: ['base'], env: { SANDBOXD_REGISTRY_URL: 'none', SANDBOXD_BUILDS_PER_HOUR: '1000', SANDBOXD_BUILDS_PER_DAY: '1000' } });
});
after(async () => {
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const bearer = () => ({ 'x-api-key': '', authorization: `Bearer ${server.apiKey}` });

async function put(url: string, body: Buffer, headers: Record<string, string> = {}) {
  const res = await fetch(url, { method: 'PUT', body: new Uint8Array(body), headers: { 'content-type': 'application/octet-stream', ...headers } });
  return { status: res.status, body: (await res.json()) as any };
}

async function uploadFile(path: string, content: Buffer): Promise<string> {
  const link = await api(server, 'POST', '/v1/templates/files/upload-link', { files: [{ path, size: content.length, hash: `sha256:${sha(content)}` }] }, bearer());
  assert.equal(link.status, 200, JSON.stringify(link.body));
  const u = link.body.upload_urls[0];
  assert.match(u.upload_url, /^http:\/\/127\.0\.0\.1:\d+\/v1\/templates\/files\/upload\//);
  const res = await put(u.upload_url, content);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return u.file_id as string;
}

async function waitBuild(id: string, timeoutMs = 600_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const st = await api(server, 'GET', `/v1/templates/build/${id}/status`, undefined, bearer());
    assert.equal(st.status, 200, JSON.stringify(st.body));
    if (st.body.status !== 'building') return st.body;
    if (Date.now() > deadline) throw new Error(`build ${id} still running`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function build(body: Record<string, unknown>): Promise<{ buildId: string; templateId: string; status: any }> {
  const res = await api(server, 'POST', '/v1/templates/build', body, bearer());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assert.equal(res.body.logs_url, `/v1/templates/build/${res.body.build_id}/logs`);
  assert.ok(res.body.request_id);
  return { buildId: res.body.build_id, templateId: res.body.template_id, status: await waitBuild(res.body.build_id) };
}

async function run(sb: { publicHost: string; authToken: string }, cmd: string) {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', cmd], timeout: 60 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body as { stdout: string; stderr: string; exit_code: number };
}

describe('uploads', () => {
  test('bad metadata is 400 Invalid file metadata', async () => {
    for (const files of [
      [{ path: 'a', size: 1, hash: 'md5:abc' }],
      [{ path: 'a', size: 200 * 1024 * 1024, hash: `sha256:${'a'.repeat(64)}` }],
      Array.from({ length: 101 }, (_, i) => ({ path: `f${i}`, size: 1, hash: `sha256:${'b'.repeat(64)}` })),
      'nope',
    ]) {
      const res = await api(server, 'POST', '/v1/templates/files/upload-link', { files }, bearer());
      assert.equal(res.status, 400);
      assert.equal(res.body.error, 'Invalid file metadata');
    }
    const noKey = await api(server, 'POST', '/v1/templates/files/upload-link', { files: [] }, { 'x-api-key': '' });
    assert.equal(noKey.status, 401);
    assert.equal(noKey.body.error, 'Unauthorized');
    assert.ok(noKey.body.message);
  });

  test('a PUT with a wrong size or hash, or a tampered or expired URL, stores nothing', async () => {
    const content = Buffer.from('the real content\n');
    const link = await api(server, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'x.txt', size: content.length, hash: `sha256:${sha(content)}` }] }, bearer());
    const url: string = link.body.upload_urls[0].upload_url;
    assert.equal(link.body.upload_urls[0].present, false);
    assert.equal((await put(url, Buffer.from('short'))).status, 400);
    assert.equal((await put(url, Buffer.from('the fake content\n'))).status, 400, 'same size, wrong hash');
    const token = url.split('/').pop()!;
    const [payload, mac] = token.split('.');
    const claim = JSON.parse(Buffer.from(payload!, 'base64url').toString());
    const bigger = Buffer.from(JSON.stringify({ ...claim, s: 999 })).toString('base64url');
    assert.equal((await put(url.replace(token, `${bigger}.${mac}`), content)).status, 403, 'tampered');
    const key = Buffer.from(readFileSync(join(server.dataDir, 'keys/upload-hmac.key'), 'utf8').trim(), 'hex');
    const expiredPayload = Buffer.from(JSON.stringify({ ...claim, e: Math.floor(Date.now() / 1000) - 1 })).toString('base64url');
    const expiredMac = createHmac('sha256', key).update(expiredPayload).digest('base64url');
    const expired = await put(url.replace(token, `${expiredPayload}.${expiredMac}`), content);
    assert.equal(expired.status, 403);
    assert.match(expired.body.message, /expired/);
    const again = await api(server, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'x.txt', size: content.length, hash: `sha256:${sha(content)}` }] }, bearer());
    assert.equal(again.body.upload_urls[0].present, false, 'nothing was stored');
    assert.equal((await put(url, content)).status, 200);
    const dedup = await api(server, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'y.txt', size: content.length, hash: `sha256:${sha(content)}` }] }, bearer());
    assert.equal(dedup.body.upload_urls[0].present, true, 'a known hash needs no upload');
    assert.equal(dedup.body.upload_urls[0].file_id, link.body.upload_urls[0].file_id);
  });
});

describe('builds', () => {
  test('validation errors of the spec are 400 Invalid template definition', async () => {
    for (const body of [
      { alias: 'v1', steps: [{ type: 'run', command: 'true' }] },
      { alias: 'v2', cpu: 65, steps: [{ type: 'from', image: 'debian:11' }] },
      { alias: 'v3', memory: 64, steps: [{ type: 'from', image: 'debian:11' }] },
      { alias: 'v4', diskGB: 0, steps: [{ type: 'from', image: 'debian:11' }] },
      { alias: 'v5', steps: [{ type: 'from', image: 'centos:7' }] },
      { steps: [{ type: 'from', image: 'debian:11' }] },
    ]) {
      const res = await api(server, 'POST', '/v1/templates/build', body, bearer());
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(res.body.error, 'Invalid template definition');
      assert.ok(res.body.message);
    }
  });

  test('apt, run, copy (file and tarball), env, workdir: a sandbox sees all of it, with the template resources', async () => {
    const data = Buffer.from(Array.from({ length: 5000 }, (_, i) => i % 251));
    const fileId = await uploadFile('data.bin', data);
    // The newer client shape: a gzip tarball named by files_hash, unpacked by its COPY step.
    const ctx = join(scratch, 'ctx');
    mkdirSync(join(ctx, 'app'), { recursive: true });
    writeFileSync(join(ctx, 'app/run.sh'), '#!/bin/sh\necho from-app\n');
    chmodSync(join(ctx, 'app/run.sh'), 0o755);
    writeFileSync(join(ctx, 'app/secret.txt'), 'private\n');
    chmodSync(join(ctx, 'app/secret.txt'), 0o600);
    const tgz = execFileSync('tar', ['-czf', '-', '-C', ctx, 'app']);
    const filesHash = sha(tgz).slice(0, 40);
    const link = await api(server, 'POST', '/v1/templates/files/upload-link', { files_hash: filesHash, content_length: tgz.length }, bearer());
    assert.equal(link.status, 200);
    assert.equal(link.body.present, false);
    assert.equal((await put(link.body.upload_url, tgz, { 'content-type': 'application/gzip' })).status, 200);

    const steps = [
      { type: 'from', image: 'python:3.11' },
      { type: 'apt', packages: ['jq'] },
      { type: 'run', command: 'echo built > /opt/marker && python3 --version > /opt/pyver' },
      { type: 'copy', file_id: fileId, dest: '/opt/data/' },
      { type: 'COPY', args: ['app', '/srv/app/'], filesHash },
      { type: 'env', key: 'FOO', value: 'bar baz' },
      { type: 'workdir', path: '/srv/app' },
    ];
    const first = await build({ alias: 'full', cpu: 1, memory: 256, diskGB: 1, steps });
    assert.equal(first.status.status, 'active', JSON.stringify(first.status));
    assert.equal(first.status.progress, 100);
    assert.ok(first.status.build_duration_ms > 0);

    const logs = await api(server, 'GET', `/v1/templates/build/${first.templateId}/logs?offset=0`, undefined, bearer());
    assert.equal(logs.status, 200);
    assert.ok(logs.body.logs.includes('jq'), 'apt output is in the logs');
    assert.equal(typeof logs.body.offset, 'number');
    const tail = await api(server, 'GET', `/v1/templates/build/${first.buildId}/logs?offset=${logs.body.offset}`, undefined, bearer());
    assert.deepEqual([tail.body.logs, tail.body.complete, tail.body.status], ['', true, 'active']);
    const sse = await fetch(`${server.baseUrl}/v1/templates/build/${first.buildId}/logs`, { headers: { accept: 'text/event-stream', 'x-api-key': server.apiKey } });
    const text = await sse.text();
    assert.match(text, /event: log\ndata: \{/);
    assert.match(text, /event: done\ndata: \{"status":"active"\}/);

    const tpl = await api(server, 'GET', `/v1/templates/${first.templateId}`);
    assert.deepEqual([tpl.body.status, tpl.body.is_active, tpl.body.name], ['active', true, 'full']);
    assert.deepEqual(tpl.body.default_resources, { vcpu: 1, memory_mb: 256, disk_gb: 1 });

    const sb = await createSandbox(server, { template_id: first.templateId });
    assert.deepEqual(sb.body.resources, { vcpu: 1, memory_mb: 256, disk_gb: 1, disk_mb: 1024 });
    assert.equal((await run(sb, 'cat /opt/marker')).stdout, 'built\n');
    assert.match((await run(sb, 'cat /opt/pyver')).stdout, /Python 3\.11/);
    assert.match((await run(sb, 'jq --version')).stdout, /jq-/);
    assert.equal((await run(sb, 'sha256sum < /opt/data/data.bin')).stdout.split(' ')[0], sha(data));
    assert.equal((await run(sb, 'stat -c %a /srv/app/run.sh /srv/app/secret.txt')).stdout, '755\n600\n');
    assert.equal((await run(sb, '/srv/app/run.sh')).stdout, 'from-app\n');
    assert.equal((await run(sb, 'printf %s "$FOO"')).stdout, 'bar baz');
    assert.equal((await run(sb, 'pwd')).stdout, '/srv/app\n', 'the template workdir is the default');
    // The template's disk and memory are enforced.
    const df = Number((await run(sb, "df -B1 --output=size / | tail -1")).stdout.trim());
    assert.ok(df > 0.5e9 && df <= 1.1e9, `disk ${df}`);
    const oom = await run(sb, 'python3 -c "b = bytearray(600 * 1024 * 1024); print(len(b))"');
    assert.notEqual(oom.exit_code, 0, 'allocating past memory_mb fails');

    // Cache: an unchanged rebuild reuses every layer; a changed step rebuilds from there; skipCache rebuilds all.
    const again = await build({ alias: 'full', cpu: 1, memory: 256, diskGB: 1, steps, update: true });
    assert.equal(again.status.status, 'active');
    const tpl2 = await api(server, 'GET', `/v1/templates/${first.templateId}`);
    assert.deepEqual(tpl2.body.layers, tpl.body.layers, 'fully cached rebuild: same layers');
    const changed = steps.map((s) => (s.type === 'run' ? { ...s, command: `${s.command} && echo v2 >> /opt/marker` } : s));
    await build({ alias: 'full', cpu: 1, memory: 256, diskGB: 1, steps: changed, update: true });
    const tpl3 = await api(server, 'GET', `/v1/templates/${first.templateId}`);
    const [old, neu] = [[...tpl.body.layers].reverse(), [...tpl3.body.layers].reverse()];
    // bottom-up: the base image's layers and the apt layer are reused; run, copy, COPY and the layer
    // that creates the workdir (the top four) are rebuilt.
    const changedFrom = old.length - 4;
    assert.equal(neu.length, old.length);
    assert.deepEqual(neu.slice(0, changedFrom), old.slice(0, changedFrom), `layers below the change reused: ${JSON.stringify({ old, neu })}`);
    for (let i = changedFrom; i < old.length; i++) assert.notEqual(neu[i], old[i], `layer ${i} rebuilt`);
    const aptIdx = changedFrom - 1;
    await build({ alias: 'full', cpu: 1, memory: 256, diskGB: 1, steps: changed, update: true, skipCache: true });
    const tpl4 = await api(server, 'GET', `/v1/templates/${first.templateId}`);
    const fresh = [...tpl4.body.layers].reverse();
    for (let i = aptIdx; i < fresh.length; i++) assert.ok(!neu.includes(fresh[i]), 'skipCache rebuilt every step layer');

    // Delete: in use → 409; after its sandbox is gone → deleted; built-ins are protected.
    const inUse = await api(server, 'DELETE', `/v1/templates/${first.templateId}`);
    assert.equal(inUse.status, 409);
    assert.equal(inUse.body.code, 'TEMPLATE_IN_USE');
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    assert.equal((await api(server, 'DELETE', '/v1/templates/full')).body.status, 'deleted');
    assert.equal((await api(server, 'GET', `/v1/templates/${first.templateId}`)).status, 404);
    assert.equal((await api(server, 'DELETE', '/v1/templates/base')).status, 403);
  });

  test('an existing alias is 409; a failing step fails the build with its output; the template is unusable', async () => {
    const ok = await build({ alias: 'dup', steps: [{ type: 'from', image: 'debian:11' }, { type: 'run', command: 'true' }] });
    assert.equal(ok.status.status, 'active');
    const dup = await api(server, 'POST', '/v1/templates/build', { alias: 'dup', steps: [{ type: 'from', image: 'debian:11' }] }, bearer());
    assert.equal(dup.status, 409);
    assert.equal(dup.body.error, 'Template alias already exists');
    assert.match(dup.body.message, /dup/);

    const bad = await build({ alias: 'fails', steps: [{ type: 'from', image: 'debian:11' }, { type: 'run', command: 'echo about-to-fail; exit 3' }] });
    assert.equal(bad.status.status, 'failed');
    assert.ok(bad.status.error_message);
    const logs = await api(server, 'GET', `/v1/templates/build/${bad.buildId}/logs`, undefined, bearer());
    assert.match(logs.body.logs, /about-to-fail/);
    assert.equal(logs.body.complete, true);
    const create = await api(server, 'POST', '/v1/sandboxes', { template_name: 'fails' });
    assert.equal(create.status, 409);
    assert.equal(create.body.code, 'TEMPLATE_NOT_READY');
  });

  test('steps that try to escape or exhaust the build sandbox fail inside it only', async () => {
    const mount = await build({ alias: 'escape', steps: [{ type: 'from', image: 'debian:11' }, { type: 'run', command: 'mount -t tmpfs x /mnt' }] });
    assert.equal(mount.status.status, 'failed');
    const mem = await build({
      alias: 'exhaust',
      memory: 128,
      steps: [{ type: 'from', image: 'python:3.11' }, { type: 'run', command: 'python3 -c "b = bytearray(1024 * 1024 * 1024)"' }],
    });
    assert.equal(mem.status.status, 'failed');
    const forkLoop = [
      'import os, sys, time',
      'n = 0',
      'try:',
      '    while n < 5000:',
      '        if os.fork() == 0:',
      '            time.sleep(20)',
      '            os._exit(0)',
      '        n += 1',
      'except OSError as e:',
      '    print("fork stopped at", n, e)',
      '    sys.exit(7)',
      'print("no limit", n)',
    ].join('\n');
    const bomb = await build({ alias: 'forkbomb', steps: [{ type: 'from', image: 'python:3.11' }, { type: 'run', command: `python3 -c '${forkLoop}'` }] });
    assert.equal(bomb.status.status, 'failed', 'the pids limit stops it');
    const bombLogs = await api(server, 'GET', `/v1/templates/build/${bomb.buildId}/logs`, undefined, bearer());
    assert.match(bombLogs.body.logs, /fork stopped at \d+/);
    // A step writes to a disk of its own of diskGB: past it, ENOSPC inside the step, nowhere else.
    const hog = await build({
      alias: 'disk-hog',
      diskGB: 1,
      steps: [{ type: 'from', image: 'debian:11' }, { type: 'run', command: 'dd if=/dev/zero of=/big bs=1M count=2500 status=none; echo "dd exit $?"; exit 9' }],
    });
    assert.equal(hog.status.status, 'failed');
    const hogLogs = await api(server, 'GET', `/v1/templates/build/${hog.buildId}/logs`, undefined, bearer());
    assert.match(hogLogs.body.logs, /No space left on device/);
    assert.match(hogLogs.body.logs, /dd exit 1/);
    assert.match(hog.status.error_message, /exit status 9/, 'the step itself went on after ENOSPC');
    // A step that prints without end: the build's log stops at its cap, the build goes on.
    const loud = await build({
      alias: 'loud',
      skipCache: true,
      steps: [{ type: 'from', image: 'debian:11' }, { type: 'run', command: 'head -c 40000000 /dev/zero | tr "\\0" x | fold -w 1000; echo done-$((6*7))' }],
    });
    assert.equal(loud.status.status, 'active', 'the build succeeded');
    const logFile = join(server.dataDir, 'build-logs', `${loud.buildId}.log`);
    const size = statSync(logFile).size;
    assert.ok(size > 15.9 * 1024 * 1024 && size < 16.1 * 1024 * 1024, `log file is ${size} bytes`);
    const text = readFileSync(logFile, 'utf8');
    assert.match(text, /log reached 16 MiB; later output is not kept/);
    assert.doesNotMatch(text, /done-42/, 'what came after the cap is not kept');
    assert.match(text, /succeeded/, "the service's own last line is kept");
    assert.equal((await api(server, 'GET', '/health')).status, 200, 'the service is fine');
  });

  test('a base image none of the sources can provide fails at once, saying how to provide it', async () => {
    const res = await build({ alias: 'noimage', steps: [{ type: 'from', image: 'ubuntu:22.04' }] });
    assert.equal(res.status.status, 'failed');
    assert.match(res.status.error_message, /images import|registry/i);
  });
});

describe('base images from an archive and from a registry', () => {
  let registry: TestRegistry | undefined;
  after(async () => registry?.stop());

  test('sandboxd images import, then build from it', async () => {
    const archive = join(scratch, 'busybox.tar');
    mkdirSync(join(scratch, 'import'));
    writeBusyboxImage(join(scratch, 'import'), 'node:20', archive);
    execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'images', 'import', 'node:20', archive], { env: server.env, stdio: 'pipe' });
    const res = await build({ alias: 'from-archive', steps: [{ type: 'from', image: 'node:20' }, { type: 'run', command: 'echo imported > /mark' }] });
    assert.equal(res.status.status, 'active', JSON.stringify(res.status));
    const sb = await createSandbox(server, { template_name: 'from-archive' });
    assert.equal((await run(sb, 'cat /mark; echo $IMAGE_MARK')).stdout, 'imported\nbusybox\n');
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test('pull from a real local registry', async () => {
    const dir = join(scratch, 'registry');
    mkdirSync(dir, { recursive: true });
    registry = await startRegistry(dir);
    // Push the busybox image as library/alpine:3.18 with plain HTTP PUTs.
    mkdirSync(join(scratch, 'pull'));
    const img = writeBusyboxImage(join(scratch, 'pull'), 'alpine:3.18', join(scratch, 'bb2.tar'));
    const layer = await pushBlob(registry, 'library/alpine', img.layers[0]!);
    const config = await pushBlob(registry, 'library/alpine', img.config);
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: config.digest, size: config.size },
        layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar', digest: layer.digest, size: layer.size }],
      }),
    );
    await pushManifest(registry, 'library/alpine', '3.18', 'application/vnd.oci.image.manifest.v1+json', manifest);
    execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'images', 'pull', 'alpine:3.18'], {
      env: { ...server.env, SANDBOXD_REGISTRY_URL: registry.url },
      stdio: 'pipe',
    });
    const res = await build({ alias: 'from-registry', steps: [{ type: 'from', image: 'alpine:3.18' }, { type: 'run', command: 'echo pulled > /mark' }] });
    assert.equal(res.status.status, 'active', JSON.stringify(res.status));
  });
});

describe('build rate limit', () => {
  test('past the hourly limit: 429 with retry_after, still after a restart', async () => {
    const limited = await startServer({ templates: ['base'], env: { SANDBOXD_BUILDS_PER_HOUR: '2', SANDBOXD_REGISTRY_URL: 'none' } });
    try {
      const b = { 'x-api-key': limited.apiKey };
      for (const alias of ['r1', 'r2']) {
        assert.equal((await api(limited, 'POST', '/v1/templates/build', { alias, steps: [{ type: 'from', image: 'ubuntu:20.04' }] }, b)).status, 202);
      }
      const third = await api(limited, 'POST', '/v1/templates/build', { alias: 'r3', steps: [{ type: 'from', image: 'ubuntu:20.04' }] }, b);
      assert.equal(third.status, 429);
      assert.equal(third.body.code, 'RATE_LIMIT_EXCEEDED');
      assert.ok(third.body.retry_after > 0);
      assert.ok(third.headers.get('retry-after'));
      await limited.shutdown();
      await limited.restart();
      assert.equal((await api(limited, 'POST', '/v1/templates/build', { alias: 'r4', steps: [{ type: 'from', image: 'ubuntu:20.04' }] }, b)).status, 429);
    } finally {
      await limited.stop();
    }
  });
});
