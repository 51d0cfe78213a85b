import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox, Template } from '@hopx-ai/sdk';
import { api, startServer, type TestServer } from './harness.js';

// The unmodified @hopx-ai/sdk for what agent-hopx.test.ts does not cover: list and iterate,
// connect, timeouts, token refresh, and a template build with a COPY of local files.

let server: TestServer;
let tmp: string;
before(async () => {
  server = await startServer({ env: { SANDBOXD_REGISTRY_URL: 'none' } });
  tmp = await mkdtemp(join(tmpdir(), 'hopx-tpl-'));
});
after(async () => {
  await server?.stop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

test('create, list, iter, connect, setTimeout, pause/resume through connect, kill', async () => {
  const opts = { apiKey: server.apiKey, baseURL: server.baseUrl };
  const a = await Sandbox.create({ template: 'base', timeoutSeconds: 600, ...opts });
  const b = await Sandbox.create({ template: 'base', ...opts });
  const listed = await Sandbox.list({ ...opts, limit: 10 });
  const ids = listed.map((s: any) => s.sandboxId ?? s.id);
  assert.ok(ids.includes(a.sandboxId) && ids.includes(b.sandboxId), JSON.stringify(ids));
  const iterated: string[] = [];
  for await (const s of Sandbox.iter(opts)) iterated.push((s as any).sandboxId ?? (s as any).id);
  assert.ok(iterated.includes(a.sandboxId) && iterated.includes(b.sandboxId));

  await a.setTimeout(900);
  const info = await a.getInfo();
  assert.ok(info.expiresAt, 'expires_at is set');
  assert.ok(Math.abs(new Date(info.expiresAt as any).getTime() - Date.now() - 900_000) < 60_000);

  await b.pause();
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${b.sandboxId}`)).body.status, 'paused');
  // connect() resumes a paused sandbox and refreshes its token.
  const again = await Sandbox.connect(b.sandboxId, server.apiKey, server.baseUrl);
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${b.sandboxId}`)).body.status, 'running');
  const r = await again.commands.run('echo connected');
  assert.equal(r.stdout, 'connected\n');

  await a.kill();
  await b.kill();
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${a.sandboxId}`)).status, 404);
});

test('Template.build with COPY of local files, RUN, ENV, WORKDIR; a sandbox from it', async () => {
  await mkdir(join(tmp, 'app'), { recursive: true });
  await writeFile(join(tmp, 'app/hello.sh'), '#!/bin/sh\necho "hello from $GREETING"\n');
  await chmod(join(tmp, 'app/hello.sh'), 0o755);
  const template = new Template('python:3.11')
    .copy('app', '/srv/app')
    .runCmd('python3 --version > /srv/pyver')
    .setEnv('GREETING', 'a template')
    .setWorkdir('/srv/app');
  const logs: string[] = [];
  const result = await Template.build(template, {
    name: 'hopx-built',
    apiKey: server.apiKey,
    baseURL: server.baseUrl,
    cpu: 1,
    memory: 512,
    diskGB: 2,
    contextPath: tmp,
    onLog: (e: { message: string }) => logs.push(e.message),
    templateActivationTimeout: 600,
  } as any);
  assert.ok(result.templateID);
  assert.ok(logs.length > 0, 'build logs were streamed to onLog');
  const sb = await Sandbox.create({ templateId: result.templateID, apiKey: server.apiKey, baseURL: server.baseUrl });
  // (This client always sends workdir /workspace, so the template's WORKDIR is checked in templates.test.ts.)
  const out = await sb.commands.run('/srv/app/hello.sh; cat /srv/pyver');
  assert.equal(out.stdout, 'hello from a template\nPython 3.11.2\n');
  const info = await sb.getInfo();
  assert.equal(info.resources?.vcpu, 1);
  assert.equal(info.resources?.memoryMb, 512);
  await sb.kill();
});
