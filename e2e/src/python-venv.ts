// The Python SDK's test environment (packages/python): a venv of its requirements-test.txt, made
// with pip as this machine's pip is configured, cached under the suite's data dir keyed by the
// requirements and the interpreter, so that only the first run installs. Used by the SDK's tests
// (python-sdk.test.ts) and benchmarks (bench/src/clients.ts).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, TEST_DATA_DIR } from './harness.js';

export const PKG = join(REPO_ROOT, 'packages/python');
export const PYTHON = process.env.SANDBOXD_TEST_PYTHON ?? 'python3';

function run(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): { status: number; out: string } {
  const r = spawnSync(cmd, args, { cwd: REPO_ROOT, env: opts.env ?? process.env, encoding: 'utf8', timeout: opts.timeoutMs ?? 15 * 60_000, maxBuffer: 64 * 1024 * 1024 });
  return { status: r.status ?? 1, out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}` };
}

/**
 * Runs a command without blocking this process: the daemon's output is piped through it, and a
 * daemon whose pipe is not drained blocks on its next log line.
 */
export function runAsync(cmd: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ status: number; out: string }> {
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
export function testVenv(): string {
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
