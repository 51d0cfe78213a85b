import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { REPO_ROOT, startServer, type TestServer } from './harness.js';
import { ensureNode18, node18Command } from './node18.js';

// The SDK promises Node 18+: run a program using most of it under Debian's Node 18, against a real
// server and sandbox.

let server: TestServer;
let node18: { root: string; version: string };

before(async () => {
  node18 = await ensureNode18();
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

function runNode18(script: string, env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const [cmd, ...args] = node18Command(node18.root, script);
  return new Promise((resolve, reject) => {
    const child = spawn(cmd!, args, { cwd: REPO_ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

test('the SDK works unchanged on Node 18: code, streaming, commands, files, env, watch, terminal, pause/resume', async () => {
  const r = await runNode18(join(REPO_ROOT, 'e2e/dist/node18-sdk-program.js'), {
    SANDBOXD_API_URL: server.baseUrl,
    SANDBOXD_API_KEY: server.apiKey,
    NO_PROXY: '127.0.0.1,localhost',
  });
  assert.equal(r.code, 0, `exit ${r.code}\n${r.stderr}\n${r.stdout}`);
  const seen = JSON.parse(r.stdout.trim().split('\n').pop()!);
  assert.match(seen.node, /^v18\./);
  assert.equal(seen.runCode, '42 yes\n');
  assert.equal(seen.streamed.stdout, 'tick 0\ntick 1\ntick 2\n');
  assert.equal(seen.streamed.joined, seen.streamed.stdout);
  assert.ok(seen.streamed.callbacks >= 2, `output came in ${seen.streamed.callbacks} callbacks`);
  assert.deepEqual(seen.command, { stdout: 'cmd ok\n', exitCode: 3 });
  assert.deepEqual(seen.files, { same: true, list: ['blob.bin'] });
  assert.equal(seen.notFound, 'FILE_NOT_FOUND');
  assert.equal(seen.env, 'v18\n');
  assert.ok(['created', 'modified', 'renamed'].includes(seen.watch), seen.watch);
  assert.deepEqual(seen.terminal, { text: true, exit: 4 });
  assert.equal(seen.metrics, 'number');
  assert.equal(seen.afterResume, 'back\n');
  assert.equal(seen.killed, true);
});
