import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { api, agent, createSandbox, startServer, type TestServer } from './harness.js';
import { crunContainers, loopDevices, mounts } from '../../packages/server/dist/testing/host-objects.js';

let server: TestServer;
before(async () => {
  server = await startServer({ templates: ['base'] });
});
after(async () => {
  await server?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('kill -9 of the daemon loses nothing: states, files, public_host, deadlines', async () => {
  const running = await createSandbox(server);
  const paused = await createSandbox(server);
  const stopped = await createSandbox(server);
  const doomed = await createSandbox(server, { timeout_seconds: 3 });

  const write = await agent(running, 'POST', '/files/write', { path: '/workspace/keep.txt', content: 'still here' });
  assert.equal(write.status, 200, JSON.stringify(write.body));
  const stoppedWrite = await agent(stopped, 'POST', '/files/write', { path: '/workspace/disk.txt', content: 'on disk' });
  assert.equal(stoppedWrite.status, 200);
  assert.equal((await api(server, 'POST', `/v1/sandboxes/${paused.id}/pause`)).status, 200);
  assert.equal((await api(server, 'POST', `/v1/sandboxes/${stopped.id}/stop`)).status, 200);
  const uptimeBefore = (await agent(running, 'GET', '/health')).body.uptime_seconds as number;

  await server.kill9();
  await sleep(3500); // the doomed sandbox's deadline passes while the daemon is down
  await server.restart();

  const r = await api(server, 'GET', `/v1/sandboxes/${running.id}`);
  assert.equal(r.body.status, 'running');
  assert.equal(r.body.public_host, running.publicHost, 'same URL after restart');
  const health = await agent(running, 'GET', '/health');
  assert.equal(health.status, 200, 'same token still valid: the signing key persisted');
  assert.ok(health.body.uptime_seconds > uptimeBefore + 3, 'the agent kept running while the daemon was down');
  const read = await agent(running, 'GET', '/files/read?path=/workspace/keep.txt');
  assert.equal(read.body.content, 'still here');

  assert.equal((await api(server, 'GET', `/v1/sandboxes/${paused.id}`)).body.status, 'paused');
  assert.equal((await agent(paused, 'GET', '/health')).status, 409);
  assert.equal((await api(server, 'POST', `/v1/sandboxes/${paused.id}/resume`)).status, 200);
  assert.equal((await agent(paused, 'GET', '/health')).status, 200);

  assert.equal((await api(server, 'GET', `/v1/sandboxes/${stopped.id}`)).body.status, 'stopped');
  assert.equal((await api(server, 'POST', `/v1/sandboxes/${stopped.id}/start`)).status, 200);
  assert.equal((await agent(stopped, 'GET', '/files/read?path=/workspace/disk.txt')).body.content, 'on disk');

  const gone = await api(server, 'GET', `/v1/sandboxes/${doomed.id}`);
  assert.equal(gone.status, 410, 'a deadline that passed while down is enforced at once');
  assert.ok(!existsSync(join(server.dataDir, 'sandboxes', doomed.id)));
});

test('SIGTERM shuts down gracefully and leaves sandboxes running', async () => {
  const sb = await createSandbox(server);
  await server.shutdown();
  // While the daemon is down, nothing listens on the sandbox's port...
  await assert.rejects(fetch(`${sb.publicHost}/health`));
  await server.restart();
  const h = await agent(sb, 'GET', '/health');
  assert.equal(h.status, 200);
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).body.status, 'running');
});

test('a create interrupted by a crash leaves nothing behind after restart', async () => {
  const before = new Set((await api(server, 'GET', '/v1/sandboxes?limit=1000')).body.data.map((s: any) => s.id));
  const inflight = api(server, 'POST', '/v1/sandboxes', { template_name: 'base' }).catch(() => undefined);
  await sleep(15);
  await server.kill9();
  await inflight;
  await server.restart();
  const after = (await api(server, 'GET', '/v1/sandboxes?limit=1000')).body.data.map((s: any) => s.id) as string[];
  const added = after.filter((id) => !before.has(id));
  // Either the create finished before the crash (a whole sandbox) or nothing of it remains.
  for (const id of added) assert.equal((await api(server, 'GET', `/v1/sandboxes/${id}`)).body.status, 'running');
  const dirs = existsSync(join(server.dataDir, 'sandboxes')) ? readdirSync(join(server.dataDir, 'sandboxes')) : [];
  const live = new Set(after);
  assert.deepEqual(dirs.filter((d) => !d.startsWith('.') && !live.has(d)), [], 'no directory of a half-made sandbox');
});

test('a delete answers before its teardown ends; a crash right after it leaves nothing behind', async () => {
  const sb = await createSandbox(server);
  const dir = join(server.dataDir, 'sandboxes', sb.id);
  const traces = () => ({
    dir: existsSync(dir),
    container: crunContainers(join(server.dataDir, 'crun')).includes(sb.id),
    mounts: mounts().filter((m) => m.target.includes(sb.id)).length,
    loops: loopDevices().filter((l) => l.backing.includes(sb.id)).length,
  });
  const on = traces();
  assert.ok(on.dir && on.container && on.loops > 0, `the sandbox is on the host: ${JSON.stringify(on)}`);
  const del = await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  assert.deepEqual([del.status, del.body.status], [200, 'deleted']);
  // At once: no route, the row says deleted, while the host objects come down behind the answer.
  await assert.rejects(fetch(`${sb.publicHost}/health`, { headers: { authorization: `Bearer ${sb.authToken}` } }));
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).status, 404);
  await server.kill9();
  await server.restart();
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).status, 404);
  assert.deepEqual(traces(), { dir: false, container: false, mounts: 0, loops: 0 }, 'the start after the crash finished the teardown');
});
