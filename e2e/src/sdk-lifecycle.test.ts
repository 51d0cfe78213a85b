import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import {
  AbortError,
  ApiClient,
  AuthenticationError,
  ConnectionError,
  InvalidStateError,
  NotFoundError,
  PermissionDeniedError,
  Sandbox,
  SandboxdError,
  SandboxExpiredError,
  Template,
} from '@sandboxd/sdk';
import { freePort, startServer, type TestServer } from './harness.js';
import { clientFor, SandboxPool } from './sdk-support.js';

let server: TestServer;
let client: ApiClient;
let pool: SandboxPool;

before(async () => {
  server = await startServer();
  client = clientFor(server);
  pool = new SandboxPool(client);
});
after(async () => {
  await pool?.cleanup();
  await server?.stop();
});

describe('SDK: sandbox lifecycle', () => {
  test('create returns a running sandbox whose agent answers at once, with a cached token', async () => {
    const sb = await pool.create({ template: 'base' });
    assert.match(sb.id, /\S/);
    assert.equal(sb.status, 'running');
    assert.equal(sb.info.templateName, 'base');
    assert.match(sb.info.publicHost, /^https?:\/\//);
    assert.ok(sb.info.resources.vcpu >= 1 && sb.info.resources.memoryMb >= 128, JSON.stringify(sb.info.resources));
    assert.ok(sb.token, 'the token from the create response is kept');
    assert.ok(sb.token.expiresAt && sb.token.expiresAt.getTime() > Date.now());
    const r = await sb.commands.run('echo ready');
    assert.equal(r.stdout, 'ready\n');
    assert.equal(r.exitCode, 0);
  });

  test('create options reach the sandbox: env vars, no internet, timeout', async () => {
    const sb = await pool.create({ template: 'base', envVars: { GREETING: 'hello there' }, internetAccess: false, timeoutSeconds: 900 });
    assert.equal(sb.info.internetAccess, false);
    assert.equal(sb.info.timeoutSeconds, 900);
    assert.ok(sb.info.expiresAt && Date.parse(sb.info.expiresAt) > Date.now() + 800_000);
    assert.equal((await sb.commands.run('echo "$GREETING"')).stdout, 'hello there\n');
    assert.equal((await sb.env.getAll()).GREETING, 'hello there');
  });

  test('connect and fromId give handles on an existing sandbox; getInfo refreshes it', async () => {
    const made = await pool.create();
    const again = await Sandbox.connect(made.id, { client });
    assert.equal(again.id, made.id);
    assert.equal(again.info.publicHost, made.info.publicHost);
    assert.equal(again.token, undefined, 'connect fetches a token only when the agent is first used');
    assert.equal((await again.commands.run('echo via-connect')).stdout, 'via-connect\n');
    assert.ok(again.token);
    const lazy = Sandbox.fromId(made.id, { client });
    assert.equal(lazy.info.publicHost, '');
    assert.equal((await lazy.commands.run('echo via-fromId')).stdout, 'via-fromId\n', 'the first agent call fetches the address');
    assert.equal((await lazy.getInfo()).status, 'running');
  });

  test('list pages through every sandbox, filters by status, and stops at maxItems', async () => {
    const mine = [await pool.create(), await pool.create(), await pool.create()];
    const paged = Sandbox.list({ client, limit: 2 });
    let pages = 0;
    const seen = new Set<string>();
    for await (const page of paged.pages()) {
      pages++;
      assert.ok(page.data.length <= 2);
      for (const s of page.data) {
        assert.ok(!seen.has(s.id), `duplicate ${s.id} across pages`);
        seen.add(s.id);
      }
    }
    assert.ok(pages >= 2, `${pages} pages`);
    for (const sb of mine) assert.ok(seen.has(sb.id), `${sb.id} listed`);
    const all = await Sandbox.list({ client }).toArray();
    assert.ok(all.every((s) => s instanceof Sandbox));
    assert.equal(all.length, seen.size);
    assert.equal((await Sandbox.list({ client, limit: 1, maxItems: 2 }).toArray()).length, 2);

    await mine[0]!.pause();
    try {
      const paused = await Sandbox.list({ client, status: 'paused' }).toArray();
      assert.ok(paused.some((s) => s.id === mine[0]!.id));
      assert.ok(paused.every((s) => s.status === 'paused'));
      const running = await Sandbox.list({ client, status: 'running' }).toArray();
      assert.ok(!running.some((s) => s.id === mine[0]!.id));
    } finally {
      await mine[0]!.resume();
    }
    const page = await Sandbox.listPage({ client, limit: 1 });
    assert.equal(page.data.length, 1);
    assert.equal(page.hasMore, true);
    assert.equal(typeof page.nextCursor, 'string');
  });

  test('pause keeps processes, stop ends them and keeps files, start boots again; invalid moves are InvalidStateError', async () => {
    const sb = await pool.create();
    await sb.files.write('/workspace/persist.txt', 'kept');
    const bg = await sb.commands.background('sleep 600');
    assert.deepEqual(await sb.pause(), { id: sb.id, status: 'paused' });
    assert.equal((await sb.getInfo()).status, 'paused');
    await assert.rejects(sb.commands.run('true'), (e: unknown) => e instanceof InvalidStateError && e.code === 'SANDBOX_PAUSED' && e.status === 409);
    assert.equal((await sb.resume()).status, 'running');
    assert.equal((await sb.processes.get(bg.processId)).status, 'running', 'processes survive pause/resume');

    assert.equal((await sb.stop()).status, 'stopped');
    await assert.rejects(sb.pause(), (e: unknown) => e instanceof InvalidStateError && e.status === 409);
    await assert.rejects(sb.files.read('/workspace/persist.txt'), (e: unknown) => e instanceof InvalidStateError && e.code === 'SANDBOX_STOPPED');
    assert.equal((await sb.start()).status, 'running');
    assert.equal(await sb.files.read('/workspace/persist.txt'), 'kept');
    assert.equal((await sb.commands.run('pgrep -x sleep || echo none')).stdout.trim(), 'none', 'stop ended the processes');
  });

  test('setTimeout moves the deadline; a reached timeout deletes the sandbox (SandboxExpiredError)', async () => {
    const sb = await pool.create({ timeoutSeconds: 3600 });
    const r = await sb.setTimeout(600);
    assert.equal(r.timeoutSeconds, 600);
    const at = Date.parse(r.expiresAt);
    assert.ok(Math.abs(at - (Date.now() + 600_000)) < 30_000, r.expiresAt);
    assert.equal(sb.info.expiresAt, r.expiresAt);
    await assert.rejects(sb.setTimeout(0), RangeError);

    const short = await pool.create({ timeoutSeconds: 2 });
    const deadline = Date.now() + 30_000;
    let err: unknown;
    while (Date.now() < deadline) {
      try {
        await short.getInfo();
      } catch (e) {
        err = e;
        break;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.ok(err instanceof SandboxExpiredError, `got ${String(err)}`);
    assert.equal(err.code, 'SANDBOX_EXPIRED');
    assert.equal(err.status, 410);
    assert.ok(err.requestId);
  });

  test('kill deletes; the id is then unknown', async () => {
    const sb = await pool.create();
    assert.deepEqual(await sb.kill(), { id: sb.id, status: 'deleted' });
    assert.equal(sb.status, 'deleted');
    await assert.rejects(Sandbox.connect(sb.id, { client }), (e: unknown) => e instanceof NotFoundError || e instanceof SandboxExpiredError);
  });
});

describe('SDK: errors and configuration', () => {
  test('an unknown sandbox is NotFoundError with code, status and request id', async () => {
    await assert.rejects(Sandbox.connect('sb_doesnotexist', { client }), (e: unknown) => {
      assert.ok(e instanceof NotFoundError, String(e));
      assert.equal(e.code, 'NOT_FOUND');
      assert.equal(e.status, 404);
      assert.match(e.requestId ?? '', /\S/);
      return true;
    });
  });

  test('an unknown template is NotFoundError TEMPLATE_NOT_FOUND; a built-in cannot be deleted', async () => {
    await assert.rejects(Sandbox.create({ client, template: 'no-such-template' }), (e: unknown) => e instanceof NotFoundError && e.code === 'TEMPLATE_NOT_FOUND');
    await assert.rejects(Template.get('no-such-template', { client }), (e: unknown) => e instanceof NotFoundError && e.code === 'TEMPLATE_NOT_FOUND');
    await assert.rejects(Template.delete('base', { client }), PermissionDeniedError);
  });

  test('a wrong or missing API key is AuthenticationError', async () => {
    await assert.rejects(Sandbox.list({ baseUrl: server.baseUrl, apiKey: 'sbd_wrong' }).toArray(), (e: unknown) => e instanceof AuthenticationError && e.status === 401);
    const saved = process.env.SANDBOXD_API_KEY;
    delete process.env.SANDBOXD_API_KEY;
    try {
      await assert.rejects(Sandbox.create({ baseUrl: server.baseUrl }), AuthenticationError);
    } finally {
      if (saved !== undefined) process.env.SANDBOXD_API_KEY = saved;
    }
  });

  test('SANDBOXD_API_URL and SANDBOXD_API_KEY configure calls without options', async () => {
    const saved = { url: process.env.SANDBOXD_API_URL, key: process.env.SANDBOXD_API_KEY };
    process.env.SANDBOXD_API_URL = server.baseUrl;
    process.env.SANDBOXD_API_KEY = server.apiKey;
    try {
      const templates = await Template.list();
      assert.ok(templates.some((t) => t.name === 'base' && t.isPublic));
      const sb = pool.track(await Sandbox.create({ template: 'base' }));
      assert.equal((await Sandbox.connect(sb.id)).id, sb.id);
    } finally {
      for (const [k, v] of [['SANDBOXD_API_URL', saved.url], ['SANDBOXD_API_KEY', saved.key]] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  test('an unreachable server is ConnectionError naming the address', async () => {
    const port = await freePort();
    await assert.rejects(Sandbox.list({ baseUrl: `http://127.0.0.1:${port}`, apiKey: 'x', maxRetries: 1 }).toArray(), (e: unknown) => {
      assert.ok(e instanceof ConnectionError);
      assert.ok(e.message.includes(String(port)));
      return true;
    });
  });

  test('an already-aborted signal sends nothing', async () => {
    const before = (await Sandbox.list({ client }).toArray()).length;
    const ac = new AbortController();
    ac.abort();
    await assert.rejects(Sandbox.create({ client, template: 'base', signal: ac.signal }), AbortError);
    assert.equal((await Sandbox.list({ client }).toArray()).length, before);
  });

  test('every error is a SandboxdError with a JSON form', async () => {
    const e = await Sandbox.connect('sb_nope', { client }).catch((x: unknown) => x);
    assert.ok(e instanceof SandboxdError);
    const j = JSON.parse(JSON.stringify(e));
    assert.equal(j.code, 'NOT_FOUND');
    assert.equal(j.status, 404);
    assert.equal(j.name, 'NotFoundError');
  });
});

describe('SDK: templates', () => {
  test('list, filter and get the built-in templates', async () => {
    const all = await Template.list({ client });
    const base = all.find((t) => t.name === 'base');
    assert.ok(base, JSON.stringify(all.map((t) => t.name)));
    assert.equal(base.status, 'active');
    assert.equal(base.isPublic, true);
    assert.ok(base.defaultResources.vcpu >= 1);
    const got = await Template.get('base', { client });
    assert.equal(got.name, 'base');
    assert.equal((await Template.get(got.id, { client })).name, 'base', 'by id too');
    const bash = await Template.list({ client, language: 'bash' });
    assert.ok(bash.every((t) => t.language === 'bash'));
    assert.ok(bash.some((t) => t.name === 'base'));
  });
});
