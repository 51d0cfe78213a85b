import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { TEST_DATA_DIR, startServer, type TestServer } from './harness.js';
import { PKG, runAsync, testVenv } from './python-venv.js';

// Issue 33, item 2: the Python SDK (packages/python), tested with pytest against a real daemon, in
// the venv python-venv.ts makes. Its figure (create → first command against the TypeScript SDK)
// is bench/src/clients.ts's.

let server: TestServer;
let python: string;

before(async () => {
  python = testVenv();
  server = await startServer({ templates: ['base', 'code-interpreter'] });
});
after(async () => {
  await server?.stop();
});

describe('Python SDK', { timeout: 45 * 60_000 }, () => {
  test('pytest packages/python/tests passes against a real daemon (sync and async clients, docs/python.md examples, packaging)', async () => {
    const junit = join(server.dataDir, 'pytest.xml');
    // SANDBOXD_PYTEST_ARGS narrows a run while working on the SDK (e.g. -k "terminal or docs").
    const extra = (process.env.SANDBOXD_PYTEST_ARGS ?? '').match(/"[^"]*"|'[^']*'|\S+/g)?.map((a) => a.replace(/^(["'])(.*)\1$/, '$2')) ?? [];
    const env = { ...process.env, SANDBOXD_API_URL: server.baseUrl, SANDBOXD_API_KEY: server.apiKey, PYTHONPATH: join(PKG, 'src'), PYTHONDONTWRITEBYTECODE: '1' };
    const r = await runAsync(python, ['-m', 'pytest', join(PKG, 'tests'), '-p', 'no:cacheprovider', '-rfE', `--junitxml=${junit}`, ...extra], env, 40 * 60_000);
    // The whole output, and the daemon's log, outlive the run (the daemon's data dir does not).
    const logs = join(TEST_DATA_DIR, 'python-sdk-logs');
    mkdirSync(logs, { recursive: true });
    writeFileSync(join(logs, 'pytest.log'), r.out);
    copyFileSync(server.logFile, join(logs, 'daemon.log'));
    console.log(r.out.split('\n').slice(-60).join('\n'));
    console.log(`full output: ${join(logs, 'pytest.log')}, the daemon's log: ${join(logs, 'daemon.log')}`);
    assert.equal(r.status, 0, `pytest failed:\n${r.out.slice(-8000)}`);
    const xml = readFileSync(junit, 'utf8');
    const m = /<testsuite [^>]*\btests="(\d+)"[^>]*/.exec(xml);
    assert.ok(m, 'pytest wrote a junit report');
    const count = (name: string) => Number(new RegExp(`\\b${name}="(\\d+)"`).exec(m[0])?.[1] ?? 'NaN');
    console.log(`pytest: ${count('tests')} tests, ${count('failures')} failures, ${count('errors')} errors, ${count('skipped')} skipped`);
    if (!extra.length) assert.ok(count('tests') >= 120, `pytest ran ${count('tests')} tests`);
    assert.equal(count('failures') + count('errors'), 0);
    assert.equal(count('skipped'), 0, 'no test is skipped');
  });
});
