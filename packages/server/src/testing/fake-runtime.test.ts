import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { AgentHealthResponse, CommandResponse, EnvResponse } from '@sandboxd/protocol';
import { runtimeConformance } from '../runtime/conformance.js';
import { agentGet, agentJson } from '../node/agent-client.js';
import { echoCommand } from './fake-agent.js';
import { FakeRuntime } from './fake-runtime.js';
import { validator } from './openapi-check.js';

// The same suite CrunRuntime passes, against the fake: what the services' fast tests rely on.
runtimeConformance('FakeRuntime', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-fake-'));
  const layer = join(dir, 'layer');
  await mkdir(layer);
  const rt = new FakeRuntime({ socketDir: join(dir, 's') });
  await rt.setupHost();
  const heals = new Map<string, () => void>();
  return {
    runtime: rt,
    spec: (id, over) => ({ id, lowerDirs: [layer], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 256 }, internetAccess: false, hostname: id, env: { SANDBOX_ID: id }, ...over }),
    failCreate: (id) => void heals.set(id, rt.failOn('create', new Error('injected failure'), (x) => x === id)),
    healCreate: (id) => heals.get(id)?.(),
    writeFile: async (id, path, content) => rt.writeFile(id, path, content),
    readFile: async (id, path) => rt.readFile(id, path),
    oomKill: async (id) => rt.triggerOom(id),
    assertClean: async () => {
      assert.deepEqual(await rt.list(), []);
      assert.deepEqual(await readdir(join(dir, 's')), [], 'no socket left');
    },
    teardown: async () => {
      await rt.dispose();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

describe("FakeRuntime's agent: the agent protocol's shapes, and nothing run", () => {
  let dir: string;
  let rt: FakeRuntime;
  const check = validator({ closed: true });
  const spec = (id: string) => ({ id, lowerDirs: [], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 256 }, internetAccess: false, hostname: id, env: {} });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-fake-agent-'));
    rt = new FakeRuntime({ socketDir: dir });
    await rt.setupHost();
    await rt.create(spec('fa1'));
  });

  after(async () => {
    await rt.dispose();
    await rm(dir, { recursive: true, force: true });
  });

  test('GET /health, PUT and GET /env answer as the real agent does', async () => {
    const sock = rt.agentSocket('fa1');
    const health = await agentGet(sock, '/health', 2000);
    assert.equal(health.status, 200);
    check(AgentHealthResponse, health.body, '/health');
    const put = await agentJson(sock, 'PUT', '/env', { env_vars: { A: '1', B: '2' } }, 2000);
    assert.equal(put.status, 200);
    check(EnvResponse, put.body, 'PUT /env');
    await agentJson(sock, 'PUT', '/env', { env_vars: { C: '3' }, merge: true }, 2000);
    const got = await agentGet(sock, '/env', 2000);
    assert.deepEqual((got.body as { env_vars: unknown }).env_vars, { A: '1', B: '2', C: '3' });
  });

  test('POST /commands/run: an echo by default, or what the test programmed; never run', async () => {
    const sock = rt.agentSocket('fa1');
    const echo = await agentJson(sock, 'POST', '/commands/run', { command: 'touch', args: ['/tmp/fake-agent-must-not-make-this'] }, 2000);
    assert.equal(echo.status, 200);
    check(CommandResponse, echo.body, 'POST /commands/run');
    assert.deepEqual(pick(echo.body, 'stdout', 'exit_code', 'success'), { stdout: 'touch /tmp/fake-agent-must-not-make-this\n', exit_code: 0, success: true });
    assert.ok(!existsSync('/tmp/fake-agent-must-not-make-this'), 'nothing ran on the host');
    rt.onCommand((id, command) => ({ stderr: `${id}: ${command}: not found\n`, exitCode: 127 }));
    try {
      const failed = await agentJson(sock, 'POST', '/commands/run', { command: 'nosuch' }, 2000);
      assert.deepEqual(pick(failed.body, 'stderr', 'exit_code', 'success'), { stderr: 'fa1: nosuch: not found\n', exit_code: 127, success: false });
    } finally {
      rt.onCommand(echoCommand);
    }
  });

  test("errors in the agent's shape: a missing field 400, an unknown route 404, a bad body 400", async () => {
    const sock = rt.agentSocket('fa1');
    const missing = await agentJson(sock, 'POST', '/commands/run', {}, 2000);
    assert.deepEqual([missing.status, pick(missing.body, 'code')], [400, { code: 'VALIDATION_ERROR' }]);
    const unknown = await agentGet(sock, '/files/list', 2000);
    assert.deepEqual([unknown.status, pick(unknown.body, 'code')], [404, { code: 'ROUTE_NOT_FOUND' }]);
    const notJson = await agentJson(sock, 'PUT', '/env', 'not an object', 2000);
    assert.deepEqual([notJson.status, pick(notJson.body, 'code')], [400, { code: 'VALIDATION_ERROR' }]);
  });

  test('runStep is refused: a build step is code, and the fake runs none', async () => {
    await assert.rejects(
      rt.runStep({ id: 'st1', lowerDirs: [], upperDir: dir, argv: ['/bin/true'], env: {}, cwd: '/', internetAccess: false, resources: spec('x').resources, timeoutMs: 1000 }),
      /runs no build steps/,
    );
  });

  test('failOn: the verb fails for the ids asked until healed, and every verb is recorded in calls', async () => {
    const heal = rt.failOn('pause', new Error('frozen solid'), (id) => id === 'fa1');
    await assert.rejects(rt.pause('fa1'), /frozen solid/);
    assert.equal(await rt.status('fa1'), 'running');
    heal();
    await rt.pause('fa1');
    await rt.resume('fa1');
    assert.deepEqual(rt.calls.filter((c) => c.id === 'fa1').map((c) => c.verb).slice(-3), ['pause', 'pause', 'resume']);
  });
});

function pick(body: unknown, ...keys: string[]): Record<string, unknown> {
  const b = body as Record<string, unknown>;
  return Object.fromEntries(keys.map((k) => [k, b[k]]));
}
