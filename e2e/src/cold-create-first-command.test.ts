// A cold create (no warm pool) answers at the agent's boot probe, which the first responder
// (packages/agent/native/sbx-first.c) answers while the agent's Node is still starting. What a
// client sends the instant the create answers must then be served, not refused or answered by
// anyone but the agent: commands, env_vars given at create, many requests at once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { agent, api, createSandbox, startServer, type CreatedSandbox, type TestServer } from './harness.js';

let server: TestServer;

before(async () => {
  server = await startServer({ templates: ['base'], env: { SANDBOXD_WARM_POOL_SIZE: '0' } });
});
after(async () => {
  await server?.stop();
});

async function run(sb: CreatedSandbox, command: string): Promise<{ status: number; stdout: string; exit: number }> {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', command] });
  return { status: r.status, stdout: String(r.body.stdout ?? ''), exit: r.body.exit_code };
}

test('a command sent the instant a cold create answers is run by the agent', async () => {
  for (let i = 0; i < 5; i++) {
    const sb = await createSandbox(server, { internet_access: false });
    const r = await run(sb, `echo ready-${i}`);
    assert.deepEqual(r, { status: 200, stdout: `ready-${i}\n`, exit: 0 });
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  }
});

test("a cold create's env_vars are in its first command", async () => {
  const sb = await createSandbox(server, { internet_access: false, env_vars: { FIRST: 'one', SECOND: 'two words' } });
  const r = await run(sb, 'echo "$FIRST/$SECOND"');
  assert.deepEqual(r, { status: 200, stdout: 'one/two words\n', exit: 0 });
  await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
});

test('more requests at once than the first responder relays are all served, each its own answer', async () => {
  const sb = await createSandbox(server, { internet_access: false });
  const answers = await Promise.all([
    ...Array.from({ length: 8 }, (_, i) => run(sb, `echo n${i}`)),
    agent(sb, 'GET', '/health'),
    agent(sb, 'GET', '/health'),
  ]);
  for (let i = 0; i < 8; i++) assert.deepEqual(answers[i], { status: 200, stdout: `n${i}\n`, exit: 0 });
  // A /health without the daemon's probe header is the agent's own: the full answer.
  for (const h of answers.slice(8) as Array<{ status: number; body: any }>) {
    assert.equal(h.status, 200);
    assert.equal(h.body.status, 'healthy');
    assert.ok(Array.isArray(h.body.features));
  }
  await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
});

test('the first responder is a file the sandbox cannot read (it holds the agent socket while Node starts)', async () => {
  const sb = await createSandbox(server, { internet_access: false });
  const r = await run(sb, 'test -x /.sb/agent/sbx-first && echo runnable; cat /.sb/agent/sbx-first >/dev/null 2>&1 && echo readable || echo unreadable');
  assert.deepEqual(r, { status: 200, stdout: 'runnable\nunreadable\n', exit: 0 });
  await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
});
