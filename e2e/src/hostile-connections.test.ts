// One client opens far more connections than its cap and keeps each one alive with a byte of an
// unfinished request every second. Before the fix every connection past the cap was kept to be
// answered with a 429 (and its linger restarted with every byte), so one client filled the
// daemon's total budget and every other client of the API and the gateway was closed unread.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { agent, api, createSandbox, startServer, type TestServer } from './harness.js';

let server: TestServer;

before(async () => {
  server = await startServer({ env: { SANDBOXD_MAX_CONNECTIONS_PER_CLIENT: '20', SANDBOXD_MAX_CONNECTIONS: '100' } });
});
after(async () => {
  await server?.stop();
});

describe('connection caps against one greedy client', { timeout: 120_000 }, () => {
  test('150 trickling connections from one address: others still create sandboxes and run code; the greedy client keeps only its cap', async () => {
    const sb = await createSandbox(server, { timeout_seconds: 600 });
    const port = new URL(sb.publicHost).port;
    const socks: Socket[] = [];
    let closed = 0;
    for (let i = 0; i < 150; i++) {
      // Half at the API, half at the sandbox's gateway port: the cap and the budget cover both.
      const s = connect({ host: '127.0.0.1', port: i % 2 ? server.port : Number(port), localAddress: '127.0.0.5' });
      s.on('error', () => undefined);
      s.on('close', () => closed++);
      s.once('connect', () => s.write('GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: '));
      socks.push(s);
    }
    const trickle = setInterval(() => {
      for (const s of socks) if (!s.destroyed) s.write('a');
    }, 1000);
    try {
      await new Promise((r) => setTimeout(r, 2000));
      const other = await createSandbox(server, { timeout_seconds: 600 });
      const ran = await agent(other, 'POST', '/commands/run', { command: 'echo served' });
      assert.equal(ran.body.stdout, 'served\n');
      assert.equal((await agent(sb, 'GET', '/health')).status, 200);
      await new Promise((r) => setTimeout(r, 6000));
      assert.equal(150 - closed, 20, 'past its cap, the greedy client keeps nothing open, however it trickles');
      assert.equal((await api(server, 'GET', '/health')).status, 200);
      await api(server, 'DELETE', `/v1/sandboxes/${other.id}`);
    } finally {
      clearInterval(trickle);
      for (const s of socks) s.destroy();
    }
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });
});
