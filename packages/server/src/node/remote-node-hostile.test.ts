// RemoteNode against a compromised node answering control. Whatever it sends, control
// gets an error of that node (RUNTIME_ERROR) in bounded time and memory, never a hang, a crash
// or a value of the wrong shape passed on as the runtime's answer.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ServiceError } from '@sandboxd/protocol';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { RemoteNode } from './remote-node.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

describe('RemoteNode against a hostile node', { timeout: process.env.SANDBOXD_SLOW_TESTS ? 420_000 : 60_000 }, () => {
  let server: Server;
  let url: string;
  let handler: Handler = (_q, s) => s.end();
  let sent = 0;
  const sockets = new Set<Socket>();
  const { signer } = testClusterKeys();
  const remote = (o: { callTimeoutMs?: number } = {}) => new RemoteNode({ id: 'node-h', url, auth: signer, callTimeoutMs: o.callTimeoutMs ?? 5000 });
  // A faulty answer is that node's outage: RUNTIME_ERROR, or NODE_UNAVAILABLE when it cannot be read in time and size.
  const nodeFault = (err: unknown) => err instanceof ServiceError && (err.code === 'RUNTIME_ERROR' || err.code === 'NODE_UNAVAILABLE');

  before(async () => {
    server = createServer((q, s) => handler(q, s));
    server.on('connection', (s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  });

  test('an endless body is cut at a bound, not buffered until the deadline', async () => {
    sent = 0;
    const chunk = Buffer.alloc(1024 * 1024, 0x61);
    handler = (_q, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"ids":["');
      const pump = () => {
        while (!res.destroyed && res.write(chunk)) sent += chunk.length;
        if (!res.destroyed) res.once('drain', pump);
      };
      res.on('error', () => undefined);
      pump();
    };
    const t0 = performance.now();
    await assert.rejects(remote({ callTimeoutMs: 20_000 }).list(), nodeFault);
    assert.ok(sent < 128 * 1024 * 1024, `control read ${Math.round(sent / 1024 / 1024)} MiB of one answer`);
    assert.ok(performance.now() - t0 < 10_000);
  });

  test('a body that stalls after a 200 is an error of the node, not a TypeError', async () => {
    handler = (_q, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"ids":[');
    };
    await assert.rejects(remote({ callTimeoutMs: 500 }).list(), nodeFault);
  });

  test('malformed JSON and answers of the wrong shape are errors of the node', async () => {
    const answer = (body: string) => (handler = (_q, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(body));
    answer('{"ids":');
    await assert.rejects(remote().list(), nodeFault, 'malformed JSON');
    answer('null');
    await assert.rejects(remote().list(), nodeFault, 'null');
    answer('{"ids":[1,{},"../../etc"]}');
    await assert.rejects(remote().list(), nodeFault, 'ids that are not sandbox ids');
    answer('{"ids":"abc"}');
    await assert.rejects(remote().list(), nodeFault, 'ids not a list');
    answer('{"statuses":{"a1":"owned","a2":{"x":1}}}');
    await assert.rejects(remote().statuses(['a1', 'a2']), nodeFault, 'statuses that are not statuses');
    answer('{"statuses":null}');
    await assert.rejects(remote().statuses(['a1']), nodeFault, 'no statuses');
    answer('{"status":"exploded"}');
    await assert.rejects(remote().status('a1'), nodeFault, 'a status that is not one');
    answer('{"ports":"x"}');
    await assert.rejects(remote().listeningPorts('a1'), nodeFault, 'ports not a list');
    answer('{"cpuUsageNs":"lots"}');
    await assert.rejects(remote().stats('a1'), nodeFault, 'stats that are not numbers');
    answer('{"node_id":"node-other"}');
    await assert.rejects(remote().ping(), /is node-other, not node-h/, 'a node claiming another id');
  });

  test('an error answer with a huge or odd body is still the node\'s error', async () => {
    handler = (_q, res) => res.writeHead(500).end(JSON.stringify({ code: 'NOT_A_CODE', message: { x: 1 }, detail: 'x'.repeat(100_000) }));
    await assert.rejects(remote().pause('a1'), nodeFault);
  });

  test('a CONNECT answer trickled a byte at a time does not keep dialAgent waiting past its deadline', async () => {
    const trickle = (_q: IncomingMessage, socket: import('node:stream').Duplex) => {
      socket.on('error', () => undefined);
      const text = 'HTTP/1.1 200 Connection Established\r\n';
      let i = 0;
      const t = setInterval(() => {
        if (socket.destroyed || i >= text.length) return clearInterval(t);
        socket.write(text[i++]!);
      }, 200);
    };
    server.on('connect', trickle);
    try {
      const t0 = performance.now();
      await assert.rejects(remote().dialAgent('a1', 1000), nodeFault);
      assert.ok(performance.now() - t0 < 3000, `gave up after ${Math.round(performance.now() - t0)} ms`);
    } finally {
      server.off('connect', trickle);
    }
  });

  test('an SSE stream of junk and endless lines: only well-formed events arrive, nothing grows', async () => {
    handler = (_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"id":"a1","kills":1}\n\n');
      res.write(`data: ${'x'.repeat(200_000)}`);
      res.write('\n\ndata: not json\n\ndata: {"id":7,"kills":"x"}\n\n');
      res.write('data: {"id":"a2","kills":2}\n\n');
    };
    const got: Array<[string, number]> = [];
    const stop = remote().watchOom((id, n) => got.push([id, n]));
    try {
      for (let i = 0; i < 40 && got.length < 2; i++) await sleep(50);
      assert.deepEqual(got, [['a1', 1], ['a2', 2]]);
    } finally {
      stop();
    }
  });

  // Five minutes and more of waiting: run with SANDBOXD_SLOW_TESTS=1.
  test("a call whose deadline is past 5 min is waited for (fetch's own 300 s headers timeout cut it)", { skip: !process.env.SANDBOXD_SLOW_TESTS, timeout: 400_000 }, async () => {
    handler = (_q, res) =>
      void setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"status":"running"}');
      }, 310_000);
    assert.equal(await remote({ callTimeoutMs: 390_000 }).status('a1'), 'running');
  });
});
