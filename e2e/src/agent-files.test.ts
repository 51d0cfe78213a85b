import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, openAsBlob } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agent, api, createSandbox, run, startAgentServer, stopServer, type CreatedSandbox, type TestServer } from './agent-support.js';

// /files/* in real sandboxes, through the gateway.

let server: TestServer;
let sb: CreatedSandbox;
let tmp: string;

before(async () => {
  server = await startAgentServer();
  sb = await createSandbox(server, { template_name: 'base' });
  tmp = await mkdtemp(join(tmpdir(), 'agent-files-'));
});
after(async () => {
  await stopServer(server);
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

const q = (path: string) => `?path=${encodeURIComponent(path)}`;
const auth = () => ({ authorization: `Bearer ${sb.authToken}` });

async function upload(target: CreatedSandbox, localFile: string, remotePath: string, name = 'file.bin'): Promise<Response> {
  const form = new FormData();
  // The official client sends the file part first and the path after it.
  form.append('file', await openAsBlob(localFile), name);
  form.append('path', remotePath);
  return fetch(new URL('/files/upload', target.publicHost), { method: 'POST', body: form, headers: { authorization: `Bearer ${target.authToken}` } });
}

async function makeFile(path: string, bytes: number): Promise<string> {
  const h = createHash('sha256');
  const out = createWriteStream(path);
  for (let left = bytes; left > 0; ) {
    const chunk = randomBytes(Math.min(left, 4 << 20));
    h.update(chunk);
    if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
    left -= chunk.length;
  }
  await new Promise<void>((r, j) => out.end((err?: Error | null) => (err ? j(err) : r())));
  return h.digest('hex');
}

async function downloadHash(target: CreatedSandbox, path: string): Promise<{ hash: string; length: number; headers: Headers }> {
  const res = await fetch(new URL(`/files/download${q(path)}`, target.publicHost), { headers: { authorization: `Bearer ${target.authToken}` } });
  assert.equal(res.status, 200);
  const h = createHash('sha256');
  let length = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    h.update(chunk);
    length += chunk.length;
  }
  return { hash: h.digest('hex'), length, headers: res.headers };
}

async function agentRss(): Promise<number> {
  return (await agent(sb, 'GET', '/metrics/snapshot')).body.agent.rss_bytes;
}

describe('files: read, write, list, exists, remove, mkdir', () => {
  test('write text with a mode and parents, read it back, list it with both field spellings', async () => {
    const w = await agent(sb, 'POST', '/files/write', { path: '/workspace/a/b/hello.txt', content: 'héllo\n', mode: '0600' });
    assert.equal(w.status, 200);
    assert.deepEqual(w.body, { success: true, path: '/workspace/a/b/hello.txt', size: 7 });
    const r = await agent(sb, 'GET', `/files/read${q('/workspace/a/b/hello.txt')}`);
    assert.equal(r.status, 200);
    assert.equal(r.body.content, 'héllo\n');
    const l = await agent(sb, 'GET', `/files/list${q('/workspace/a/b')}`);
    assert.equal(l.status, 200);
    assert.equal(l.body.path, '/workspace/a/b');
    assert.equal(l.body.count, 1);
    const [e] = l.body.files;
    assert.equal(e.name, 'hello.txt');
    assert.equal(e.path, '/workspace/a/b/hello.txt');
    assert.equal(e.size, 7);
    assert.equal(e.is_dir, false);
    assert.equal(e.is_directory, false);
    assert.equal(e.permissions, '-rw-------');
    assert.equal(e.mode, '0600');
    assert.match(e.modified, /Z$/);
    assert.equal(e.modified, e.modified_time);
    const up = await agent(sb, 'GET', `/files/list${q('/workspace/a')}`);
    assert.equal(up.body.files[0].is_dir, true);
    const perms = await run(sb, 'stat', ['-c', '%a %s', '/workspace/a/b/hello.txt']);
    assert.equal(perms.stdout, '600 7\n');
  });

  test('base64 writes and reads, binary refused as text, big files refused as JSON', async () => {
    const bytes = Buffer.from([0, 1, 2, 253, 254, 255]);
    const w = await agent(sb, 'POST', '/files/write', { path: '/workspace/bin.dat', content: bytes.toString('base64'), encoding: 'base64' });
    assert.equal(w.body.size, 6);
    assert.equal((await run(sb, 'od', ['-An', '-tu1', '/workspace/bin.dat'])).stdout.trim().split(/\s+/).join(','), '0,1,2,253,254,255');
    const asText = await agent(sb, 'GET', `/files/read${q('/workspace/bin.dat')}`);
    assert.equal(asText.status, 400);
    assert.equal(asText.body.code, 'BINARY_FILE');
    assert.match(asText.body.message, /files\/download/);
    const asB64 = await agent(sb, 'GET', `/files/read${q('/workspace/bin.dat')}&encoding=base64`);
    assert.equal(asB64.body.content, bytes.toString('base64'));
    await run(sb, 'sh', ['-c', 'head -c 11534336 /dev/zero | tr "\\0" a > /workspace/big.txt']);
    const big = await agent(sb, 'GET', `/files/read${q('/workspace/big.txt')}`);
    assert.equal(big.status, 413);
    assert.equal(big.body.code, 'FILE_TOO_LARGE');
    assert.match(big.body.message, /files\/download/);
  });

  test('clear 4xx errors: missing paths, directories where files are expected and the reverse', async () => {
    const missing = await agent(sb, 'GET', `/files/read${q('/workspace/nope.txt')}`);
    assert.equal(missing.status, 404);
    assert.equal(missing.body.code, 'FILE_NOT_FOUND');
    assert.equal(missing.body.path, '/workspace/nope.txt');
    assert.doesNotMatch(missing.body.message, /sandbox/i, 'real clients read "sandbox ... not found" as an expired sandbox');
    assert.equal((await agent(sb, 'GET', `/files/download${q('/workspace/nope.txt')}`)).status, 404);
    assert.equal((await agent(sb, 'GET', `/files/list${q('/workspace/nope')}`)).body.code, 'FILE_NOT_FOUND');
    assert.equal((await agent(sb, 'DELETE', `/files/remove${q('/workspace/nope')}`)).status, 404);
    const dirRead = await agent(sb, 'GET', `/files/read${q('/workspace')}`);
    assert.equal(dirRead.status, 400);
    assert.equal(dirRead.body.code, 'NOT_A_FILE');
    assert.equal((await agent(sb, 'GET', `/files/download${q('/workspace')}`)).body.code, 'NOT_A_FILE');
    assert.equal((await agent(sb, 'POST', '/files/write', { path: '/workspace', content: 'x' })).body.code, 'NOT_A_FILE');
    const fileList = await agent(sb, 'GET', `/files/list${q('/workspace/bin.dat')}`);
    assert.equal(fileList.status, 400);
    assert.equal(fileList.body.code, 'NOT_A_DIRECTORY');
    assert.equal((await agent(sb, 'POST', '/files/write', { path: '/workspace/bin.dat/under', content: 'x' })).body.code, 'NOT_A_DIRECTORY');
    assert.equal((await agent(sb, 'POST', '/files/write', { content: 'x' })).status, 400);
    assert.equal((await agent(sb, 'POST', '/files/write', { path: '/workspace/m', content: 'x', mode: 'rwx' })).status, 400);
    const ro = await agent(sb, 'POST', '/files/write', { path: '/proc/version', content: 'x' });
    assert.equal(ro.status, 403, JSON.stringify(ro.body));
    assert.equal(ro.body.code, 'PERMISSION_DENIED');
    // A pseudo file that fails on read (EIO): PID 1's memory at offset 0.
    const mem = await agent(sb, 'GET', `/files/read${q('/proc/1/mem')}`);
    assert.equal(mem.status, 400, JSON.stringify(mem.body));
    assert.equal(mem.body.code, 'NOT_A_FILE');
    // The agent's own memory is closed even to the agent (it runs non-dumpable): a 403, not a 500.
    const own = await agent(sb, 'GET', `/files/read${q('/proc/self/mem')}`);
    assert.equal(own.status, 403, JSON.stringify(own.body));
    assert.equal(own.body.code, 'PERMISSION_DENIED');
  });

  test('exists, mkdir (with parents), remove (recursive)', async () => {
    assert.deepEqual((await agent(sb, 'GET', `/files/exists${q('/workspace/x/y/z')}`)).body, { exists: false, path: '/workspace/x/y/z' });
    const mk = await agent(sb, 'POST', '/files/mkdir', { path: '/workspace/x/y/z' });
    assert.equal(mk.status, 200);
    assert.equal(mk.body.success, true);
    assert.equal((await agent(sb, 'POST', '/files/mkdir', { path: '/workspace/x/y/z' })).status, 200, 'idempotent');
    const ex = await agent(sb, 'GET', `/files/exists${q('/workspace/x/y/z')}`);
    assert.equal(ex.body.exists, true);
    assert.equal(ex.body.is_dir, true);
    await agent(sb, 'POST', '/files/write', { path: '/workspace/x/y/z/f.txt', content: 'f' });
    assert.equal((await agent(sb, 'POST', '/files/mkdir', { path: '/workspace/x/y/z/f.txt' })).status, 409);
    const rm1 = await agent(sb, 'DELETE', `/files/remove${q('/workspace/x')}`);
    assert.equal(rm1.status, 200);
    assert.equal((await agent(sb, 'GET', `/files/exists${q('/workspace/x')}`)).body.exists, false);
    assert.equal((await agent(sb, 'DELETE', `/files/remove${q('/')}`)).status, 400);
  });

  test('paths with spaces and unicode, in query strings (+ and %20) and bodies', async () => {
    const path = '/workspace/dïr with spaces/ünïcödé ✓ file.txt';
    assert.equal((await agent(sb, 'POST', '/files/write', { path, content: 'ok' })).status, 200);
    const plus = `/files/read?path=${encodeURIComponent(path).replace(/%20/g, '+')}`;
    assert.equal((await agent(sb, 'GET', plus)).body.content, 'ok');
    const list = await agent(sb, 'GET', `/files/list${q('/workspace/dïr with spaces')}`);
    assert.equal(list.body.files[0].name, 'ünïcödé ✓ file.txt');
    const dl = await fetch(new URL(`/files/download${q(path)}`, sb.publicHost), { headers: auth() });
    assert.equal(await dl.text(), 'ok');
    assert.match(dl.headers.get('content-disposition')!, /filename\*=UTF-8''%C3%BCn%C3%AFc%C3%B6d%C3%A9/);
    assert.equal((await run(sb, 'cat', [path])).stdout, 'ok');
  });

  test('relative paths start at /workspace', async () => {
    await agent(sb, 'POST', '/files/write', { path: 'rel/r.txt', content: 'relative' });
    assert.equal((await run(sb, 'cat', ['/workspace/rel/r.txt'])).stdout, 'relative');
  });
});

describe('files: upload and download', () => {
  test('a 200 MB upload and download: sha256 equal on both sides, agent memory flat', async () => {
    const local = join(tmp, 'big.bin');
    const localHash = await makeFile(local, 200 * 1024 * 1024);
    const rssBefore = await agentRss();
    let peak = rssBefore;
    let upPeak = rssBefore;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peak = Math.max(peak, await agentRss());
        await new Promise<void>((r) => setTimeout(r, 50));
      }
    })();
    try {
      const started = performance.now();
      const res = await upload(sb, local, '/workspace/up/big file.bin', 'big.bin');
      const upMs = performance.now() - started;
      upPeak = peak;
      assert.equal(res.status, 200, await res.clone().text());
      assert.deepEqual(await res.json(), { success: true, path: '/workspace/up/big file.bin', size: 200 * 1024 * 1024 });
      const inside = await run(sb, 'sha256sum', ['/workspace/up/big file.bin'], { timeout: 120 });
      assert.equal(inside.stdout.split(' ')[0], localHash, 'sha256 inside the sandbox');
      const t2 = performance.now();
      const dl = await downloadHash(sb, '/workspace/up/big file.bin');
      const downMs = performance.now() - t2;
      assert.equal(dl.hash, localHash, 'sha256 of the download');
      assert.equal(dl.length, 200 * 1024 * 1024);
      assert.equal(dl.headers.get('content-length'), String(200 * 1024 * 1024));
      assert.equal(dl.headers.get('content-type'), 'application/octet-stream');
      console.log(`# 200 MB upload ${(200 / (upMs / 1000)).toFixed(0)} MB/s, download ${(200 / (downMs / 1000)).toFixed(0)} MB/s`);
    } finally {
      sampling = false;
      await sampler;
    }
    const growth = (peak - rssBefore) / (1024 * 1024);
    const mib = (n: number) => (n / 1048576).toFixed(1);
    console.log(`# agent rss ${mib(rssBefore)} MiB before, peak +${growth.toFixed(1)} MiB (upload +${mib(upPeak - rssBefore)})`);
    assert.ok(growth < 48, `agent memory grew by ${growth.toFixed(1)} MiB while moving 400 MB`);
  });

  test('upload into a directory keeps the file name; a raw body with ?path= works too; errors are 4xx', async () => {
    const local = join(tmp, 'small.txt');
    await makeFile(local, 1000);
    await agent(sb, 'POST', '/files/mkdir', { path: '/workspace/into' });
    const res = await upload(sb, local, '/workspace/into', 'named.txt');
    assert.equal(res.status, 200);
    assert.equal((await res.json()).path, '/workspace/into/named.txt');
    const raw = await fetch(new URL(`/files/upload${q('/workspace/raw.bin')}`, sb.publicHost), { method: 'POST', body: 'raw bytes', headers: { ...auth(), 'content-type': 'application/octet-stream' } });
    assert.equal(raw.status, 200);
    assert.equal((await run(sb, 'cat', ['/workspace/raw.bin'])).stdout, 'raw bytes');
    const noPath = new FormData();
    noPath.append('file', new Blob(['x']), 'x.txt');
    const bad = await fetch(new URL('/files/upload', sb.publicHost), { method: 'POST', body: noPath, headers: auth() });
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).code, 'VALIDATION_ERROR');
    const truncated = await fetch(new URL('/files/upload', sb.publicHost), {
      method: 'POST',
      body: '--b\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nno closing boundary',
      headers: { ...auth(), 'content-type': 'multipart/form-data; boundary=b' },
    });
    assert.equal(truncated.status, 400);
    assert.match((await truncated.json()).message, /malformed multipart/);
  });

  test('the disk limit holds: an upload that does not fit is a clear 413 and leaves no file', async () => {
    const small = await createSandbox(server, { template_name: 'base' });
    try {
      // Leave ~40 MB free, then try to upload 100 MB.
      const free = Number((await run(small, 'sh', ['-c', "df -B1 --output=avail /workspace | tail -1"])).stdout.trim());
      assert.ok(free > 100 * 1024 * 1024, `free ${free}`);
      await run(small, 'fallocate', ['-l', String(free - 40 * 1024 * 1024), '/workspace/filler']);
      const local = join(tmp, 'hundred.bin');
      await makeFile(local, 100 * 1024 * 1024);
      const res = await upload(small, local, '/workspace/too-big.bin');
      const body = await res.json();
      assert.equal(res.status, 413, JSON.stringify(body));
      assert.equal(body.code, 'DISK_FULL');
      assert.match(body.message, /space/i);
      assert.equal((await agent(small, 'GET', `/files/exists${q('/workspace/too-big.bin')}`)).body.exists, false);
      const leftovers = await run(small, 'sh', ['-c', 'find / -xdev -name "*.sbx-*.tmp" 2>/dev/null | wc -l']);
      assert.equal(leftovers.stdout.trim(), '0', 'no temp file left anywhere');
      await run(small, 'fallocate', ['-l', String(35 * 1024 * 1024), '/workspace/filler2']);
      const write = await agent(small, 'POST', '/files/write', { path: '/workspace/w.bin', content: randomBytes(7 * 1024 * 1024).toString('base64'), encoding: 'base64' });
      assert.equal(write.status, 413, JSON.stringify(write.body));
      assert.equal(write.body.code, 'DISK_FULL');
      assert.equal((await agent(small, 'GET', `/files/exists${q('/workspace/w.bin')}`)).body.exists, false);
      const tooBig = await agent(small, 'POST', '/files/write', { path: '/workspace/j.bin', content: 'x'.repeat(11 * 1024 * 1024) });
      assert.equal(tooBig.status, 413, `JSON bodies have their own limit: ${JSON.stringify(tooBig.body)}`);
      assert.equal(tooBig.body.code, 'PAYLOAD_TOO_LARGE');
      await agent(small, 'DELETE', `/files/remove${q('/workspace/filler2')}`);
      await agent(small, 'DELETE', `/files/remove${q('/workspace/filler')}`);
      const again = await upload(small, local, '/workspace/fits.bin');
      assert.equal(again.status, 200, 'with space freed the same upload succeeds');
      assert.equal((await agent(small, 'GET', '/health')).status, 200);
    } finally {
      await api(server, 'DELETE', `/v1/sandboxes/${small.id}`);
    }
  });
});

describe('files: the sandbox boundary', () => {
  test('symlinks to /proc/1/root or up the tree stay inside the sandbox', async () => {
    const marker = `escape-test-${randomBytes(6).toString('hex')}`;
    await run(sb, 'ln', ['-s', '/proc/1/root', '/workspace/pid1root']);
    await run(sb, 'ln', ['-s', '../../../../../../..', '/workspace/updir']);
    // What a host-side agent would have exposed: the host's own files.
    const hostOnly = '/work/main/package.json';
    assert.ok(existsSync(hostOnly));
    for (const base of ['/workspace/pid1root', '/workspace/updir']) {
      assert.equal((await agent(sb, 'GET', `/files/read${q(`${base}${hostOnly}`)}`)).status, 404, `${base} reached the host`);
      const list = await agent(sb, 'GET', `/files/list${q(base)}`);
      assert.equal(list.status, 200);
      const names = list.body.files.map((f: any) => f.name);
      assert.ok(names.includes('.sb') && names.includes('workspace'), `${base} lists the sandbox root: ${names}`);
      const w = await agent(sb, 'POST', '/files/write', { path: `${base}/tmp/${marker}`, content: 'x' });
      assert.equal(w.status, 200);
      assert.equal(existsSync(`/tmp/${marker}`), false, 'nothing was written on the host');
      assert.equal((await run(sb, 'cat', [`/tmp/${marker}`])).stdout, 'x', 'it landed in the sandbox');
      await run(sb, 'rm', ['-f', `/tmp/${marker}`]);
    }
    const hostname = (await run(sb, 'cat', ['/etc/hostname'])).stdout;
    assert.equal((await agent(sb, 'GET', `/files/read${q('/workspace/updir/etc/hostname')}`)).body.content, hostname);
  });
});
