// A relayed connection to a sandbox on a node that stopped (issue 29, item 3): the kernel still
// takes the TCP connection of a hung process, so only its silence tells. Control gives up within
// two probe intervals when the node answers neither the CONNECT nor its health check, and waits on
// for a node that is alive but slow to answer the CONNECT (an agent slow to accept).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Server as TcpServer, type Socket } from 'node:net';
import { after, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { RemoteNode } from './remote-node.js';

const { signer } = testClusterKeys();
const PROBE_MS = 400;

describe('a relayed connection to a node that stopped', () => {
  const sockets = new Set<Socket>();
  const servers: Array<Server | TcpServer> = [];
  const track = (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => undefined);
  };
  after(async () => {
    for (const s of sockets) s.destroy();
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  });

  const listen = async (s: Server | TcpServer): Promise<string> => {
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
  };

  test('fails with NODE_UNAVAILABLE once the health check goes unanswered too, long before its deadline', async () => {
    // Takes every connection and never says a word: what a SIGSTOPped node looks like from outside.
    const url = await listen(createTcpServer(track));
    const node = new RemoteNode({ id: 'node-hung', url, auth: signer, relayProbeMs: PROBE_MS });
    const t0 = performance.now();
    await assert.rejects(node.dialAgent('sbx1', 20_000), (err: unknown) => err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE' && err.status === 503);
    const took = performance.now() - t0;
    assert.ok(took >= PROBE_MS, `gave up after ${Math.round(took)} ms, before the node had its probe interval`);
    assert.ok(took < 4 * PROBE_MS + 500, `gave up after ${Math.round(took)} ms (probe ${PROBE_MS} ms, deadline 20 s)`);
    await node.close();
  });

  test('waits on for a node that answers its health but is slow to answer the connection', async () => {
    let healthChecks = 0;
    const server = createServer((req, res) => {
      if (req.url === '/node/v1/health') healthChecks++;
      res.end(JSON.stringify({ node_id: 'node-slow' }));
    });
    server.on('connection', track);
    // The CONNECT is answered after 3 probe intervals: the node is alive, its agent slow to accept.
    server.on('connect', (_req, socket: Socket) => {
      track(socket);
      setTimeout(() => socket.write('HTTP/1.1 200 Connection Established\r\n\r\n'), 3 * PROBE_MS);
    });
    const url = await listen(server);
    const node = new RemoteNode({ id: 'node-slow', url, auth: signer, relayProbeMs: PROBE_MS });
    const t0 = performance.now();
    const sock = await node.dialAgent('sbx1', 20_000);
    assert.ok(performance.now() - t0 >= 3 * PROBE_MS - 50);
    assert.ok(healthChecks >= 1, 'the slow answer made control check the node');
    sock.destroy();
    await node.close();
  });

  test('several connections waiting at once share one health check', async () => {
    let healthChecks = 0;
    const server = createServer((req, res) => {
      if (req.url === '/node/v1/health') healthChecks++;
      // Alive, but its health answer comes late: the checks under way are one.
      setTimeout(() => res.end('{}'), PROBE_MS / 2);
    });
    server.on('connection', track);
    server.on('connect', (_req, socket: Socket) => {
      track(socket);
      setTimeout(() => socket.write('HTTP/1.1 200 Connection Established\r\n\r\n'), 2 * PROBE_MS);
    });
    const url = await listen(server);
    const node = new RemoteNode({ id: 'node-many', url, auth: signer, relayProbeMs: PROBE_MS });
    const socks = await Promise.all(Array.from({ length: 8 }, () => node.dialAgent('sbx1', 20_000)));
    assert.equal(healthChecks, 1);
    for (const s of socks) s.destroy();
    await node.close();
  });

  /** A node whose relayed connections echo what they get (after `delayMs`), and which stops answering anything when `hung`. */
  const echoNode = async () => {
    const state = { hung: false, delayMs: 0, healthChecks: 0 };
    const server = createServer((req, res) => {
      if (state.hung) return; // a stopped process: the request is never read
      if (req.url === '/node/v1/health') state.healthChecks++;
      res.end('{}');
    });
    server.on('connection', track);
    server.on('connect', (_req, socket: Socket) => {
      track(socket);
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      socket.on('data', (d) => {
        if (!state.hung) setTimeout(() => socket.write(d), state.delayMs);
      });
    });
    return { url: await listen(server), state };
  };
  const echoOnce = (sock: Socket, text: string) =>
    new Promise<string>((resolve, reject) => {
      sock.once('data', (d) => resolve(d.toString()));
      sock.once('error', reject);
      sock.write(text);
    });

  test('a kept connection to a node that stops later ends with NODE_UNAVAILABLE at the next request, not at the lease', async () => {
    const { url, state } = await echoNode();
    const node = new RemoteNode({ id: 'node-later', url, auth: signer, relayProbeMs: PROBE_MS });
    const sock = await node.dialAgent('sbx1', 20_000);
    assert.equal(await echoOnce(sock, 'first'), 'first');
    state.hung = true;
    const t0 = performance.now();
    const err = await new Promise<unknown>((resolve) => {
      sock.once('error', resolve);
      sock.write('second');
    });
    const took = performance.now() - t0;
    assert.ok(err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE', String(err));
    assert.ok(took < 4 * PROBE_MS + 500, `ended after ${Math.round(took)} ms`);
    await node.close();
  });

  test('a kept connection stays while its node is alive, however long the sandbox takes to answer', async () => {
    const { url, state } = await echoNode();
    const node = new RemoteNode({ id: 'node-alive', url, auth: signer, relayProbeMs: PROBE_MS });
    const sock = await node.dialAgent('sbx1', 20_000);
    assert.equal(await echoOnce(sock, 'quick'), 'quick');
    // A command that runs for four probe intervals with nothing to say: the node is asked, and answers.
    state.delayMs = 4 * PROBE_MS;
    const before = state.healthChecks;
    assert.equal(await echoOnce(sock, 'slow'), 'slow');
    assert.ok(!sock.destroyed, 'the connection of a live node stays');
    assert.ok(state.healthChecks - before >= 2, `health checked ${state.healthChecks - before} times while the relay was silent`);
    sock.destroy();
    await node.close();
  });

  test('a silent connection of a live node that keeps being written to is checked less and less often, with one timer', async () => {
    const { url, state } = await echoNode();
    const node = new RemoteNode({ id: 'node-upload', url, auth: signer, relayProbeMs: 100 });
    const sock = await node.dialAgent('sbx1', 20_000);
    assert.equal(await echoOnce(sock, 'hello'), 'hello');
    // An upload the sandbox answers only at its end: the client writes, the relay says nothing.
    state.delayMs = 60_000;
    const before = state.healthChecks;
    for (const end = Date.now() + 2500; Date.now() < end; ) {
      sock.write('x'.repeat(1024));
      await new Promise((r) => setTimeout(r, 10));
    }
    const checks = state.healthChecks - before;
    assert.ok(!sock.destroyed, 'the connection of a live node stays');
    // 0.1 s, then 0.2, 0.4, 0.8 s... apart: a handful in 2.5 s (one every 0.1 s would be 25; a pile of timers, hundreds).
    assert.ok(checks >= 3 && checks <= 6, `${checks} health checks in 2.5 s`);
    sock.destroy();
    await node.close();
  });
});
