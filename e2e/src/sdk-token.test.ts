import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { AuthenticationError, RateLimitError, Sandbox } from '@sandboxd/sdk';
import { agent, startServer, type TestServer } from './harness.js';
import { clientFor, SandboxPool } from './sdk-support.js';

/** A server issuing 3-second sandbox tokens and allowing 6 creates a minute. */
const TOKEN_TTL_SECONDS = 3;
const CREATES_PER_MINUTE = 6;

let server: TestServer;
let pool: SandboxPool;

before(async () => {
  server = await startServer({
    env: { SANDBOXD_TOKEN_TTL_SECONDS: String(TOKEN_TTL_SECONDS), SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: String(CREATES_PER_MINUTE) },
  });
  pool = new SandboxPool(clientFor(server));
});
after(async () => {
  await pool?.cleanup();
  await server?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('SDK: automatic token refresh', () => {
  test('tokens expire on the server, and the SDK refreshes before they do', async () => {
    const sb = await pool.create({ template: 'base' });
    const first = sb.token!;
    assert.ok(first.expiresAt && first.expiresAt.getTime() - Date.now() <= TOKEN_TTL_SECONDS * 1000 + 2000, 'the server honours the short lifetime');
    assert.equal((await sb.commands.run('echo 1')).stdout, '1\n');
    await sleep(TOKEN_TTL_SECONDS * 1000 + 1000);
    const raw = await agent({ publicHost: sb.info.publicHost, authToken: first.token }, 'POST', '/commands/run', { command: 'true' });
    assert.equal(raw.status, 401, 'the old token is refused by the gateway');
    assert.equal((await sb.commands.run('echo 2')).stdout, '2\n', 'HTTP after expiry');
    assert.notEqual(sb.token!.token, first.token);
    await sleep(TOKEN_TTL_SECONDS * 1000 + 1000);
    const chunks: string[] = [];
    const streamed = await sb.commands.run('echo 3', { onStdout: (d) => chunks.push(d) });
    assert.equal(streamed.stdout, '3\n', 'WebSocket after expiry');
    await sleep(TOKEN_TTL_SECONDS * 1000 + 1000);
    const term = await sb.terminal();
    term.write('exit 0\r');
    assert.equal(await term.exited, 0, 'terminal after expiry');
    term.close();
  });

  test('a token the SDK believes valid but the agent refuses (401) is refreshed and the call repeated once', async () => {
    const made = await pool.create({ template: 'base' });
    const stale = made.token!.token;
    await sleep(TOKEN_TTL_SECONDS * 1000 + 1000);
    const farFuture = new Date(Date.now() + 3600_000).toISOString();
    // HTTP: the request is refused before it runs, so repeating it is safe.
    const viaHttp = await Sandbox.connect(made.id, { client: clientFor(server), authToken: stale, tokenExpiresAt: farFuture });
    assert.equal((await viaHttp.commands.run('echo http-retried')).stdout, 'http-retried\n');
    assert.notEqual(viaHttp.token!.token, stale);
    // WebSocket upgrade refused with 401 → refresh → reconnect.
    const viaWs = await Sandbox.connect(made.id, { client: clientFor(server), authToken: stale, tokenExpiresAt: farFuture });
    assert.equal((await viaWs.runCode('echo ws-retried', { language: 'bash', onStdout: () => {} })).stdout, 'ws-retried\n');
    // A streamed upload is re-sent only if it can be: bytes can, so this works too.
    const viaUpload = await Sandbox.connect(made.id, { client: clientFor(server), authToken: stale, tokenExpiresAt: farFuture });
    await viaUpload.files.upload('/workspace/after-refresh.txt', 'uploaded\n');
    assert.equal(await viaUpload.files.read('/workspace/after-refresh.txt'), 'uploaded\n');
  });

  test('refreshToken() gets a new token explicitly', async () => {
    const sb = await pool.create({ template: 'base' });
    const before = sb.token!.token;
    const r = await sb.refreshToken();
    assert.notEqual(r.token, before);
    assert.ok(Date.parse(r.expiresAt) > Date.now());
    assert.equal(sb.token!.token, r.token);
  });
});

describe('SDK: rate limits', () => {
  test('creating past the limit is RateLimitError with retryAfter, and nothing is created twice', async () => {
    let err: unknown;
    const made: Sandbox[] = [];
    for (let i = 0; i < CREATES_PER_MINUTE + 2; i++) {
      try {
        made.push(pool.track(await Sandbox.create({ client: clientFor(server), template: 'base' })));
      } catch (e) {
        err = e;
        break;
      }
    }
    assert.ok(err instanceof RateLimitError, `got ${String(err)}`);
    assert.equal(err.status, 429);
    assert.equal(err.code, 'RATE_LIMIT_EXCEEDED');
    assert.ok(typeof err.retryAfter === 'number' && err.retryAfter > 0 && err.retryAfter <= 60, String(err.retryAfter));
    const listed = await Sandbox.list({ client: clientFor(server) }).toArray();
    for (const sb of made) assert.equal(listed.filter((s) => s.id === sb.id).length, 1);
    assert.ok(!(err instanceof AuthenticationError));
  });
});
