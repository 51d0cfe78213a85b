import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Sandbox } from '@sandboxd/sdk';
import { REPO_ROOT, TEST_DATA_DIR, startServer, type TestServer } from './harness.js';

// Issue 33, item 2: the Python SDK (packages/python), tested with pytest against a real daemon. The
// test environment is a venv of packages/python/requirements-test.txt, installed with pip as this
// machine's pip is configured (its index), cached under the suite's data dir keyed by the
// requirements and the interpreter, so that only the first run installs.

const PKG = join(REPO_ROOT, 'packages/python');
const PYTHON = process.env.SANDBOXD_TEST_PYTHON ?? 'python3';

function run(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): { status: number; out: string } {
  const r = spawnSync(cmd, args, { cwd: REPO_ROOT, env: opts.env ?? process.env, encoding: 'utf8', timeout: opts.timeoutMs ?? 15 * 60_000, maxBuffer: 64 * 1024 * 1024 });
  return { status: r.status ?? 1, out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}` };
}

/**
 * Runs a command without blocking this process: the daemon's output is piped through it, and a
 * daemon whose pipe is not drained blocks on its next log line.
 */
function runAsync(cmd: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ status: number; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const chunks: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => chunks.push(c));
    child.stderr.on('data', (c: Buffer) => chunks.push(c));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ status: code ?? 1, out: Buffer.concat(chunks).toString('utf8') + (signal ? `\n(killed by ${signal})` : '') });
    });
  });
}

/** The venv's python, made (once per requirements and interpreter) from the package lists. */
function testVenv(): string {
  const requirements = readFileSync(join(PKG, 'requirements-test.txt'), 'utf8');
  const version = run(PYTHON, ['-c', 'import sys; print(sys.version)']);
  assert.equal(version.status, 0, `${PYTHON} is needed for the Python SDK's tests: ${version.out}`);
  const key = createHash('sha256').update(requirements).update(version.out).digest('hex').slice(0, 16);
  const dir = join(TEST_DATA_DIR, 'python-venv', key);
  const python = join(dir, 'bin', 'python');
  if (existsSync(join(dir, '.ready'))) return python;
  mkdirSync(join(TEST_DATA_DIR, 'python-venv'), { recursive: true });
  // Made aside and moved in place whole: a run killed half-way leaves nothing that looks ready.
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const made = run(PYTHON, ['-m', 'venv', tmp]);
  assert.equal(made.status, 0, `python3 -m venv failed: ${made.out}`);
  const install = (env: NodeJS.ProcessEnv) => run(join(tmp, 'bin', 'python'), ['-m', 'pip', 'install', '--disable-pip-version-check', '-r', join(PKG, 'requirements-test.txt')], { env });
  // First without retries: where pip is configured with an index it cannot reach beside one it can
  // (a local mirror as an extra index), each retry of the unreachable one costs seconds, minutes in
  // all. Then as configured, retries included.
  let pip = install({ ...process.env, PIP_RETRIES: '0' });
  if (pip.status !== 0) pip = install(process.env);
  if (pip.status !== 0) rmSync(tmp, { recursive: true, force: true });
  assert.equal(pip.status, 0, `pip install -r requirements-test.txt failed:\n${pip.out.slice(-4000)}`);
  writeFileSync(join(tmp, '.ready'), requirements);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return python;
}

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

  test('create → first command: the Python SDK against the TypeScript SDK, same daemon, same run (p50)', async () => {
    const runs = 7;
    const ts: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      const sb = await Sandbox.create({ template: 'base', apiKey: server.apiKey, baseUrl: server.baseUrl });
      const r = await sb.commands.run('true');
      ts.push(performance.now() - t0);
      assert.equal(r.exitCode, 0);
      await sb.kill();
    }
    const script = [
      'import json, time',
      'from sandboxd import ApiClient, Sandbox',
      'out = []',
      'with ApiClient() as client:',
      `    for _ in range(${runs}):`,
      '        t0 = time.perf_counter()',
      '        sb = Sandbox.create("base", client=client)',
      '        assert sb.commands.run("true").exit_code == 0',
      '        out.append((time.perf_counter() - t0) * 1000)',
      '        sb.kill()',
      'print(json.dumps(out))',
    ].join('\n');
    const env = { ...process.env, SANDBOXD_API_URL: server.baseUrl, SANDBOXD_API_KEY: server.apiKey, PYTHONPATH: join(PKG, 'src') };
    const r = await runAsync(python, ['-c', script], env, 5 * 60_000);
    assert.equal(r.status, 0, r.out);
    const py = JSON.parse(r.out.trim().split('\n').pop()!) as number[];
    const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const ratio = p50(py) / p50(ts);
    console.log(`create → first command p50: Python ${p50(py).toFixed(1)} ms, TypeScript ${p50(ts).toFixed(1)} ms, ratio ${ratio.toFixed(2)} (goal ≤ 1.2)`);
    // The goal is 1.2×; a 1.5× bound keeps one noisy run on a shared machine from failing the suite.
    assert.ok(ratio <= 1.5, `Python p50 ${p50(py)} ms vs TypeScript ${p50(ts)} ms`);
  });
});
