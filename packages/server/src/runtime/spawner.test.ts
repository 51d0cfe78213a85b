import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Spawner } from './spawner.js';

// The spawner process against real tools: what proc() and crun run -d rely on.

test('runs a tool with input and cwd, reports output, exit code and signal; a missing tool is an ENOENT error', async () => {
  const s = new Spawner();
  const dir = mkdtempSync(join(tmpdir(), 'spawner-'));
  try {
    const r = await s.run('sh', ['-c', 'cat; pwd; echo oops >&2; exit 3'], { input: 'fed\n', cwd: dir });
    assert.deepEqual(r, { code: 3, signal: null, stdout: `fed\n${dir}\n`, stderr: 'oops\n' });
    const killed = await s.run('sh', ['-c', 'kill -TERM $$']);
    assert.equal(killed.signal, 'SIGTERM');
    await assert.rejects(s.run('/nonexistent/tool', []), (err: NodeJS.ErrnoException) => err.code === 'ENOENT');
    // Many at once: each answer reaches its own caller.
    const many = await Promise.all(Array.from({ length: 50 }, (_, i) => s.run('echo', [String(i)])));
    assert.deepEqual(many.map((m) => m.stdout), Array.from({ length: 50 }, (_, i) => `${i}\n`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a helper that dies fails its requests in flight, and the next request starts a new one', async () => {
  const s = new Spawner();
  await s.run('true', []);
  const first = s.pid!;
  const inFlight = s.run('sleep', ['5']);
  process.kill(first, 'SIGKILL');
  await assert.rejects(inFlight, /spawner process exited/);
  assert.equal((await s.run('echo', ['again'])).stdout, 'again\n');
  assert.notEqual(s.pid, first);
});

test('listen: the tool gets a listening unix socket (mode 0600) as fd 3, renamed into place; connections reach the tool', async () => {
  const s = new Spawner();
  const dir = mkdtempSync(join(tmpdir(), 'spawner-'));
  const path = join(dir, 'agent.sock');
  try {
    // The tool: accepts one connection on fd 3 and writes to it (python3 is on every host we run on).
    // The socket comes non-blocking (as Node made it; the agent, a Node program, expects that).
    const script = 'import socket; s = socket.socket(fileno=3); s.setblocking(True); c, _ = s.accept(); c.sendall(b"hello from fd 3"); c.close()';
    const done = s.run('python3', ['-c', script], { listen: { tmp: `${path}.tmp`, path } });
    assert.ok(existsSync(path) || (await new Promise((r) => setTimeout(r, 200)), existsSync(path)));
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.equal(existsSync(`${path}.tmp`), false);
    const got = await new Promise<string>((resolve, reject) => {
      let buf = '';
      const c = connect(path);
      c.on('data', (d) => (buf += d.toString()));
      c.on('end', () => resolve(buf));
      c.on('error', reject);
    });
    assert.equal(got, 'hello from fd 3');
    assert.equal((await done).code, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
