import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitForAgentPrimed } from './agent-client.js';

// What the daemon asks of a booting agent: the boot probe when a create waits for the boot (the
// first responder answers it while Node starts), the agent itself and the priming PUT otherwise.
const dir = mkdtempSync(join(tmpdir(), 'agent-client-test-'));
const socketPath = join(dir, 'agent.sock');
const seen: string[] = [];
let server: Server;

before(async () => {
  server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers['x-sandboxd-probe'] ?? '-'}`);
    req.resume();
    req.on('end', () => res.end(JSON.stringify(req.headers['x-sandboxd-probe'] === 'boot' ? { status: 'starting' } : { status: 'healthy', env_vars: {} })));
  });
  await new Promise<void>((r) => server.listen(socketPath, r));
});
after(() => {
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

test('a boot a create waits for is ready at the boot probe, unprimed', async () => {
  seen.length = 0;
  assert.equal(await waitForAgentPrimed(socketPath, 2000, () => false), 'probed');
  assert.deepEqual(seen, ['GET /health boot']);
});

test('a boot for the pool waits for the agent itself, then primes it', async () => {
  seen.length = 0;
  assert.equal(await waitForAgentPrimed(socketPath, 2000, () => true), 'answered');
  assert.deepEqual(seen, ['GET /health -', 'PUT /env -']);
});

test('a boot whose create went away meanwhile is waited for until the agent itself answers', async () => {
  seen.length = 0;
  let waiting = true;
  const answered = await waitForAgentPrimed(socketPath, 2000, () => {
    const prime = !waiting;
    waiting = false;
    return prime;
  });
  assert.equal(answered, 'answered');
  assert.deepEqual(seen, ['GET /health boot', 'GET /health -', 'PUT /env -']);
});

test('an agent that never answers fails the wait within its time', async () => {
  const t0 = Date.now();
  await assert.rejects(waitForAgentPrimed(join(dir, 'none.sock'), 300, () => false), /agent not ready after 300 ms/);
  assert.ok(Date.now() - t0 < 2000);
});
