// The gateway against a hostile "agent": a unix socket server that answers with whatever a sandbox
// that took over its agent's socket could send. Every answer must end as a clean 502 (or a cut
// connection once a response is under way) for that one client, and the gateway must go on serving.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SqliteStore } from '../store/sqlite.js';
import { ConnectionLimits, REFUSED_PER_CLIENT } from '../services/connections.js';
import { KeyService } from '../services/keys.js';
import { RouteTable } from './routes.js';
import { unixDial } from '../testing/fake-node.js';
import { TokenService } from '../services/tokens.js';
import type { Config } from '../config/index.js';
import { Gateway } from './gateway.js';

/** What the hostile agent writes for a request path; `null`: never answer. */
const ANSWERS: Record<string, string | Buffer | null | ((s: Socket, head: string) => void)> = {
  '/echo-head': (s, head) => s.write(`HTTP/1.1 200 OK\r\ncontent-length: ${Buffer.byteLength(head)}\r\n\r\n${head}`),
  '/ok': 'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}',
  '/status000': 'HTTP/1.1 000 Zero\r\ncontent-length: 0\r\n\r\n',
  '/status999': 'HTTP/1.1 999 Nine\r\ncontent-length: 0\r\n\r\n',
  '/status099': 'HTTP/1.1 099 Low\r\ncontent-length: 0\r\n\r\n',
  '/status-text': 'HTTP/1.1 abc Words\r\ncontent-length: 0\r\n\r\n',
  '/not-http': 'SSH-2.0-OpenSSH_9.2\r\n\r\n',
  '/bad-header-name': 'HTTP/1.1 200 OK\r\nX\u0001Bad: 1\r\ncontent-length: 0\r\n\r\n',
  '/nul-in-value': 'HTTP/1.1 200 OK\r\nX-Bad: a\u0000b\r\ncontent-length: 0\r\n\r\n',
  '/cr-in-value': 'HTTP/1.1 200 OK\r\nX-Bad: a\rb\r\ncontent-length: 0\r\n\r\n',
  '/huge-headers': `HTTP/1.1 200 OK\r\n${'X-Filler: '.concat('y'.repeat(8000), '\r\n').repeat(20)}content-length: 0\r\n\r\n`,
  '/two-lengths': 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 7\r\n\r\nhello',
  '/short-body': 'HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nonly this',
  '/bad-chunks': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nnot hex\r\n',
  '/upgrade-unasked': 'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n\u0081\u0005hello',
  '/endless-1xx': (s) => {
    const t = setInterval(() => s.write('HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n'), 1);
    s.on('close', () => clearInterval(t));
  },
  '/silent': null,
  '/stall-body': 'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nstarted ',
  '/endless-body': (s) => {
    s.write('HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n\r\n');
    const chunk = Buffer.alloc(64 * 1024, 120);
    const pump = () => {
      while (!s.destroyed && s.write(chunk));
      if (!s.destroyed) s.once('drain', pump);
    };
    pump();
  },
  '/two-responses': 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 000 Smuggled\r\ncontent-length: 0\r\n\r\n',
};

class HostileAgent {
  readonly server: Server;
  readonly sockets = new Set<Socket>();
  constructor(readonly path: string) {
    this.server = createServer((s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
      s.on('error', () => undefined);
      let buf = '';
      s.on('data', (d) => {
        buf += d.toString('latin1');
        for (let end = buf.indexOf('\r\n\r\n'); end >= 0; end = buf.indexOf('\r\n\r\n')) {
          const head = buf.slice(0, end);
          buf = buf.slice(end + 4);
          const path = head.split(' ')[1] ?? '/';
          const answer = path in ANSWERS ? ANSWERS[path]! : ANSWERS['/ok']!;
          if (answer === null) continue;
          if (typeof answer === 'function') answer(s, head);
          else s.write(answer);
        }
      });
    });
  }
  listen(): Promise<void> {
    return new Promise((r) => this.server.listen(this.path, () => r()));
  }
  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

interface Answer {
  status: number;
  body: string;
  /** The connection was cut after the response had started. */
  cut: boolean;
}

function get(port: number, path: string, token: string, opts: { timeoutMs?: number; readBytes?: number } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, headers: { authorization: `Bearer ${token}` }, agent: false }, (res) => {
      let body = '';
      let read = 0;
      res.on('data', (c: Buffer) => {
        read += c.length;
        if (body.length < 4096) body += c.toString();
        if (opts.readBytes !== undefined && read >= opts.readBytes) {
          res.destroy();
          resolve({ status: res.statusCode!, body, cut: false });
        }
      });
      res.on('end', () => resolve({ status: res.statusCode!, body, cut: false }));
      res.on('error', () => resolve({ status: res.statusCode!, body, cut: true }));
      res.on('aborted', () => resolve({ status: res.statusCode!, body, cut: true }));
    });
    req.setTimeout(opts.timeoutMs ?? 10_000, () => req.destroy(new Error(`no answer to ${path}`)));
    // The gateway cut the connection before a response started (a body broke before its first byte).
    req.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' ? resolve({ status: 0, body: '', cut: true }) : reject(err)));
    req.end();
  });
}

describe('gateway: everything from a sandbox is hostile input', { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-gateway-'));
  const socketPath = join(dir, 'agent.sock');
  const logged: Record<string, unknown>[] = [];
  const agent = new HostileAgent(socketPath);
  const store = SqliteStore.open(':memory:');
  const tokens = new TokenService(join(dir, 'jwt.pem'), 600);
  const routes = new RouteTable();
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown) => uncaught.push(err);
  let gateway: Gateway;
  let port: number;
  let token: string;
  const config: Config['gateway'] = {
    mode: 'port',
    bindHost: '127.0.0.1',
    publicHostname: '127.0.0.1',
    portMin: 47100,
    portMax: 47199,
    domain: '',
    hostModePort: 0,
    idleTimeoutMs: 1500,
    responseHeadersTimeoutMs: 1500,
  };

  before(async () => {
    process.on('uncaughtException', onUncaught);
    process.on('unhandledRejection', onUncaught);
    await agent.listen();
    gateway = new Gateway({
      config,
      routes,
      tokens,
      keys: new KeyService(store),
      portUsed: async () => false,
      connections: new ConnectionLimits({ perClient: 1000, perOrg: 1000, total: 1000 }),
      log: (msg, extra) => logged.push({ msg, ...extra }),
    });
    routes.set({ sandboxId: 'sbhostile', orgId: 'org_a', status: 'running', dial: unixDial(socketPath), port: null });
    port = (await gateway.open('sbhostile', null))!;
    token = (await tokens.issue('sbhostile', 'org_a')).token;
  });

  after(async () => {
    await gateway?.closeAll();
    await agent.close();
    process.off('uncaughtException', onUncaught);
    process.off('unhandledRejection', onUncaught);
    rmSync(dir, { recursive: true, force: true });
  });

  const clean502 = async (path: string) => {
    const r = await get(port, path, token);
    assert.equal(r.status, 502, `${path}: ${r.status} ${r.body}`);
    const body = JSON.parse(r.body) as { code: string; message: string; id: string; retry_after: number; incident_id: string };
    assert.equal(body.code, 'AGENT_UNAVAILABLE', path);
    assert.equal(body.id, 'sbhostile');
    // An outage as renderError makes it: retry_after, an incident the log carries, no host path.
    assert.equal(body.retry_after, 1);
    assert.ok(logged.some((l) => l.incident_id === body.incident_id && l.request_id), `${path}: incident ${body.incident_id} not logged`);
    assert.ok(!r.body.includes(dir), `${path}: ${r.body}`);
    return body.message;
  };

  test("the client's credentials and the daemon's own boot probe header never reach the agent", async () => {
    const r = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const headers = { authorization: `Bearer ${token}`, 'x-api-key': 'sbd_x', 'x-sandboxd-probe': 'boot', 'x-mine': 'kept' };
      const req = httpRequest({ host: '127.0.0.1', port, path: '/echo-head', headers, agent: false }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal(r.status, 200);
    assert.match(r.body, /^x-mine: kept$/im);
    for (const h of ['authorization', 'x-api-key', 'x-sandboxd-probe']) assert.doesNotMatch(r.body, new RegExp(`^${h}:`, 'im'), h);
  });

  test('an upgrade nobody asked for is refused at once', async () => {
    const t0 = Date.now();
    assert.match(await clean502('/upgrade-unasked'), /switched protocols/);
    assert.ok(Date.now() - t0 < 1000);
  });

  for (const path of ['/status000', '/status999', '/status099', '/status-text', '/not-http', '/bad-header-name', '/nul-in-value', '/cr-in-value',
    '/huge-headers', '/two-lengths', '/upgrade-unasked', '/endless-1xx']) {
    test(`${path} → 502 for that client only`, async () => {
      await clean502(path);
      assert.equal((await get(port, '/ok', token)).body, '{"ok":true}', 'the next request is served');
    });
  }

  test('a body that breaks before its first byte: the client connection is cut, the gateway goes on', async () => {
    const r = await get(port, '/bad-chunks', token);
    assert.ok(r.status === 502 || r.cut, JSON.stringify(r));
    assert.equal((await get(port, '/ok', token)).body, '{"ok":true}');
  });

  test('an agent that never answers → 502 after the response headers timeout', async () => {
    const t0 = Date.now();
    assert.match(await clean502('/silent'), /sent no response within/);
    assert.ok(Date.now() - t0 >= 1400, 'not before the timeout');
  });

  test('a body that stops moving is cut after the idle timeout; one shorter than announced is cut', async () => {
    for (const path of ['/stall-body', '/short-body']) {
      const r = await get(port, path, token);
      assert.equal(r.status, 200);
      assert.equal(r.cut, true, path);
    }
  });

  test('an endless body streams to a client that reads it, and stops when the client goes', async () => {
    const r = await get(port, '/endless-body', token, { readBytes: 8 * 1024 * 1024 });
    assert.equal(r.status, 200);
    // The client went away: the gateway drops its upstream connection, so the agent's writes end.
    for (let i = 0; i < 100 && agent.sockets.size > 1; i++) await new Promise((res) => setTimeout(res, 20));
    assert.ok(agent.sockets.size <= 1, `upstream connections left: ${agent.sockets.size}`);
  });

  test('a smuggled second response on a kept-alive connection does not reach another request unchecked', async () => {
    const first = await get(port, '/two-responses', token);
    assert.equal(first.status, 200);
    assert.equal(first.body, 'ok');
    const second = await get(port, '/ok', token);
    assert.ok(second.status === 200 || second.status === 502, `got ${second.status}`);
    assert.equal((await get(port, '/ok', token)).status, 200);
  });

  test('a WebSocket tunnel whose agent says nothing is closed after the idle timeout', async () => {
    const s = connect(port, '127.0.0.1');
    await new Promise((r) => s.once('connect', r));
    s.write(`GET /silent HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
    const t0 = Date.now();
    await new Promise((r) => s.once('close', r));
    assert.ok(Date.now() - t0 >= 1400 && Date.now() - t0 < 5000, `closed after ${Date.now() - t0} ms`);
  });

  test('nothing escaped as an exception', () => {
    assert.deepEqual(uncaught, []);
  });
});

describe('gateway: API key scopes and connection caps', { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-gateway-caps-'));
  const socketPath = join(dir, 'agent.sock');
  const agent = new HostileAgent(socketPath);
  const store = SqliteStore.open(':memory:');
  const keys = new KeyService(store);
  const tokens = new TokenService(join(dir, 'jwt.pem'), 600);
  const routes = new RouteTable();
  const limits = new ConnectionLimits({ perClient: 8, perOrg: 6, total: 100 });
  let gateway: Gateway;
  const port: Record<string, number> = {};
  const token: Record<string, string> = {};
  let readKey = '';
  let writeKey = '';

  before(async () => {
    await agent.listen();
    gateway = new Gateway({
      config: {
        mode: 'port', bindHost: '127.0.0.1', publicHostname: '127.0.0.1', portMin: 47200, portMax: 47299, domain: '', hostModePort: 0,
        idleTimeoutMs: 60_000, responseHeadersTimeoutMs: 60_000,
      },
      routes,
      tokens,
      keys,
      portUsed: async () => false,
      connections: limits,
      log: () => undefined,
    });
    const a = await keys.createOrg('org-a');
    const b = await keys.createOrg('org-b');
    readKey = (await keys.createKey(a.id, { scopes: ['sandboxes:read'] })).secret;
    writeKey = (await keys.createKey(a.id, { scopes: ['sandboxes:write'] })).secret;
    for (const [id, org] of [['sba', a.id], ['sbb', b.id]] as const) {
      routes.set({ sandboxId: id, orgId: org, status: 'running', dial: unixDial(socketPath), port: null });
      port[id] = (await gateway.open(id, null))!;
      token[id] = (await tokens.issue(id, org)).token;
    }
  });

  after(async () => {
    await gateway?.closeAll();
    await agent.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const call = (p: number, method: string, headers: Record<string, string>, localAddress = '127.0.0.1') =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: p, path: '/ok', method, headers, agent: false, localAddress }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      });
      req.on('error', reject);
      req.end();
    });

  test('an API key needs sandboxes:read for GET and sandboxes:write for anything else', async () => {
    assert.equal((await call(port.sba!, 'GET', { 'x-api-key': readKey })).status, 200);
    const post = await call(port.sba!, 'POST', { 'x-api-key': readKey });
    assert.equal(post.status, 403);
    assert.match(post.body, /sandboxes:write/);
    assert.equal((await call(port.sba!, 'POST', { 'x-api-key': writeKey })).status, 200);
    assert.equal((await call(port.sbb!, 'GET', { 'x-api-key': writeKey })).status, 403, "another organization's sandbox");
  });

  /** A raw WebSocket upgrade the hostile agent never answers: it holds a tunnel open. */
  const holdTunnel = async (p: number, auth: string, localAddress = '127.0.0.1') => {
    const s = connect({ port: p, host: '127.0.0.1', localAddress });
    s.on('error', () => undefined);
    await new Promise((r) => s.once('connect', r));
    s.write(`GET /silent HTTP/1.1\r\nhost: x\r\n${auth}\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
    let first = '';
    s.on('data', (d) => (first ||= d.toString()));
    return { socket: s, answer: () => first };
  };

  test('an organization past its cap gets 429 on new tunnels and requests; another organization is still served', async () => {
    const held = [];
    for (let i = 0; i < 6; i++) held.push(await holdTunnel(port.sba!, `authorization: Bearer ${token.sba}`, '127.0.0.2'));
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(limits.usage().orgs[routes.get('sba')!.orgId], 6);
    const over = await holdTunnel(port.sba!, `authorization: Bearer ${token.sba}`, '127.0.0.3');
    await new Promise((r) => setTimeout(r, 200));
    assert.match(over.answer(), /^HTTP\/1.1 429 /);
    assert.match(over.answer(), /SANDBOXD_MAX_CONNECTIONS_PER_ORG/);
    const get = await call(port.sba!, 'GET', { authorization: `Bearer ${token.sba}` }, '127.0.0.3');
    assert.equal(get.status, 429);
    assert.equal((await call(port.sbb!, 'GET', { authorization: `Bearer ${token.sbb}` }, '127.0.0.3')).status, 200, 'org b is served');
    for (const h of held) h.socket.destroy();
    over.socket.destroy();
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(limits.usage().orgs[routes.get('sba')!.orgId], undefined, 'slots come back when tunnels close');
    assert.equal((await call(port.sba!, 'GET', { authorization: `Bearer ${token.sba}` })).status, 200);
  });

  test('a client past its cap gets 429 and is closed; another client is still served', async () => {
    const held = [];
    for (let i = 0; i < 8; i++) {
      const s = connect({ port: port.sbb!, host: '127.0.0.1', localAddress: '127.0.0.4' });
      s.on('error', () => undefined);
      await new Promise((r) => s.once('connect', r));
      held.push(s);
    }
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(limits.usage().clients['127.0.0.4'], 8);
    const over = await call(port.sbb!, 'GET', { authorization: `Bearer ${token.sbb}` }, '127.0.0.4');
    assert.equal(over.status, 429);
    assert.match(over.body, /SANDBOXD_MAX_CONNECTIONS_PER_CLIENT/);
    assert.equal((await call(port.sbb!, 'GET', { authorization: `Bearer ${token.sbb}` }, '127.0.0.5')).status, 200, 'another client is served');
    for (const s of held) s.destroy();
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(limits.usage().clients['127.0.0.4'], undefined);
    assert.equal((await call(port.sbb!, 'GET', { authorization: `Bearer ${token.sbb}` }, '127.0.0.4')).status, 200);
  });

  test("one client's refused connections cannot fill the total: trickling a byte each second, it holds at most its cap plus a few for 5 s; others are served", async () => {
    // total is 100: before, the 92 connections past this client's cap of 8 all stayed (a byte
    // every few seconds reset their linger) and every other client was closed unread.
    const socks: import('node:net').Socket[] = [];
    let closed = 0;
    for (let i = 0; i < 150; i++) {
      const s = connect({ port: port.sbb!, host: '127.0.0.1', localAddress: '127.0.0.6' });
      s.on('error', () => undefined);
      s.on('close', () => closed++);
      socks.push(s);
    }
    await Promise.all(socks.map((s) => new Promise((r) => (s.readyState === 'open' ? r(null) : s.once('connect', r).once('close', r)))));
    // A request whose headers never end: one more byte of a header value each second.
    for (const s of socks) if (!s.destroyed) s.write('GET /ok HTTP/1.1\r\nhost: x\r\nx-pad: ');
    const trickle = setInterval(() => {
      for (const s of socks) if (!s.destroyed) s.write('a');
    }, 1000);
    try {
      await new Promise((r) => setTimeout(r, 300));
      assert.ok(150 - closed <= 8 + REFUSED_PER_CLIENT, `${150 - closed} of its connections are open`);
      assert.equal((await call(port.sbb!, 'GET', { authorization: `Bearer ${token.sbb}` }, '127.0.0.7')).status, 200, 'another client is served');
      await new Promise((r) => setTimeout(r, 6000));
      assert.equal(150 - closed, 8, 'refused connections are closed after their linger, trickle or not');
      assert.equal((await call(port.sbb!, 'GET', { authorization: `Bearer ${token.sbb}` }, '127.0.0.7')).status, 200);
    } finally {
      clearInterval(trickle);
      for (const s of socks) s.destroy();
    }
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(limits.usage().open, 0);
  });
});

/**
 * `n` consecutive ports free on 127.0.0.1, below the kernel's ephemeral range (32768 up), so no
 * outgoing connection of another test takes one while this test counts on it being free.
 */
async function freeRange(n: number): Promise<number> {
  const free = (port: number) =>
    new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
  for (let tries = 0; tries < 50; tries++) {
    const base = 20_000 + Math.floor(Math.random() * 12_000);
    let ok = true;
    for (let p = base; ok && p < base + n; p++) ok = await free(p);
    if (ok) return base;
  }
  throw new Error(`no ${n} consecutive free ports found`);
}

describe('gateway ports', () => {
  test('ports go round the range from the last one handed out, skipping those a sandbox holds (also a stopped one) and those taken by another process', async () => {
    const b = await freeRange(6);
    const held = new Set([b + 2, b + 3]);
    const asked: number[] = [];
    const gateway = new Gateway({
      config: {
        mode: 'port', bindHost: '127.0.0.1', publicHostname: '127.0.0.1', portMin: b, portMax: b + 5, domain: '', hostModePort: 0,
        idleTimeoutMs: 60_000, responseHeadersTimeoutMs: 60_000,
      },
      routes: new RouteTable(),
      tokens: new TokenService(join(mkdtempSync(join(tmpdir(), 'gw-ports-')), 'jwt.pem'), 600),
      keys: new KeyService(SqliteStore.open(':memory:')),
      portUsed: async (p) => (asked.push(p), held.has(p)),
      connections: new ConnectionLimits({ perClient: 10, perOrg: 10, total: 10 }),
      log: () => undefined,
    });
    const squatter = createServer();
    await new Promise<void>((r) => squatter.listen(b + 4, '127.0.0.1', r));
    try {
      assert.equal(await gateway.open('sb1', null), b);
      assert.deepEqual(asked, [b], 'one look when the next port is free');
      assert.equal(await gateway.open('sb2', null), b + 1);
      assert.equal(await gateway.open('sb3', null), b + 5, 'held by sandboxes: b+2, b+3; another process listens on b+4');
      await gateway.close('sb1');
      assert.equal(await gateway.open('sb4', null), b, 'round the range to the port sb1 freed');
      await assert.rejects(gateway.open('sb5', null), new RegExp(`no free gateway port in ${b}-${b + 5}`));
      assert.equal(await gateway.open('sb2', null), b + 1, 'a sandbox that has its port keeps it');
    } finally {
      await gateway.closeAll();
      await new Promise((r) => squatter.close(r));
    }
  });
});

describe('gateway: browsers (CORS, and credentials offered as a WebSocket subprotocol)', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-gateway-cors-'));
  const socketPath = join(dir, 'agent.sock');
  const store = SqliteStore.open(':memory:');
  const keys = new KeyService(store);
  const tokens = new TokenService(join(dir, 'jwt.pem'), 600);
  const routes = new RouteTable();
  /** What the agent was sent: each request's head, as it arrived. */
  const heads: string[] = [];
  const agent = createServer((s) => {
    s.on('error', () => undefined);
    let buf = '';
    s.on('data', (d) => {
      buf += d.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buf.slice(0, end);
      buf = '';
      heads.push(head);
      if (/^upgrade: websocket$/im.test(head)) {
        const offered = /^sec-websocket-protocol: (.*)$/im.exec(head)?.[1];
        // With headers only the gateway may send: a cookie for the host, a wider CORS.
        s.write(
          `HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\nSet-Cookie: bomb=1; Max-Age=99999\r\naccess-control-allow-origin: https://evil.example\r\n${offered ? `sec-websocket-protocol: ${offered.split(',')[0]!.trim()}\r\n` : ''}\r\nframe-after-head`,
        );
        return;
      }
      // A sandbox that would widen who may read its answers.
      s.write('HTTP/1.1 200 OK\r\naccess-control-allow-origin: https://evil.example\r\naccess-control-allow-credentials: true\r\nset-cookie: bomb=1\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}');
    });
  });
  const limits = new ConnectionLimits({ perClient: 1000, perOrg: 1000, total: 1000 });
  let gateway: Gateway;
  let port = 0;
  let key = '';
  let readKey = '';
  let token = '';

  before(async () => {
    await new Promise<void>((r) => agent.listen(socketPath, () => r()));
    const b = await freeRange(100);
    gateway = new Gateway({
      config: {
        mode: 'port', bindHost: '127.0.0.1', publicHostname: '127.0.0.1', portMin: b, portMax: b + 99, domain: '', hostModePort: 0,
        idleTimeoutMs: 60_000, responseHeadersTimeoutMs: 60_000,
      },
      routes,
      tokens,
      keys,
      portUsed: async () => false,
      connections: limits,
      log: () => undefined,
    });
    const org = await keys.createOrg('org-cors');
    key = (await keys.createKey(org.id, { scopes: ['sandboxes:read', 'sandboxes:write'] })).secret;
    readKey = (await keys.createKey(org.id, { scopes: ['sandboxes:read'] })).secret;
    routes.set({ sandboxId: 'sbcors', orgId: org.id, status: 'running', dial: unixDial(socketPath), port: null });
    port = (await gateway.open('sbcors', null))!;
    token = (await tokens.issue('sbcors', org.id)).token;
  });

  after(async () => {
    await gateway?.closeAll();
    await new Promise((r) => agent.close(r));
    rmSync(dir, { recursive: true, force: true });
  });

  const send = (method: string, headers: Record<string, string>) =>
    new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, path: '/files/list', method, headers, agent: false }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      });
      req.on('error', reject);
      req.end();
    });

  test('a preflight is answered by the gateway, without credentials, and never reaches the sandbox', async () => {
    const before = heads.length;
    const r = await send('OPTIONS', { origin: 'http://127.0.0.1:8080', 'access-control-request-method': 'POST', 'access-control-request-headers': 'x-api-key, content-type' });
    assert.equal(r.status, 204);
    assert.equal(r.headers['access-control-allow-origin'], '*');
    assert.match(String(r.headers['access-control-allow-methods']), /POST/);
    assert.equal(r.headers['access-control-allow-headers'], 'x-api-key, content-type');
    assert.equal(heads.length, before);
    // Asked-for headers that are not a list of names are not echoed.
    const odd = await send('OPTIONS', { origin: 'http://x', 'access-control-request-method': 'GET', 'access-control-request-headers': 'a b; c' });
    assert.equal(odd.status, 204);
    assert.equal(odd.headers['access-control-allow-headers'], undefined);
  });

  test("answers from another origin are readable with '*'; the sandbox's own access-control headers are dropped", async () => {
    const ok = await send('GET', { origin: 'http://127.0.0.1:8080', 'x-api-key': key });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers['access-control-allow-origin'], '*');
    assert.equal(ok.headers['access-control-allow-credentials'], undefined);
    assert.equal(ok.headers['set-cookie'], undefined, 'a sandbox sets no cookie for this host');
    assert.match(String(ok.headers['access-control-expose-headers']), /x-request-id/);
    // Errors too, so that a page can read what went wrong.
    const refused = await send('GET', { origin: 'http://127.0.0.1:8080' });
    assert.equal(refused.status, 401);
    assert.equal(refused.headers['access-control-allow-origin'], '*');
    // A plain request's cookies and subprotocol header do not reach the sandbox either.
    const before = heads.length;
    await send('GET', { 'x-api-key': key, cookie: 'corp_sso=SECRET123', 'sec-websocket-protocol': `sandboxd.auth.${key}` });
    const head = heads.slice(before).join('\n');
    assert.ok(!head.includes('SECRET123') && !head.includes(key), head);
    // Without an Origin (not a browser), nothing is added.
    assert.equal((await send('GET', { 'x-api-key': key })).headers['access-control-allow-origin'], undefined);
  });

  /** A raw upgrade offering `protocols`; the first line of the answer. */
  const upgrade = async (protocols: string | undefined, extra = '') => {
    const s = connect({ port, host: '127.0.0.1' });
    s.on('error', () => undefined);
    await new Promise((r) => s.once('connect', r));
    s.write(
      `GET /terminal HTTP/1.1\r\nhost: x\r\norigin: http://127.0.0.1:8080\r\n${extra}${protocols ? `sec-websocket-protocol: ${protocols}\r\n` : ''}upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`,
    );
    const answer = await new Promise<string>((resolve) => {
      let got = '';
      s.on('data', (d) => {
        got += d.toString();
        if (got.includes('\r\n\r\n')) resolve(got);
      });
      s.on('close', () => resolve(got));
    });
    s.destroy();
    return answer;
  };

  test('a WebSocket opens with an API key or the sandbox token offered as a subprotocol, which the agent never sees', async () => {
    for (const credential of [key, token]) {
      const before = heads.length;
      const answer = await upgrade(`sandboxd, sandboxd.auth.${credential}`, 'cookie: corp_sso=SECRET123\r\n');
      assert.match(answer, /^HTTP\/1.1 101/, answer);
      assert.match(answer, /sec-websocket-protocol: sandboxd\r\n/i);
      assert.ok(!/set-cookie|access-control/i.test(answer), `headers only the gateway may send were relayed: ${answer}`);
      assert.ok(answer.endsWith('\r\n\r\nframe-after-head') || answer.endsWith('\r\n\r\n'), answer);
      const head = heads.slice(before).join('\n');
      assert.match(head, /^sec-websocket-protocol: sandboxd$/im);
      assert.ok(!head.includes(credential), 'the credential went on to the sandbox');
      assert.ok(!head.includes('SECRET123'), "the browser's cookies went on to the sandbox");
    }
  });

  test('clients that leave while they are let in hold nothing: no organization slot, no request in flight', async () => {
    // Checking the key takes 50 ms here; each client leaves after 10.
    const authenticate = keys.authenticate.bind(keys);
    keys.authenticate = async (secret) => {
      await new Promise((r) => setTimeout(r, 50));
      return authenticate(secret);
    };
    const leavers = Array.from({ length: 60 }, (_, i) =>
      (async () => {
        const s = connect({ port, host: '127.0.0.1' });
        s.on('error', () => undefined);
        await new Promise((r) => s.once('connect', r));
        const upgrade = i % 2 === 0 ? 'upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n' : '';
        s.write(`GET /files/list HTTP/1.1\r\nhost: x\r\nx-api-key: ${key}\r\n${upgrade}\r\n`);
        await new Promise((r) => setTimeout(r, 10));
        s.destroy();
      })(),
    );
    await Promise.all(leavers);
    await new Promise((r) => setTimeout(r, 500));
    keys.authenticate = authenticate;
    assert.deepEqual(limits.usage().orgs, {});
    assert.equal(gateway.busy('sbcors'), false);
  });

  test('a bad, missing or under-scoped credential in the subprotocol is refused before the agent', async () => {
    const before = heads.length;
    assert.match(await upgrade('sandboxd, sandboxd.auth.sbd_not_a_key'), /^HTTP\/1.1 401/);
    assert.match(await upgrade('sandboxd, sandboxd.auth.'), /^HTTP\/1.1 401/);
    assert.match(await upgrade('sandboxd'), /^HTTP\/1.1 401/);
    assert.match(await upgrade(`sandboxd, sandboxd.auth.${readKey}`), /^HTTP\/1.1 403/, 'a terminal runs code: sandboxes:write');
    // A header credential wins over one offered as a subprotocol (which is then not looked at).
    assert.match(await upgrade(`sandboxd, sandboxd.auth.${key}`, 'x-api-key: sbd_wrong\r\n'), /^HTTP\/1.1 401/);
    assert.equal(heads.length, before);
  });
});
