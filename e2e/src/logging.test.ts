import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { agent, api, createSandbox, startServer, REPO_ROOT, type TestServer } from './harness.js';
import { loggedDuring, shown } from './log-lines.js';

// Issue 14, item 2: one JSON object per line off a terminal, every request logged once with its
// id and timing, and no credential in any log line. Issue 29, item 6: off a terminal, where the
// daemon listens is a log event like any other (without the key); the all-in-one (`npm start`)
// prints its banner with the key besides, and nothing else in plain text; an idle daemon says next
// to nothing at info.

let server: TestServer;

function operator(args: string[]): any {
  return JSON.parse(execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args, '--json'], { env: server.env, encoding: 'utf8' }));
}

/** The daemon's log lines that are log events (its start-up banner for the operator is not). */
function events(file: string): Array<Record<string, any>> {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, any>);
}

before(async () => {
  server = await startServer({ templates: ['base'] });
});
after(async () => {
  await server?.stop();
});

describe('structured logs', () => {
  test('JSON lines with level and time; each API and sandbox request once, with id, route, status and duration; no credential anywhere', async () => {
    const key = operator(['keys', 'create', '--org', 'default']).api_key as string;
    const org = { baseUrl: server.baseUrl, apiKey: key };
    const sb = await createSandbox(org, { template_name: 'base', timeout_seconds: 600 });
    const run = await agent(sb, 'POST', '/commands/run', { command: 'true' }, { 'x-request-id': 'log-test-run-1' });
    assert.equal(run.status, 200);
    const refreshed = await api(org, 'POST', `/v1/sandboxes/${sb.id}/token/refresh`);
    assert.equal(refreshed.status, 200);
    const eventsToken = (await api(org, 'POST', '/v1/events/token', {})).body.token as string;
    const stream = new AbortController();
    const sse = await fetch(`${server.baseUrl}/v1/events?token=${encodeURIComponent(eventsToken)}`, { signal: stream.signal });
    assert.equal(sse.status, 200);
    stream.abort();
    const link = await api(org, 'POST', '/v1/templates/files/upload-link', { files_hash: createHash('sha256').update('x').digest('hex'), content_length: 10 });
    assert.equal(link.status, 200, JSON.stringify(link.body));
    const uploadUrl = link.body.upload_url as string;
    await fetch(uploadUrl, { method: 'PUT', body: 'not the right bytes' }).then((r) => r.arrayBuffer());
    await api(org, 'GET', '/v1/sandboxes/sbnosuchsandbox');
    await new Promise((r) => setTimeout(r, 300)); // the stream's close is logged when it ends

    const log = events(server.logFile);
    assert.ok(log.length > 10);
    for (const e of log) {
      assert.equal(typeof e.msg, 'string');
      assert.match(String(e.level), /^(trace|debug|info|warn|error|fatal)$/);
      assert.ok(!Number.isNaN(Date.parse(e.time)), `time of ${JSON.stringify(e)}`);
    }
    const requests = log.filter((e) => e.msg === 'request');
    const create = requests.find((e) => e.method === 'POST' && e.route === '/v1/sandboxes');
    assert.ok(create, 'the create is logged');
    assert.ok(create.reqId && typeof create.ms === 'number' && create.status < 300 && create.org, JSON.stringify(create));
    const missing = requests.find((e) => e.url === '/v1/sandboxes/sbnosuchsandbox');
    assert.equal(missing?.status, 404);
    assert.equal(missing?.error_code, 'NOT_FOUND');
    assert.equal(requests.filter((e) => e.reqId === create.reqId).length, 1, 'once per request');
    const proxied = log.find((e) => e.msg === 'sandbox request' && e.request_id === 'log-test-run-1');
    assert.ok(proxied, 'the agent request through the gateway is logged with its id');
    assert.deepEqual([proxied.sandbox_id, proxied.status, typeof proxied.ms], [sb.id, 200, 'number']);
    assert.ok(requests.some((e) => String(e.url).startsWith('/v1/events?token=[redacted]')), 'the events stream, its token redacted');
    assert.ok(requests.some((e) => String(e.url).startsWith('/v1/templates/files/upload/[redacted]')), 'the upload, its signed path redacted');

    const text = readFileSync(server.logFile, 'utf8');
    const secrets: Record<string, string> = {
      'API key': key,
      'sandbox token': sb.authToken,
      'refreshed token': refreshed.body.auth_token,
      'events token': eventsToken,
      'upload signature': uploadUrl.split('/').pop()!,
    };
    for (const [what, secret] of Object.entries(secrets)) {
      assert.ok(secret && secret.length > 16, what);
      assert.ok(!text.includes(secret), `the ${what} is not in the log`);
    }
    const logLines = text.split('\n').filter((l) => l.startsWith('{'));
    assert.ok(!logLines.some((l) => l.includes(server.apiKey)), 'the bootstrap key is in no log line (only in the banner, for the operator)');
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });

  test('off a terminal, where it listens is one event (and where the key is, never the key); the only plain text is the banner of npm start', () => {
    const text = readFileSync(server.logFile, 'utf8');
    const plain = text.split('\n').filter((l) => l && !l.startsWith('{'));
    assert.deepEqual(plain, [`sandboxd is listening on ${server.baseUrl}`, `  API key:   ${server.apiKey}`, ...plain.slice(2)], 'the banner says where and the key');
    assert.equal(plain.length, 5, `the banner and nothing else in plain text:\n${plain.join('\n')}`);
    assert.ok(plain.slice(2).every((l) => /^ {2}(try|console|sandboxes):/.test(l)));
    const listening = events(server.logFile).filter((e) => e.msg === 'sandboxd is listening');
    assert.equal(listening.length, 1);
    assert.deepEqual(
      [listening[0]!.level, listening[0]!.url, listening[0]!.console, listening[0]!.api_key_in],
      ['info', server.baseUrl, `${server.baseUrl}/console`, 'SANDBOXD_BOOTSTRAP_API_KEY'],
    );
  });

  test('an idle daemon, after some work, writes at most a line at info in 10 s', async () => {
    // Some work first: a warm pool that refilled and whose target then decays (a line every few
    // seconds, were it at info), sandboxes gone.
    for (let i = 0; i < 3; i++) {
      const sb = await createSandbox(server, { template_name: 'base' });
      assert.equal((await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`)).status, 200);
    }
    await new Promise((r) => setTimeout(r, 1000));
    const [{ events: said, plain }] = await loggedDuring([server.logFile], 10_000);
    assert.deepEqual(plain, []);
    assert.ok(said.length <= 1, `info lines of an idle daemon:\n${said.map(shown).join('\n')}`);
  });

  test('SANDBOXD_LOG_LEVEL=warn drops the request lines; SANDBOXD_LOG_FORMAT=text gives readable lines; a bad level is refused at start', async () => {
    const quiet = await startServer({ templates: ['base'], env: { SANDBOXD_LOG_LEVEL: 'warn', SANDBOXD_LOG_FORMAT: 'text' } });
    try {
      assert.equal((await api(quiet, 'GET', '/v1/sandboxes')).status, 200);
      const text = readFileSync(quiet.logFile, 'utf8');
      assert.doesNotMatch(text, /^\{/m, 'no JSON lines');
      assert.doesNotMatch(text, /\] request /, 'no request lines below warn');
      assert.doesNotMatch(text, /starting sandboxd/, 'no info lines');
    } finally {
      await quiet.stop();
    }
    assert.throws(
      () =>
        execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), 'serve'], {
          env: { ...server.env, SANDBOXD_LOG_LEVEL: 'loud', SANDBOXD_PORT: '1' },
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'pipe'],
          timeout: 30_000,
        }),
      (err: { stderr?: string }) => /SANDBOXD_LOG_LEVEL must be one of/.test(String(err.stderr)),
    );
  });
});
