// The in-kernel relay (sbx-splice.c) behind the gateway's proxy: exact bytes both ways, a
// kept-alive connection's next request still goes through Node (and its checks), nothing left
// behind when a side goes away, and the JavaScript relay when the helper cannot start.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, request, type IncomingMessage, type Server } from 'node:http';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { unixDial } from '../testing/fake-node.js';
import { DialAgent, proxyToAgent } from './proxy.js';
import { ensureSpliceHelper, liveSpliceHelpers, SpliceRelay, startedSpliceHelpers } from './splice.js';
import { relayAnswerHead } from './tunnel.js';

const MiB = 1024 * 1024;
const BIG = randomBytes(8 * MiB + 123);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let dir: string;
let bin: string;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sbx-splice-'));
  bin = await ensureSpliceHelper(join(dir, 'bin'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** Resolves once no helper runs (they end asynchronously after their sockets close). */
async function noHelpers(): Promise<void> {
  for (let i = 0; i < 100 && liveSpliceHelpers() > 0; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(liveSpliceHelpers(), 0, 'a helper outlived its connection');
}

function openFds(): number {
  return readdirSync('/proc/self/fd').length;
}

/** An "agent" on a unix socket and the gateway's proxy in front of it on TCP. */
async function rig(splice: SpliceRelay, idleMs = 2_000) {
  const sock = join(dir, `agent-${Math.random().toString(36).slice(2)}.sock`);
  const seen: string[] = [];
  const agent = createHttpServer((req, res) => {
    seen.push(`${req.method} ${req.url} auth=${req.headers.authorization ?? '-'}`);
    if (req.url === '/big') {
      res.writeHead(200, { 'content-length': BIG.length });
      res.end(BIG);
    } else if (req.url === '/dies') {
      res.writeHead(200, { 'content-length': BIG.length });
      res.write(BIG.subarray(0, 3 * MiB), () => res.socket?.destroy());
    } else if (req.url === '/stall') {
      res.writeHead(200, { 'content-length': BIG.length });
      res.write(BIG.subarray(0, 3 * MiB));
    } else if (req.url === '/smuggle') {
      // A hostile agent: a second answer straight after the body, as if to a request never made.
      const extra = 'HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nsmuggled';
      res.socket!.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${BIG.length}\r\n\r\n`), BIG, Buffer.from(extra)]));
    } else if (req.url === '/upload') {
      const h = createHash('sha256');
      let n = 0;
      req.on('data', (c: Buffer) => {
        h.update(c);
        n += c.length;
      });
      req.on('end', () => res.end(JSON.stringify({ n, sha: h.digest('hex') })));
    } else {
      res.end('small');
    }
  });
  await new Promise<void>((r) => agent.listen(sock, () => r()));
  const upstream = new DialAgent(() => unixDial(sock));
  const front: Server = createHttpServer((req, res) => {
    // The gateway's per-request check: a request without the credential never reaches the agent.
    if (req.headers.authorization !== 'Bearer ok') {
      res.writeHead(401, { 'content-length': 6 });
      return res.end('denied');
    }
    proxyToAgent(req, res, { sandboxId: 'sb', agent: upstream, splice }, 'rid', { headersMs: 10_000, idleMs });
  });
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', () => r()));
  const port = (front.address() as { port: number }).port;
  return {
    port,
    seen,
    async close() {
      upstream.destroy();
      front.closeAllConnections();
      await new Promise((r) => front.close(r));
      agent.closeAllConnections();
      await new Promise((r) => agent.close(r));
    },
  };
}

function get(port: number, path: string, sockAgent?: import('node:http').Agent, body?: Buffer): Promise<{ status: number; body: Buffer; res: IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: body ? 'POST' : 'GET', agent: sockAgent, headers: { authorization: 'Bearer ok', ...(body ? { 'content-length': body.length } : {}) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks), res }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('in-kernel relay', () => {
  test('a large download arrives exactly, and the next request on the connection is still checked', async () => {
    const r = await rig(new SpliceRelay(MiB, bin));
    try {
      // One connection (raw), two requests: the second without the credential.
      const started = startedSpliceHelpers();
      const s = connect(r.port, '127.0.0.1');
      const chunks: Buffer[] = [];
      s.on('data', (c: Buffer) => chunks.push(c));
      s.write('GET /big HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ok\r\n\r\n');
      const want = BIG.length;
      for (let i = 0; i < 500 && Buffer.concat(chunks).length < want; i++) await new Promise((res) => setTimeout(res, 10));
      s.write('GET /small HTTP/1.1\r\nhost: x\r\n\r\n');
      for (let i = 0; i < 200 && !Buffer.concat(chunks).toString('latin1').includes('denied'); i++) await new Promise((res) => setTimeout(res, 10));
      s.destroy();
      const all = Buffer.concat(chunks);
      const headEnd = all.indexOf('\r\n\r\n');
      assert.match(all.subarray(0, headEnd).toString(), /^HTTP\/1\.1 200/);
      assert.equal(sha(all.subarray(headEnd + 4, headEnd + 4 + want)), sha(BIG));
      const second = all.subarray(headEnd + 4 + want).toString('latin1');
      assert.match(second, /^HTTP\/1\.1 401/);
      assert.ok(second.endsWith('denied'));
      assert.deepEqual(r.seen, ['GET /big auth=-']);
      assert.equal(startedSpliceHelpers(), started + 1, 'the body went through the helper');
      await noHelpers();
    } finally {
      await r.close();
    }
  });

  test('bytes an agent sends past the body never reach the client', async () => {
    const r = await rig(new SpliceRelay(MiB, bin));
    try {
      const ka = new (await import('node:http')).Agent({ keepAlive: true, maxSockets: 1 });
      const first = await get(r.port, '/smuggle', ka);
      assert.equal(sha(first.body), sha(BIG));
      const second = await get(r.port, '/small', ka);
      assert.equal(second.body.toString(), 'small');
      ka.destroy();
      await noHelpers();
    } finally {
      await r.close();
    }
  });

  test('a large upload arrives exactly and its connection is closed after the answer', async () => {
    const r = await rig(new SpliceRelay(MiB, bin));
    try {
      const started = startedSpliceHelpers();
      const got = await get(r.port, '/upload', undefined, BIG);
      assert.equal(got.status, 200);
      assert.equal(startedSpliceHelpers(), started + 1, 'the body went through the helper');
      assert.deepEqual(JSON.parse(got.body.toString()), { n: BIG.length, sha: sha(BIG) });
      assert.equal(got.res.headers.connection, 'close');
      // Small bodies keep their connection.
      const small = await get(r.port, '/upload', undefined, Buffer.from('hello'));
      assert.equal(JSON.parse(small.body.toString()).n, 5);
      assert.notEqual(small.res.headers.connection, 'close');
      await noHelpers();
    } finally {
      await r.close();
    }
  });

  test('an agent that dies mid-body cuts the client, and leaves no helper or descriptor', async () => {
    const r = await rig(new SpliceRelay(MiB, bin));
    try {
      const before = openFds();
      await assert.rejects(get(r.port, '/dies'));
      await noHelpers();
      // An aborted client: the helper goes with its connection.
      await new Promise<void>((resolve) => {
        const req = request({ host: '127.0.0.1', port: r.port, path: '/big', headers: { authorization: 'Bearer ok' } }, (res) => {
          res.once('data', () => {
            req.destroy();
            resolve();
          });
        });
        req.on('error', () => undefined);
        req.end();
      });
      await noHelpers();
      await new Promise((res) => setTimeout(res, 100));
      assert.ok(openFds() <= before + 2, `descriptors: ${before} before, ${openFds()} after`);
    } finally {
      await r.close();
    }
  });

  test('a body that stalls is cut after the idle timeout, helper and all', async () => {
    const r = await rig(new SpliceRelay(MiB, bin), 300);
    try {
      const started = Date.now();
      await assert.rejects(get(r.port, '/stall'));
      assert.ok(Date.now() - started < 3_000, `cut after ${Date.now() - started} ms`);
      await noHelpers();
    } finally {
      await r.close();
    }
  });

  test('a helper that cannot start leaves the JavaScript relay', async () => {
    const r = await rig(new SpliceRelay(MiB, join(dir, 'no-such-helper')));
    try {
      const started = startedSpliceHelpers();
      const got = await get(r.port, '/big');
      assert.equal(sha(got.body), sha(BIG));
      const up = await get(r.port, '/upload', undefined, BIG);
      assert.deepEqual(JSON.parse(up.body.toString()), { n: BIG.length, sha: sha(BIG) });
      assert.equal(startedSpliceHelpers(), started);
      await noHelpers();
    } finally {
      await r.close();
    }
  });

  for (const helper of ['the helper', 'the JavaScript relay (the helper cannot start)'])
  test(`an upgraded connection carries exact bytes both ways, with a half-close: ${helper}`, async () => {
    const useBin = helper === 'the helper' ? bin : join(dir, 'no-such-helper');
    // An echo peer that answers what it got and closes once the other side half-closed.
    const echo = createServer({ allowHalfOpen: true }, (s) => {
      s.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nset-cookie: a=1\r\n\r\n');
      const h = createHash('sha256');
      let n = 0;
      s.on('data', (c: Buffer) => {
        h.update(c);
        n += c.length;
        s.write(c);
      });
      s.on('end', () => s.end(`|${n}|${h.digest('hex')}`));
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', () => r()));
    const relay = createServer({ allowHalfOpen: true }, (client) => {
      const up = connect({ port: (echo.address() as { port: number }).port, host: '127.0.0.1', allowHalfOpen: true });
      up.on('connect', () => {
        client.pipe(up);
        // The answer's head is relayed by Node; after a MiB either way, the rest goes to the helper.
        relayAnswerHead(up, client, undefined, { splice: new SpliceRelay(MiB, useBin), idleMs: 5_000 });
      });
    });
    await new Promise<void>((r) => relay.listen(0, '127.0.0.1', () => r()));
    try {
      const started = startedSpliceHelpers();
      const c = connect({ port: (relay.address() as { port: number }).port, host: '127.0.0.1', allowHalfOpen: true });
      const back: Buffer[] = [];
      c.on('data', (b: Buffer) => back.push(b));
      const closed = new Promise((r) => c.on('close', r));
      c.end(BIG);
      await closed;
      const answer = Buffer.concat(back);
      const head = 'HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n';
      assert.equal(answer.subarray(0, head.length).toString(), head, 'the answer head is relayed, its cookie dropped');
      const all = answer.subarray(head.length);
      assert.equal(sha(all.subarray(0, BIG.length)), sha(BIG));
      assert.equal(all.subarray(BIG.length).toString(), `|${BIG.length}|${sha(BIG)}`);
      assert.equal(startedSpliceHelpers(), started + (useBin === bin ? 1 : 0));
      await noHelpers();
    } finally {
      relay.close();
      echo.close();
    }
  });

  test('the helper refuses bad arguments', async () => {
    const { spawnSync } = await import('node:child_process');
    assert.equal(spawnSync(bin, ['copy', '-1', '10']).status, 2);
    assert.equal(spawnSync(bin, ['relay']).status, 2);
    // No sockets to relay between: it did not start, nothing was moved.
    assert.equal(spawnSync(bin, ['relay', '100'], { stdio: ['ignore', 'ignore', 'ignore'] }).status, 3);
  });
});
