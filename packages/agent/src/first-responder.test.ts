import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// The first responder (native/sbx-first.c) in front of a stand-in for the agent's Node that starts
// late (START_MS): the boot probe is answered at once, everything else by "Node", nothing dropped.
const here = dirname(fileURLToPath(import.meta.url));
const responder = join(here, '../bundle/sbx-first');
const skip = !existsSync(responder) && 'sbx-first not built';
const START_MS = 600;

const NODE_STAND_IN = `
import { createServer } from 'node:http';
import { sayListening, serveRelays } from ${JSON.stringify(join(here, 'handover.js'))};
await new Promise((r) => setTimeout(r, Number(process.env.START_MS)));
const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => res.end(JSON.stringify({ by: 'node', url: req.url, body })));
});
serveRelays(server, (process.env.SANDBOXD_AGENT_RELAY_FDS ?? '').split(',').filter(Boolean).map(Number));
server.listen({ fd: 3 }, () => sayListening(Number(process.env.SANDBOXD_AGENT_READY_FD)));
`;

const LISTEN_AND_EXEC = `
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1] + '.tmp')
s.listen(64)
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.execv(sys.argv[2], sys.argv[2:])
`;

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  at: number;
}

function call(socketPath: string, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method, path, headers: { connection: 'close', ...headers }, agent: false }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, at: Date.now() - t0 }));
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${path}: no answer`)));
    req.end(body);
  });
}

async function withResponder(fn: (socketPath: string, node: ChildProcess) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-first-test-'));
  const socketPath = join(dir, 'agent.sock');
  writeFileSync(join(dir, 'node.mjs'), NODE_STAND_IN);
  // The listening socket as fd 3, held by no one else (as the runtime's spawner does it): made by
  // a Python that then execs the responder, which execs Node in the same process.
  const node = spawn('python3', ['-c', LISTEN_AND_EXEC, socketPath, responder, process.execPath, join(dir, 'node.mjs')], {
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', START_MS: String(START_MS) },
  });
  try {
    for (let i = 0; i < 200 && !existsSync(socketPath); i++) await new Promise((r) => setTimeout(r, 10));
    await fn(socketPath, node);
  } finally {
    node.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

test('the boot probe is answered while Node starts; every other request, early or late, by Node', { skip }, async () => {
  await withResponder(async (socketPath) => {
    const probe = await call(socketPath, 'GET', '/health', { 'x-sandboxd-probe': 'boot' });
    assert.equal(probe.status, 200);
    assert.deepEqual(JSON.parse(probe.body), { status: 'starting' });
    assert.equal(probe.headers['x-sandboxd-first-responder'], '1');
    assert.ok(probe.at < START_MS / 2, `the probe took ${probe.at} ms`);

    // More early connections than the responder has relays: the rest wait in the backlog for Node.
    const early = await Promise.all([
      call(socketPath, 'GET', '/health'),
      call(socketPath, 'GET', '/health', { 'x-sandboxd-probe': 'boot', 'content-length': '5' }, 'hello'),
      call(socketPath, 'GET', '/health', { 'x-sandboxd-probe': 'other' }),
      ...Array.from({ length: 7 }, (_, i) => call(socketPath, 'POST', `/commands/run?i=${i}`, { 'content-type': 'application/json' }, JSON.stringify({ command: `echo ${i}` }))),
    ]);
    for (const a of early) {
      assert.equal(a.status, 200);
      assert.equal(a.headers['x-sandboxd-first-responder'], undefined);
    }
    assert.deepEqual(JSON.parse(early[1]!.body), { by: 'node', url: '/health', body: 'hello' });
    for (let i = 0; i < 7; i++) assert.deepEqual(JSON.parse(early[3 + i]!.body), { by: 'node', url: `/commands/run?i=${i}`, body: JSON.stringify({ command: `echo ${i}` }) });

    // Once Node listens, the probe is Node's too.
    const late = await call(socketPath, 'GET', '/health', { 'x-sandboxd-probe': 'boot' });
    assert.deepEqual(JSON.parse(late.body), { by: 'node', url: '/health', body: '' });
  });
});

test('a large early request is relayed whole, both ways', { skip }, async () => {
  await withResponder(async (socketPath) => {
    const big = 'x'.repeat(3 * 1024 * 1024);
    const a = await call(socketPath, 'PUT', '/files/write', { 'content-type': 'text/plain' }, big);
    assert.equal(a.status, 200);
    const parsed = JSON.parse(a.body) as { body: string };
    assert.equal(parsed.body.length, big.length);
  });
});

test('when Node dies before it listens, early connections end instead of hanging', { skip }, async () => {
  await withResponder(async (socketPath, node) => {
    const pending = call(socketPath, 'POST', '/commands/run', {}, '{}').then(
      () => 'answered',
      () => 'ended',
    );
    await new Promise((r) => setTimeout(r, 100));
    node.kill('SIGKILL');
    assert.equal(await pending, 'ended');
  });
});

test('a head cut short by a hang-up goes to Node as it is (the responder does not wait on it)', { skip }, async () => {
  await withResponder(async (socketPath) => {
    const closed = await new Promise<string>((resolve) => {
      const sock = connect(socketPath, () => sock.end('GET /heal'));
      sock.on('data', () => undefined);
      sock.on('close', () => resolve('closed'));
      sock.on('error', () => resolve('closed'));
      setTimeout(() => resolve('still open'), START_MS + 3000).unref();
    });
    assert.equal(closed, 'closed');
    // The responder still serves the probe and relays the rest.
    const next = await call(socketPath, 'POST', '/after', {}, 'x');
    assert.deepEqual(JSON.parse(next.body), { by: 'node', url: '/after', body: 'x' });
  });
});
