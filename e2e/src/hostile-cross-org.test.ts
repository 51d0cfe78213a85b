import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agent, api, createSandbox, startServer, REPO_ROOT, type TestServer } from './harness.js';

// Issue 8, items 6 and 8: what one organization uploads or builds must be of no use, and tell
// nothing, to another. Two organizations with their own API keys, against a real daemon.

let server: TestServer;
let orgA: { baseUrl: string; apiKey: string };
let orgB: { baseUrl: string; apiKey: string };
const scratch = mkdtempSync(join(tmpdir(), 'sbd-xorg-'));

function operator(args: string[]): any {
  return JSON.parse(execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args, '--json'], { env: server.env, encoding: 'utf8' }));
}

before(async () => {
  server = await startServer({ templates: ['base'], env: { SANDBOXD_REGISTRY_URL: 'none', SANDBOXD_BUILDS_PER_HOUR: '1000', SANDBOXD_BUILDS_PER_DAY: '1000' } });
  operator(['orgs', 'create', 'tenant-a']);
  operator(['orgs', 'create', 'tenant-b']);
  orgA = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', 'tenant-a']).api_key };
  orgB = { baseUrl: server.baseUrl, apiKey: operator(['keys', 'create', '--org', 'tenant-b']).api_key };
});
after(async () => {
  // stop() deletes the default organization's sandboxes; these organizations delete their own.
  for (const org of [orgA, orgB]) {
    if (org) for (const s of (await api(org, 'GET', '/v1/sandboxes')).body?.data ?? []) await api(org, 'DELETE', `/v1/sandboxes/${s.id}`);
  }
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
type Org = typeof orgA;

async function put(url: string, body: Buffer): Promise<number> {
  const res = await fetch(url, { method: 'PUT', body: new Uint8Array(body), headers: { 'content-type': 'application/octet-stream' } });
  await res.arrayBuffer();
  return res.status;
}

async function fileLink(org: Org, path: string, content: Buffer): Promise<{ present: boolean; upload_url: string; file_id: string }> {
  const res = await api(org, 'POST', '/v1/templates/files/upload-link', { files: [{ path, size: content.length, hash: `sha256:${sha(content)}` }] });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.upload_urls[0];
}

async function tarballLink(org: Org, filesHash: string, tgz: Buffer): Promise<{ present: boolean; upload_url: string | null }> {
  const res = await api(org, 'POST', '/v1/templates/files/upload-link', { files_hash: filesHash, content_length: tgz.length });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

async function waitBuild(org: Org, id: string): Promise<any> {
  const deadline = Date.now() + 600_000;
  for (;;) {
    const st = await api(org, 'GET', `/v1/templates/build/${id}/status`);
    assert.equal(st.status, 200, JSON.stringify(st.body));
    if (st.body.status !== 'building') return st.body;
    if (Date.now() > deadline) throw new Error(`build ${id} still running`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** Builds and waits; returns the final status, the logs and the template's layers. */
async function build(org: Org, body: Record<string, unknown>): Promise<{ status: any; logs: string; layers: string[]; templateId: string }> {
  const res = await api(org, 'POST', '/v1/templates/build', body);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const status = await waitBuild(org, res.body.build_id);
  const logs = await api(org, 'GET', `/v1/templates/build/${res.body.build_id}/logs?offset=0`);
  const tpl = await api(org, 'GET', `/v1/templates/${res.body.template_id}`);
  return { status, logs: logs.body.logs, layers: tpl.body.layers, templateId: res.body.template_id };
}

function assertNotUploaded(res: { status: number; body: any }, what: string): void {
  assert.equal(res.status, 400, `${what}: ${res.status} ${JSON.stringify(res.body)}`);
  assert.equal(res.body.code, 'INVALID_TEMPLATE_DEFINITION', what);
  assert.match(res.body.message, /has not been uploaded/, what);
}

describe('uploaded files are usable only by an organization that uploaded them', () => {
  const secret = Buffer.from(`tenant A's private file ${randomBytes(16).toString('hex')}\n`);
  let tgz: Buffer;
  const filesHash = `h${randomBytes(12).toString('hex')}`;

  test('A uploads a file and a tarball', async () => {
    const link = await fileLink(orgA, 'secret.txt', secret);
    assert.equal(link.present, false);
    assert.equal(await put(link.upload_url, secret), 200);
    assert.equal((await fileLink(orgA, 'secret.txt', secret)).present, true, 'A sees its own upload');
    const ctx = join(scratch, 'ctx');
    mkdirSync(join(ctx, 'app'), { recursive: true });
    writeFileSync(join(ctx, 'app/secret.txt'), secret);
    tgz = execFileSync('tar', ['-czf', '-', '-C', ctx, 'app']);
    const t = await tarballLink(orgA, filesHash, tgz);
    assert.equal(t.present, false);
    assert.equal(await put(t.upload_url!, tgz), 200);
    assert.equal((await tarballLink(orgA, filesHash, tgz)).present, true);
  });

  test("B can neither learn that A's file exists nor use it, however often it asks", async () => {
    // The old attack: ask for a link (which used to record the file for B), ask again: present.
    for (let i = 0; i < 2; i++) {
      const link = await fileLink(orgB, 'secret.txt', secret);
      assert.equal(link.present, false, `file shape, ask #${i + 1}`);
      assert.ok(link.upload_url);
      const t = await tarballLink(orgB, filesHash, tgz);
      assert.equal(t.present, false, `tarball shape, ask #${i + 1}`);
      assert.ok(t.upload_url);
    }
    const from = { type: 'from', image: 'debian:11' };
    const fileId = `f_${sha(secret)}`;
    assertNotUploaded(await api(orgB, 'POST', '/v1/templates/build', { alias: 'steal-id', steps: [from, { type: 'copy', file_id: fileId, dest: '/x/' }] }), 'by file_id');
    assertNotUploaded(await api(orgB, 'POST', '/v1/templates/build', { alias: 'steal-src', steps: [from, { type: 'copy', src: 'secret.txt', dest: '/x/' }] }), 'by src path');
    assertNotUploaded(
      await api(orgB, 'POST', '/v1/templates/build', { name: 'steal-tgz', from_image: 'debian:11', steps: [{ type: 'COPY', args: ['app', '/x/'], filesHash }] }),
      'by files_hash',
    );
    // A PUT of other bytes under B's link does not make A's file B's either.
    const link = await fileLink(orgB, 'secret.txt', secret);
    assert.equal(await put(link.upload_url, Buffer.alloc(secret.length, 0x41)), 400, 'wrong content is refused');
    assertNotUploaded(await api(orgB, 'POST', '/v1/templates/build', { alias: 'steal-id2', steps: [from, { type: 'copy', file_id: fileId, dest: '/x/' }] }), 'after a failed PUT');
  });

  test('once B uploads the same bytes itself, it can use them (by file_id, src path and files_hash)', async () => {
    const link = await fileLink(orgB, 'mine.txt', secret);
    assert.equal(link.present, false);
    assert.equal(await put(link.upload_url, secret), 200);
    assert.equal((await fileLink(orgB, 'mine.txt', secret)).present, true);
    const t = await tarballLink(orgB, filesHash, tgz);
    assert.equal(t.present, false);
    assert.equal(await put(t.upload_url!, tgz), 200);
    const res = await build(orgB, {
      name: 'b-owns-it',
      from_image: 'debian:11',
      steps: [
        { type: 'COPY', args: ['app', '/tgz/'], filesHash },
        { type: 'RUN', args: ['cat /tgz/secret.txt > /dev/null'] },
      ],
    });
    assert.equal(res.status.status, 'active', JSON.stringify(res.status));
    const res2 = await build(orgB, {
      alias: 'b-owns-it-too',
      steps: [
        { type: 'from', image: 'debian:11' },
        { type: 'copy', file_id: link.file_id, dest: '/by-id/' },
        { type: 'copy', src: 'mine.txt', dest: '/by-src/' },
      ],
    });
    assert.equal(res2.status.status, 'active', JSON.stringify(res2.status));
    const sb = await createSandbox(orgB, { template_id: res2.templateId });
    const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', 'cat /by-id/* /by-src/*'] });
    assert.equal(r.body.stdout, `${secret}${secret}`);
    await api(orgB, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });
});

describe('the build cache is per organization', () => {
  const steps = [
    { type: 'from', image: 'debian:11' },
    { type: 'run', command: `echo ${randomBytes(8).toString('hex')} > /step.txt` },
  ];

  test("B's build of A's steps is not cached, and B's skipCache rebuild does not change what A gets", async () => {
    const a1 = await build(orgA, { alias: 'cache-a', steps });
    assert.equal(a1.status.status, 'active', JSON.stringify(a1.status));
    assert.ok(!a1.logs.includes('(cached)'));
    const b1 = await build(orgB, { alias: 'cache-b', steps });
    assert.equal(b1.status.status, 'active', JSON.stringify(b1.status));
    assert.ok(!b1.logs.includes('(cached)'), `B learns nothing of A's build:\n${b1.logs}`);
    assert.notEqual(b1.layers[0], a1.layers[0], 'step layers are per organization');
    assert.deepEqual(b1.layers.slice(1), a1.layers.slice(1), 'the base image layers are shared');

    const a2 = await build(orgA, { alias: 'cache-a', steps, update: true });
    assert.match(a2.logs, /RUN .*\(cached\)/, "A's own rebuild is cached");
    assert.deepEqual(a2.layers, a1.layers);

    const b2 = await build(orgB, { alias: 'cache-b', steps, update: true, skipCache: true });
    assert.ok(!b2.logs.includes('(cached)'));
    assert.notEqual(b2.layers[0], b1.layers[0], 'skipCache made a new layer');
    const a3 = await build(orgA, { alias: 'cache-a', steps, update: true });
    assert.match(a3.logs, /\(cached\)/);
    assert.deepEqual(a3.layers, a1.layers, "B's skipCache did not repoint A's cache entry");
    const b3 = await build(orgB, { alias: 'cache-b', steps, update: true });
    assert.deepEqual(b3.layers, b2.layers, "B's own entry now points at its rebuild");
    assert.equal((await api(server, 'GET', '/health')).status, 200);
  });
});
