// The whole daemon on PostgreSQL (SANDBOXD_DATABASE_URL), as a cluster's roles will run: the API,
// the SDK's flows and the agent through the gateway, a restart of the daemon, and a restart of
// PostgreSQL under it (calls in flight or made meanwhile answer 503 STORE_UNAVAILABLE; later ones
// succeed; running sandboxes never notice).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { agent, api, createSandbox, startServer, type TestServer } from './harness.js';

describe('sandboxd serve on PostgreSQL', { timeout: 600_000 }, () => {
  let pg: TestPostgres;
  let server: TestServer;

  before(async () => {
    pg = await startPostgres();
    const url = await pg.createDatabase();
    server = await startServer({ env: { SANDBOXD_DATABASE_URL: url }, templates: ['base'] });
  });

  after(async () => {
    await server?.stop();
    await pg?.stop();
  });

  test('create, run, list, pause/resume, and a daemon restart keep working with the state in PostgreSQL', async () => {
    const sb = await createSandbox(server, { template: 'base', env_vars: { GREETING: 'hello' } });
    const ran = await agent<{ stdout: string }>(sb, 'POST', '/commands/run', { command: 'echo $GREETING from $(hostname)' });
    assert.equal(ran.status, 200);
    assert.match(ran.body.stdout, /hello from/);
    const listed = await api<{ data: Array<{ id: string }> }>(server, 'GET', '/v1/sandboxes');
    assert.ok(listed.body.data.some((s) => s.id === sb.id));
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/pause`)).status, 200);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/resume`)).status, 200);

    await server.kill9();
    await server.restart();
    const got = await api<{ status: string }>(server, 'GET', `/v1/sandboxes/${sb.id}`);
    assert.equal(got.body.status, 'running', 'reconciled from PostgreSQL after a kill -9');
    assert.equal((await agent(sb, 'POST', '/commands/run', { command: 'true' })).status, 200);
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  });

  test('PostgreSQL restarted: calls meanwhile answer 503 STORE_UNAVAILABLE, later ones succeed, sandboxes never notice', async () => {
    const sb = await createSandbox(server, { template: 'base' });
    await agent(sb, 'POST', '/commands/run', { command: 'nohup sh -c "while :; do date +%s%N >> /tmp/ticks; sleep 0.05; done" >/dev/null 2>&1 &' });
    let during: { status: number; body: any } | undefined;
    await pg.restart(async () => {
      during = await api(server, 'GET', `/v1/sandboxes/${sb.id}`);
      // The sandbox's own agent does not need the store to run a command.
      const r = await agent<{ stdout: string }>(sb, 'POST', '/commands/run', { command: 'wc -l < /tmp/ticks' });
      assert.equal(r.status, 200, 'the agent answers while the database is down');
    });
    assert.equal(during?.status, 503);
    assert.equal(during?.body.code, 'STORE_UNAVAILABLE');
    assert.ok(Number(during?.body.retry_after) > 0);
    // Back: the same daemon serves again without a restart.
    let back = 0;
    for (let i = 0; i < 50 && back !== 200; i++) {
      back = (await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).status;
      if (back !== 200) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(back, 200);
    const before = Number((await agent<{ stdout: string }>(sb, 'POST', '/commands/run', { command: 'wc -l < /tmp/ticks' })).body.stdout);
    await new Promise((r) => setTimeout(r, 300));
    const later = Number((await agent<{ stdout: string }>(sb, 'POST', '/commands/run', { command: 'wc -l < /tmp/ticks' })).body.stdout);
    assert.ok(later > before, 'its processes ran on through it');
    assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
  });
});
