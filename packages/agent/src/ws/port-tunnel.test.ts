import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { setLogFile } from '../log.js';
import { AgentStats } from '../metrics/stats.js';
import { createAgentServer } from '../server.js';
import { formatIpv6, parseProcNetTcp, portTunnelRoute, tunnelCandidates } from './port-tunnel.js';

// ---- the /proc/net/tcp{,6} parser ----

const TCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1170 1 0000000062014212 100 0 0 10 0
   1: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1171 1 0000000062014213 100 0 0 10 0
   2: 0100007F:0BB8 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 1172 1 0000000062014214 20 4 30 10 -1
   3: 0500000A:0050 00000000:0000 0a 00000000:00000000 00:00000000 00000000     0        0 1173 1 0000000062014215 100 0 0 10 0
   4: garbage
`;

const TCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2001 1 00000000b55ee780 100 0 0 10 0
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2002 1 00000000b55ee781 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2003 1 00000000b55ee782 100 0 0 10 0
   3: B80D0120000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2004 1 00000000b55ee783 100 0 0 10 0
   4: 000080FE00000000FF000000010000FE:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2005 1 00000000b55ee784 100 0 0 10 0
   5: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:B3A2 01 00000000:00000000 00:00000000 00000000     0        0 2006 1 00000000b55ee785 100 0 0 10 0
`;

test('parseProcNetTcp: LISTEN rows of /proc/net/tcp, words read little-endian, the port as plain hex', () => {
  assert.deepEqual(parseProcNetTcp(TCP, 'LE'), [
    { address: '0.0.0.0', port: 8080 },
    { address: '127.0.0.1', port: 3000 },
    { address: '10.0.0.5', port: 80 },
  ]);
});

test('parseProcNetTcp: /proc/net/tcp6 addresses are four little-endian words, printed compressed', () => {
  assert.deepEqual(parseProcNetTcp(TCP6, 'LE'), [
    { address: '::', port: 8080 },
    { address: '::1', port: 8080 },
    { address: '::ffff:7f00:1', port: 8080 },
    { address: '2001:db8::1', port: 8080 },
    { address: 'fe80::ff:fe00:1', port: 8080 },
  ]);
});

test('parseProcNetTcp: a big-endian host prints the bytes in order', () => {
  const line = '   0: 7F000001:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n';
  assert.deepEqual(parseProcNetTcp(line, 'BE'), [{ address: '127.0.0.1', port: 3000 }]);
  const v6 = '   0: 00000000000000000000000000000001:0050 00000000000000000000000000000000:0000 0A 0:0 0:0 0 0 0 1\n';
  assert.deepEqual(parseProcNetTcp(v6, 'BE'), [{ address: '::1', port: 80 }]);
});

test('parseProcNetTcp: the table of this machine holds a socket listening here', async () => {
  const server = await listen('127.0.0.1');
  try {
    const port = (server.address() as AddressInfo).port;
    assert.ok(parseProcNetTcp(readFileSync('/proc/net/tcp', 'utf8')).some((s) => s.address === '127.0.0.1' && s.port === port));
  } finally {
    await close(server);
  }
});

test('formatIpv6: the first longest run of zero groups becomes ::, a single zero group stays', () => {
  const hex = (s: string) => Buffer.from(s, 'hex');
  assert.equal(formatIpv6(hex('20010db8000000000001000000000001')), '2001:db8::1:0:0:1');
  assert.equal(formatIpv6(hex('20010db8000000010000000000000001')), '2001:db8:0:1::1');
  assert.equal(formatIpv6(hex('00010000000200030004000500060007')), '1:0:2:3:4:5:6:7');
  assert.equal(formatIpv6(hex('00000000000000000000000000000000')), '::');
  assert.equal(formatIpv6(hex('fe800000000000000000000000000000')), 'fe80::');
});

test('tunnelCandidates: wildcards become loopback, mapped v6 its v4, the rest as is; no repeats, no 127.0.0.1', () => {
  const sockets = [
    ...parseProcNetTcp(TCP, 'LE'),
    ...parseProcNetTcp(TCP6, 'LE'),
    { address: '::ffff:192.168.1.9', port: 8080 },
    { address: '::ffff:c0a8:10a', port: 8080 },
    { address: '10.0.0.7', port: 8080 },
  ];
  assert.deepEqual(tunnelCandidates(sockets, 8080), ['::1', '2001:db8::1', 'fe80::ff:fe00:1', '192.168.1.9', '192.168.1.10', '10.0.0.7']);
  assert.deepEqual(tunnelCandidates(sockets, 80), ['10.0.0.5']);
  assert.deepEqual(tunnelCandidates(sockets, 3000), []);
  assert.deepEqual(tunnelCandidates(sockets, 9), []);
});

/** A test that waits on sockets fails rather than hangs. */
const IO = { timeout: 15_000 };

// ---- the route, through the agent's server on a unix socket (as the gateway reaches it) ----

const dir = mkdtempSync(join(tmpdir(), 'agent-port-tunnel-test-'));
const socketPath = join(dir, 'agent.sock');
const stats = new AgentStats();
const route = portTunnelRoute({ stats, helperPath: null });
const heads: number[] = [];
const agentServer = createAgentServer(stats, [], [
  {
    path: route.path,
    handler: (req, socket, head, requestId) => {
      heads.push(head.length);
      route.handler(req, socket, head, requestId);
    },
  },
]);

before(async () => {
  setLogFile(join(dir, 'agent.log'));
  await new Promise<void>((r) => agentServer.listen(socketPath, r));
});

after(async () => {
  agentServer.closeAllConnections();
  await new Promise<void>((r) => agentServer.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

function listen(host: string, onConnection: (s: Socket) => void = (s) => s.pipe(s)): Promise<Server> {
  const server = createServer(onConnection);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve(server));
  });
}

function close(server: Server): Promise<void> {
  return new Promise((r) => server.close(() => r()));
}

/** A port nothing listens on (one the kernel just gave out and took back). */
async function freePort(): Promise<number> {
  const s = await listen('127.0.0.1');
  const port = (s.address() as AddressInfo).port;
  await close(s);
  return port;
}

interface Answer {
  status: number;
  head: string;
  /** What came after the response head so far. */
  rest: Buffer;
  socket: Socket;
}

/** Sends the upgrade request (with `head` bytes right behind it) and reads the response head. */
function request(query: string, opts: { upgrade?: string; head?: Buffer; requestId?: string; allowHalfOpen?: boolean; path?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connect({ path: opts.path ?? socketPath, allowHalfOpen: opts.allowHalfOpen ?? false });
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.removeListener('data', onData);
      socket.pause();
      const head = buf.subarray(0, end + 4).toString('latin1');
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1]), head, rest: buf.subarray(end + 4), socket });
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.once('end', () => reject(new Error(`connection ended before a response head: ${buf.toString()}`)));
    const lines = [`GET /ports/tunnel${query} HTTP/1.1`, 'Host: agent', 'Connection: Upgrade', `Upgrade: ${opts.upgrade ?? 'sandboxd-tcp'}`];
    if (opts.requestId) lines.push(`X-Request-ID: ${opts.requestId}`);
    socket.write(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`), opts.head ?? Buffer.alloc(0)]));
  });
}

/** Reads from the answer's socket until `n` bytes came after the head. */
function readBytes(a: Answer, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks = [a.rest];
    let have = a.rest.length;
    a.rest = Buffer.alloc(0);
    const done = () => {
      a.socket.removeListener('data', onData);
      a.socket.removeListener('end', onEnd);
      a.socket.pause();
      const all = Buffer.concat(chunks);
      a.rest = all.subarray(n);
      resolve(all.subarray(0, n));
    };
    const onData = (c: Buffer) => {
      chunks.push(c);
      have += c.length;
      if (have >= n) done();
    };
    const onEnd = () => reject(new Error(`ended after ${have} of ${n} bytes`));
    if (have >= n) return done();
    a.socket.on('data', onData);
    a.socket.once('end', onEnd);
    a.socket.resume();
  });
}

/** The JSON body of an error answer; also checks the connection is closed after it. */
async function errorBody(a: Answer): Promise<Record<string, unknown>> {
  const length = Number(/\r\ncontent-length: (\d+)\r\n/.exec(a.head)?.[1]);
  assert.ok(length > 0, a.head);
  const ended = new Promise<void>((r) => a.socket.once('end', r));
  const body = await readBytes(a, length);
  a.socket.resume();
  await ended;
  a.socket.destroy();
  return JSON.parse(body.toString('utf8')) as Record<string, unknown>;
}

function closed(socket: Socket): Promise<void> {
  return new Promise((r) => (socket.closed ? r() : socket.once('close', () => r())));
}

test('a tunnel to a TCP server on 127.0.0.1 carries bytes both ways, the upgrade head first, with backpressure', IO, async () => {
  const echo = await listen('127.0.0.1');
  try {
    const port = (echo.address() as AddressInfo).port;
    const before = heads.length;
    const a = await request(`?port=${port}`, { head: Buffer.from('early bytes|'), upgrade: 'SandboxD-TCP' });
    assert.equal(a.head, 'HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: sandboxd-tcp\r\n\r\n');
    assert.ok(heads.length === before + 1 && heads[before]! > 0, 'the request and its early bytes arrived together, as the head');
    assert.equal((await readBytes(a, 12)).toString(), 'early bytes|');
    a.socket.write('ping');
    assert.equal((await readBytes(a, 4)).toString(), 'ping');
    // 8 MiB written at once is more than any socket buffer: it only gets through if both pipes
    // pause and resume, and it must come back byte for byte.
    const big = randomBytes(8 * 1024 * 1024);
    a.socket.write(big);
    assert.ok((await readBytes(a, big.length)).equals(big));
    a.socket.destroy();
  } finally {
    await close(echo);
  }
});

test('a server listening on another loopback address only (127.0.0.2) is found in /proc/net/tcp', IO, async (t) => {
  let server: Server;
  try {
    server = await listen('127.0.0.2', (s) => s.end('hello from 127.0.0.2'));
  } catch {
    t.skip('cannot listen on 127.0.0.2 here');
    return;
  }
  try {
    const a = await request(`?port=${(server.address() as AddressInfo).port}`);
    assert.equal(a.status, 101);
    assert.equal((await readBytes(a, 20)).toString(), 'hello from 127.0.0.2');
    await closed(a.socket);
  } finally {
    await close(server);
  }
});

test('a server listening on ::1 only is reached through /proc/net/tcp6', IO, async (t) => {
  let server: Server;
  try {
    server = await listen('::1');
  } catch {
    t.skip('no IPv6 loopback on this machine');
    return;
  }
  try {
    const port = (server.address() as AddressInfo).port;
    const a = await request(`?port=${port}`, { head: Buffer.from('v6?') });
    assert.equal(a.status, 101);
    assert.equal((await readBytes(a, 3)).toString(), 'v6?');
    a.socket.write('yes');
    assert.equal((await readBytes(a, 3)).toString(), 'yes');
    a.socket.destroy();
  } finally {
    await close(server);
  }
});

test('a port nothing listens on is a 502 PORT_NOT_LISTENING, answered at once', IO, async () => {
  const port = await freePort();
  const errorsBefore = stats.totalErrors;
  const started = Date.now();
  const a = await request(`?port=${port}`, { requestId: 'req-closed-port' });
  assert.ok(Date.now() - started < 1000, `took ${Date.now() - started} ms`);
  assert.match(a.head, /^HTTP\/1\.1 502 Bad Gateway\r\n/);
  assert.match(a.head, /\r\ncontent-type: application\/json\r\n/);
  assert.match(a.head, /\r\nx-request-id: req-closed-port\r\n/);
  assert.match(a.head, /\r\nconnection: close\r\n/);
  const body = await errorBody(a);
  assert.deepEqual([body.code, body.message, body.request_id], ['PORT_NOT_LISTENING', `nothing is listening on port ${port} inside the sandbox`, 'req-closed-port']);
  assert.equal(stats.totalErrors, errorsBefore + 1);
});

test('a port that is not one decimal integer from 1 to 65535 is a 400 VALIDATION_ERROR', IO, async () => {
  const echo = await listen('127.0.0.1');
  try {
    const good = (echo.address() as AddressInfo).port;
    const queries = ['?port=0', '?port=65536', '?port=abc', '?port=22x', '', '?port=', '?port=-1', '?port=1.5', '?port=+80', '?port=%2080', `?port=0${good}`, `?port=${good}&port=${good}`, `?prt=${good}`];
    for (const q of queries) {
      const a = await request(q);
      assert.match(a.head, /^HTTP\/1\.1 400 Bad Request\r\n/, `query '${q}'`);
      const body = await errorBody(a);
      assert.equal(body.code, 'VALIDATION_ERROR', `query '${q}'`);
      assert.equal(typeof body.request_id, 'string');
    }
    const tunnels = stats.requestsByPath.get('/ports/tunnel') ?? 0;
    const ok = await request(`?port=${good}`);
    assert.equal(ok.status, 101);
    assert.equal(stats.requestsByPath.get('/ports/tunnel'), tunnels + 1, 'each request counted once');
    ok.socket.destroy();
  } finally {
    await close(echo);
  }
});

test('an Upgrade other than sandboxd-tcp is a 400 VALIDATION_ERROR, and nothing is connected', IO, async () => {
  let connections = 0;
  const echo = await listen('127.0.0.1', (s) => {
    connections++;
    s.destroy();
  });
  try {
    const port = (echo.address() as AddressInfo).port;
    for (const upgrade of ['websocket', 'sandboxd-tcp2', 'tcp']) {
      const a = await request(`?port=${port}`, { upgrade });
      assert.match(a.head, /^HTTP\/1\.1 400 Bad Request\r\n/, upgrade);
      assert.equal((await errorBody(a)).code, 'VALIDATION_ERROR');
    }
    assert.equal(connections, 0);
  } finally {
    await close(echo);
  }
});

async function agentConnections(): Promise<number> {
  return new Promise((resolve, reject) => agentServer.getConnections((err, n) => (err ? reject(err) : resolve(n))));
}

/** Waits until the agent holds no connection (tunnels torn down on its side too). */
async function agentIdle(): Promise<void> {
  const deadline = Date.now() + 2000;
  while ((await agentConnections()) > 0) {
    assert.ok(Date.now() < deadline, `the agent still holds ${await agentConnections()} connection(s)`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('closing the client closes the connection to the target, and the other way round, even with peers that allow half-open sockets', IO, async () => {
  await agentIdle();
  const accepted: Socket[] = [];
  // allowHalfOpen: neither peer closes by itself on an end; the agent has to tear the tunnel down.
  const server = createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    accepted.push(s);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const port = (server.address() as AddressInfo).port;

    const a = await request(`?port=${port}`, { allowHalfOpen: true });
    assert.equal(a.status, 101);
    while (accepted.length < 1) await new Promise((r) => setTimeout(r, 5));
    const first = accepted[0]!;
    const firstEnded = new Promise((r) => first.once('end', r));
    a.socket.destroy();
    await firstEnded;
    await agentIdle();
    // The agent's side is gone: what the target still writes is refused (a reset, then EPIPE).
    const knock = setInterval(() => first.write('anyone?'), 10);
    await closed(first);
    clearInterval(knock);

    const b = await request(`?port=${port}`, { allowHalfOpen: true });
    assert.equal(b.status, 101);
    while (accepted.length < 2) await new Promise((r) => setTimeout(r, 5));
    const second = accepted[1]!;
    // The target's last words reach the client before its end does.
    second.end('bye');
    assert.equal((await readBytes(b, 3)).toString(), 'bye');
    const clientEnded = new Promise((r) => b.socket.once('end', r));
    b.socket.resume();
    await clientEnded;
    second.resume();
    await closed(second);
    await agentIdle();
    b.socket.destroy();
  } finally {
    await close(server);
  }
});

// ---- the same tunnel relayed in the kernel (sbx-helper relay), through a second agent server ----

const kernelSocket = join(dir, 'agent-kernel.sock');
const helperBin = join(dir, 'sbx-helper');
const native = (f: string) => fileURLToPath(new URL(`../../native/${f}`, import.meta.url));
const kernelServer = createAgentServer(stats, [], [portTunnelRoute({ stats, helperPath: helperBin })]);

before(async () => {
  const cc = spawnSync('gcc', ['-O2', '-Wall', '-o', helperBin, native('sbx-helper.c'), native('watch.c')], { encoding: 'utf8' });
  assert.equal(cc.status, 0, cc.stderr);
  await new Promise<void>((r) => kernelServer.listen(kernelSocket, r));
});

after(async () => {
  kernelServer.closeAllConnections();
  await new Promise<void>((r) => kernelServer.close(() => r()));
});

/** The `sbx-helper relay` processes this test process started that still run. */
function relays(): number {
  let n = 0;
  for (const task of readdirSync('/proc/self/task')) {
    for (const pid of readFileSync(`/proc/self/task/${task}/children`, 'utf8').split(' ').filter(Boolean)) {
      try {
        if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes('relay')) n++;
      } catch {
        // gone meanwhile
      }
    }
  }
  return n;
}

async function noRelays(): Promise<void> {
  for (let i = 0; i < 200 && relays() > 0; i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(relays(), 0, 'a relay outlived its tunnel');
}

test('in the kernel: a tunnel carries exact bytes both ways with backpressure, and the target\'s end closes it', IO, async () => {
  const accepted: Socket[] = [];
  const server = createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    accepted.push(s);
    s.pipe(s, { end: false });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const port = (server.address() as AddressInfo).port;
    const a = await request(`?port=${port}`, { head: Buffer.from('early|'), path: kernelSocket, allowHalfOpen: true });
    assert.equal(a.status, 101);
    assert.equal((await readBytes(a, 6)).toString(), 'early|');
    // Small traffic stays in JavaScript; after a MiB the tunnel goes to the kernel.
    a.socket.write('ping');
    assert.equal((await readBytes(a, 4)).toString(), 'ping');
    assert.equal(relays(), 0);
    const big = randomBytes(8 * 1024 * 1024);
    a.socket.write(big);
    assert.ok((await readBytes(a, big.length)).equals(big));
    assert.equal(relays(), 1, 'the bytes go through sbx-helper relay');
    a.socket.write(big);
    assert.ok((await readBytes(a, big.length)).equals(big));
    // The target's last words, then its end: the client gets both, and the tunnel is gone.
    accepted[0]!.end('bye');
    assert.equal((await readBytes(a, 3)).toString(), 'bye');
    const ended = new Promise((r) => a.socket.once('end', r));
    a.socket.resume();
    await ended;
    await noRelays();
    a.socket.destroy();
  } finally {
    // allowHalfOpen: the accepted ends stay open until closed here.
    for (const s of accepted) s.destroy();
    await close(server);
  }
});

test('in the kernel: a client that goes away ends the relay and the connection to the target', IO, async () => {
  const accepted: Socket[] = [];
  const server = createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    accepted.push(s);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const port = (server.address() as AddressInfo).port;
    const a = await request(`?port=${port}`, { path: kernelSocket, allowHalfOpen: true });
    assert.equal(a.status, 101);
    while (accepted.length < 1) await new Promise((r) => setTimeout(r, 5));
    // Enough to hand the tunnel over (the target reads it all).
    accepted[0]!.resume();
    a.socket.write(randomBytes(2 * 1024 * 1024));
    for (let i = 0; i < 200 && relays() === 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(relays(), 1);
    const ended = new Promise((r) => accepted[0]!.once('end', r));
    a.socket.destroy();
    await ended;
    await noRelays();
  } finally {
    // allowHalfOpen: the accepted ends stay open until closed here.
    for (const s of accepted) s.destroy();
    await close(server);
  }
});
