// envd's Connect surface in the gateway, attacked from both sides: a sandbox whose agent answers
// anything (the code in a sandbox can take its agent's socket), and a client that sends anything.
// A real Gateway serves E2B's base URL; the hostile agent is an HTTP server on a unix socket. What
// must hold: the one call fails with a Connect error, the daemon goes on serving, its logs and
// memory stay bounded, and nothing reaches the agent of a request that was not let through.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import type { Config } from '../../config/index.js';
import { ConnectionLimits } from '../../services/connections.js';
import { KeyService } from '../../services/keys.js';
import { TokenService } from '../../services/tokens.js';
import { SqliteStore } from '../../store/sqlite.js';
import { unixDial } from '../../testing/fake-node.js';
import { belowPrefix } from '../e2b.js';
import { Gateway } from '../gateway.js';
import { RouteTable } from '../routes.js';
import { DialAgent } from '../proxy.js';
import { agentFrames, FRAME } from './agent-call.js';

function frame(kind: number, payload: Buffer | string): Buffer {
  const p = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const head = Buffer.alloc(5);
  head[0] = kind;
  head.writeUInt32BE(p.length, 1);
  return Buffer.concat([head, p]);
}

/** A Connect streaming envelope. */
function envelope(flags: number, payload: Buffer | string): Buffer {
  return frame(flags, payload);
}

/** The envelopes of a Connect streaming answer. */
function envelopes(body: Buffer): { flags: number; data: unknown }[] {
  const out: { flags: number; data: unknown }[] = [];
  for (let off = 0; off + 5 <= body.length; ) {
    const len = body.readUInt32BE(off + 1);
    out.push({ flags: body[off]!, data: JSON.parse(body.subarray(off + 5, off + 5 + len).toString()) });
    off += 5 + len;
  }
  return out;
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

const ENTRY = { name: 'x', type: 'file', path: '/x', size: 1, mode: 0o644, permissions: '-rw-r--r--', owner: 'user', group: 'user', mtime_ms: 0 };

describe('gateway envd: a hostile sandbox, a hostile client', { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-envd-hostile-'));
  const socketPath = join(dir, 'agent.sock');
  const otherSocket = join(dir, 'other.sock');
  const store = SqliteStore.open(':memory:');
  const tokens = new TokenService(join(dir, 'jwt.pem'), 600);
  const routes = new RouteTable();
  const keys = new KeyService(store);
  const logs: string[] = [];
  /** What the hostile agent answers, by path; and the paths it was asked. */
  const answers = new Map<string, (res: ServerResponse, req: IncomingMessage, body: string) => void>();
  const hits: string[] = [];
  const agent: Server = createServer((req, res) => {
    hits.push(req.url ?? '');
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => (answers.get(req.url ?? '') ?? ((r: ServerResponse) => r.writeHead(404).end()))(res, req, body));
  });
  // Another organization's sandbox, with an honest agent: what the hostile one does must not reach it.
  const other: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ entry: ENTRY })));
  });
  let gateway: Gateway;
  let api: Server;
  let apiPort: number;
  let token: string;
  let otherToken: string;

  before(async () => {
    await new Promise<void>((r) => agent.listen(socketPath, () => r()));
    await new Promise<void>((r) => other.listen(otherSocket, () => r()));
    const config: Config['gateway'] = {
      mode: 'port',
      bindHost: '127.0.0.1',
      publicHostname: '127.0.0.1',
      portMin: 47500,
      portMax: 47599,
      domain: '',
      hostModePort: 0,
      idleTimeoutMs: 5000,
      responseHeadersTimeoutMs: 3000,
    };
    gateway = new Gateway({
      config,
      routes,
      tokens,
      keys,
      portUsed: async () => false,
      connections: new ConnectionLimits({ perClient: 1000, perOrg: 1000, total: 1000 }),
      log: (msg, extra) => logs.push(JSON.stringify({ msg, ...extra })),
    });
    api = createServer((req, res) => {
      const rest = belowPrefix(req.url);
      if (rest === undefined) return void res.writeHead(418).end();
      gateway.serveE2b(req, res, rest);
    });
    await new Promise<void>((r) => api.listen(0, '127.0.0.1', () => r()));
    apiPort = (api.address() as { port: number }).port;
    const orgA = await keys.ensureOrg('a');
    const orgB = await keys.ensureOrg('b');
    routes.set({ sandboxId: 'sbhostile', orgId: orgA.id, status: 'running', dial: unixDial(socketPath), port: null });
    routes.set({ sandboxId: 'sbother', orgId: orgB.id, status: 'running', dial: unixDial(otherSocket), port: null });
    token = (await tokens.issue('sbhostile', orgA.id)).token;
    otherToken = (await tokens.issue('sbother', orgB.id)).token;
  });

  after(async () => {
    await gateway?.closeAll();
    api?.closeAllConnections();
    await new Promise((r) => api?.close(r));
    agent.closeAllConnections();
    other.closeAllConnections();
    await new Promise((r) => agent.close(r));
    await new Promise((r) => other.close(r));
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const headers = (extra: Record<string, string> = {}, id = 'sbhostile', tok: string | null = token): Record<string, string> => ({
    'e2b-sandbox-id': id,
    'e2b-sandbox-port': '49983',
    ...(tok ? { 'x-access-token': tok } : {}),
    'connect-protocol-version': '1',
    ...extra,
  });

  function rpc(method: string, body: Buffer | string, h: Record<string, string>, opts: { onResponse?: (res: IncomingMessage) => void; timeoutMs?: number } = {}): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: apiPort, path: `/e2b/sandbox/${method}`, method: 'POST', headers: h, agent: false }, (res) => {
        opts.onResponse?.(res);
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
        // Cut by the client itself (a cancel): no end, no error.
        res.on('close', () => (res.complete ? undefined : reject(new Error(`${method}: cut`))));
      });
      req.setTimeout(opts.timeoutMs ?? 15_000, () => req.destroy(new Error(`no answer to ${method}`)));
      req.on('error', reject);
      req.end(body);
    });
  }

  /** A unary Connect JSON call: its status and its body. */
  const unary = async (method: string, msg: unknown, extra: Record<string, string> = {}) => {
    const r = await rpc(method, JSON.stringify(msg), headers({ 'content-type': 'application/json', ...extra }));
    return { status: r.status, body: JSON.parse(r.body.toString() || '{}') as { code?: string; message?: string; [k: string]: unknown } };
  };

  /** A server-streaming Connect JSON call: its messages and its end. */
  const stream = async (method: string, msg: unknown) => {
    const r = await rpc(method, envelope(0, JSON.stringify(msg)), headers({ 'content-type': 'application/connect+json' }));
    assert.equal(r.status, 200, r.body.toString());
    const all = envelopes(r.body);
    const end = all.at(-1)!;
    assert.equal(end.flags, 2, 'the stream ends with its end message');
    return { messages: all.slice(0, -1).map((e) => e.data), end: end.data as { error?: { code: string; message: string } } };
  };

  /** The daemon still serves: this sandbox's agent when it answers, and another organization's sandbox. */
  async function stillServes(): Promise<void> {
    // The agent's headers are its own: none of them reaches the client of a Connect call.
    answers.set('/e2b/rt/fs/stat', (res) =>
      res.writeHead(200, { 'content-type': 'application/json', 'set-cookie': 'session=stolen', 'access-control-allow-origin': '*' }).end(JSON.stringify({ entry: ENTRY })),
    );
    const own = await rpc('filesystem.Filesystem/Stat', '{"path":"/x"}', headers({ 'content-type': 'application/json' }));
    assert.equal(own.status, 200, own.body.toString());
    assert.equal(own.headers['set-cookie'], undefined);
    assert.equal(own.headers['access-control-allow-origin'], undefined);
    const r = await rpc('filesystem.Filesystem/Stat', '{"path":"/x"}', headers({ 'content-type': 'application/json' }, 'sbother', otherToken));
    assert.equal(r.status, 200, r.body.toString());
  }

  const wait = async (cond: () => boolean, ms = 3000) => {
    for (let i = 0; i < ms / 10 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
    return cond();
  };

  test('wrong JSON shapes from the agent: the call fails (not a crash), no prototype is touched', async () => {
    const shapes: [string, string, unknown, string][] = [
      ['/e2b/rt/process/list', 'process.Process/List', { processes: 5 }, 'unavailable'],
      ['/e2b/rt/process/list', 'process.Process/List', { processes: [{ pid: 'x', cmd: {}, args: 5, envs: 'no' }] }, 'unavailable'],
      ['/e2b/rt/process/list', 'process.Process/List', { processes: [{ pid: 2 ** 40, cmd: 'a', args: [], envs: {} }] }, 'unavailable'],
      ['/e2b/rt/process/list', 'process.Process/List', null, 'unavailable'],
      ['/e2b/rt/fs/list', 'filesystem.Filesystem/ListDir', { entries: [{ ...ENTRY, size: 1.5 }] }, 'unavailable'],
      ['/e2b/rt/fs/list', 'filesystem.Filesystem/ListDir', { entries: [{ ...ENTRY, size: -1 }] }, 'unavailable'],
      ['/e2b/rt/fs/list', 'filesystem.Filesystem/ListDir', { entries: [{ ...ENTRY, size: '12' }] }, 'unavailable'],
      ['/e2b/rt/fs/stat', 'filesystem.Filesystem/Stat', { entry: { ...ENTRY, mode: 'rwx' } }, 'unavailable'],
      ['/e2b/rt/fs/stat', 'filesystem.Filesystem/Stat', { entry: null }, 'unavailable'],
      ['/e2b/rt/fs/stat', 'filesystem.Filesystem/Stat', [], 'unavailable'],
      ['/e2b/rt/fs/watchers', 'filesystem.Filesystem/CreateWatcher', { watcher_id: { a: 1 } }, 'unavailable'],
      ['/e2b/rt/fs/watchers/events', 'filesystem.Filesystem/GetWatcherEvents', { events: [{ name: 1, type: 'constructor' }] }, 'unavailable'],
    ];
    for (const [path, method, answer, code] of shapes) {
      answers.set(path, (res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer)));
      const r = await unary(method, { path: '/x', watcherId: 'w' });
      assert.equal(r.body.code, code, `${method} ${JSON.stringify(answer)} → ${JSON.stringify(r.body)}`);
    }
    // NaN and Infinity do not exist in JSON, but 1e400 parses to Infinity.
    answers.set('/e2b/rt/fs/stat', (res) => res.writeHead(200).end(`{"entry":${JSON.stringify(ENTRY).replace('"mtime_ms":0', '"mtime_ms":1e400')}}`));
    assert.equal((await unary('filesystem.Filesystem/Stat', { path: '/x' })).body.code, 'unavailable');
    answers.set('/e2b/rt/fs/stat', (res) => res.writeHead(200).end(`{"entry":${JSON.stringify(ENTRY).replace('"size":1', '"size":1e400')}}`));
    assert.equal((await unary('filesystem.Filesystem/Stat', { path: '/x' })).body.code, 'unavailable');
    // __proto__ keys: own properties of what JSON.parse made, never Object's prototype.
    answers.set('/e2b/rt/process/list', (res) =>
      res.writeHead(200).end('{"processes":[{"pid":1,"cmd":"a","args":[],"envs":{"__proto__":"x","constructor":"y"}}],"__proto__":{"polluted":"yes"}}'),
    );
    const listed = await unary('process.Process/List', {});
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    const envs = (listed.body.processes as { config: { envs: Record<string, unknown> } }[])[0]!.config.envs;
    assert.deepEqual(Object.entries(envs), [
      ['__proto__', 'x'],
      ['constructor', 'y'],
    ]);
    // An env whose value is not a string (an object under __proto__) is not an answer.
    answers.set('/e2b/rt/process/list', (res) => res.writeHead(200).end('{"processes":[{"pid":1,"cmd":"a","args":[],"envs":{"__proto__":{"polluted":"yes"}}}]}'));
    assert.equal((await unary('process.Process/List', {})).body.code, 'unavailable');
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    await stillServes();
  });

  test("the agent's error bodies: odd codes, not objects, huge messages; the answer and the log stay bounded", async () => {
    const bodies: [number, string, string][] = [
      [404, JSON.stringify({ code: 'PROCESS_NOT_FOUND', message: 'no such process' }), 'not_found'],
      [400, JSON.stringify({ code: '__proto__', message: 'x' }), 'invalid_argument'],
      [500, JSON.stringify({ code: 'constructor' }), 'unavailable'],
      [500, 'null', 'unavailable'],
      [400, '5', 'invalid_argument'],
      [400, '"just a string"', 'invalid_argument'],
      [500, JSON.stringify({ code: 'INTERNAL_ERROR', message: { nested: true } }), 'internal'],
      [599, '', 'unavailable'],
      [200, 'not json', 'unavailable'],
    ];
    for (const [status, body, code] of bodies) {
      answers.set('/e2b/rt/process/signal', (res) => res.writeHead(status).end(body));
      const r = await unary('process.Process/SendSignal', { process: { pid: 1 }, signal: 'SIGNAL_SIGKILL' });
      assert.equal(r.body.code, code, `${status} ${body} → ${JSON.stringify(r.body)}`);
    }
    logs.length = 0;
    const huge = 'A'.repeat(900_000);
    answers.set('/e2b/rt/process/signal', (res) => res.writeHead(500).end(JSON.stringify({ code: 'INTERNAL_ERROR', message: huge })));
    const r = await unary('process.Process/SendSignal', { process: { pid: 1 }, signal: 'SIGNAL_SIGKILL' });
    assert.equal(r.body.code, 'internal');
    assert.ok(String(r.body.message).length < 10_000, `the answer carries ${String(r.body.message).length} characters of the agent's message`);
    assert.ok(logs.every((l) => l.length < 20_000), `a log line of ${Math.max(...logs.map((l) => l.length))} characters`);
    // The same in an error frame of a stream.
    logs.length = 0;
    answers.set('/e2b/rt/process/connect', (res) => res.writeHead(200).end(Buffer.concat([frame(FRAME.json, '{"start":{"pid":1}}'), frame(FRAME.error, JSON.stringify({ code: 'INTERNAL_ERROR', message: huge }))])));
    const s = await stream('process.Process/Connect', { process: { pid: 1 } });
    assert.equal(s.end.error?.code, 'internal');
    assert.ok(s.end.error!.message.length < 10_000);
    assert.ok(logs.every((l) => l.length < 20_000), `a log line of ${Math.max(...logs.map((l) => l.length))} characters`);
    for (const payload of ['null', '[]', '"x"', '{"code":"__proto__"}', 'garbage']) {
      answers.set('/e2b/rt/process/connect', (res) => res.writeHead(200).end(frame(FRAME.error, payload)));
      const e = await stream('process.Process/Connect', { process: { pid: 1 } });
      assert.ok(e.end.error, `error frame ${payload} ends the stream in error`);
    }
    await stillServes();
  });

  test('hostile frames: bad JSON, odd values, unknown kinds, oversized, cut, reset mid-stream', async () => {
    const cases: [string, Buffer, (m: unknown[], end: { error?: { code: string } }) => void][] = [
      ['bad JSON frame', frame(FRAME.json, '{not json'), (_m, end) => assert.equal(end.error?.code, 'unavailable')],
      ['a JSON frame that is not an object', frame(FRAME.json, 'null'), (_m, end) => assert.equal(end.error?.code, 'unavailable')],
      ['a start whose pid is not a number', frame(FRAME.json, '{"start":{"pid":"x"}}'), (_m, end) => assert.equal(end.error?.code, 'unavailable')],
      ['an end with odd values', Buffer.concat([frame(FRAME.json, '{"start":{"pid":1}}'), frame(FRAME.json, '{"end":{"exit_code":1.5,"exited":"yes","status":{}}}')]), (_m, end) => assert.equal(end.error?.code, 'unavailable')],
      ['unknown kinds and empty JSON are skipped', Buffer.concat([frame(9, 'zz'), frame(FRAME.json, '{}'), frame(FRAME.stdout, 'hi')]), (m, end) => {
        assert.equal(end.error, undefined, JSON.stringify(end));
        assert.deepEqual(m, [{ event: { data: { stdout: Buffer.from('hi').toString('base64') } } }]);
      }],
      ['an oversized frame', Buffer.from([FRAME.stdout, 0xff, 0xff, 0xff, 0xff]), (_m, end) => assert.equal(end.error?.code, 'unavailable')],
      ['a cut frame', frame(FRAME.stdout, 'abcdef').subarray(0, 7), (_m, end) => assert.equal(end.error?.code, 'unavailable')],
    ];
    for (const [what, bytes, check] of cases) {
      answers.set('/e2b/rt/process/connect', (res) => res.writeHead(200).end(bytes));
      const s = await stream('process.Process/Connect', { process: { pid: 1 } });
      try {
        check(s.messages, s.end);
      } catch (err) {
        throw new Error(`${what}: ${(err as Error).message}`);
      }
    }
    // The agent's connection reset in the middle of a frame.
    answers.set('/e2b/rt/process/connect', (res) => {
      res.writeHead(200);
      res.write(Buffer.concat([frame(FRAME.json, '{"start":{"pid":4}}'), frame(FRAME.stdout, 'abcdef').subarray(0, 7)]));
      // A unix socket cannot be reset: the connection is cut in the middle of the body.
      setTimeout(() => res.socket?.destroy(), 50);
    });
    const s = await stream('process.Process/Connect', { process: { pid: 4 } });
    assert.deepEqual(s.messages, [{ event: { start: { pid: 4 } } }]);
    assert.equal(s.end.error?.code, 'unavailable');
    await stillServes();
  });

  test('raw hostile answers: an upgrade, endless informational heads, huge headers, garbage, a body longer than said', async () => {
    const raw = (bytes: string | (() => string), end = true) => (res: ServerResponse) => {
      const sock = res.socket!;
      sock.write(typeof bytes === 'string' ? bytes : bytes());
      if (end) sock.end();
    };
    const cases: [string, (res: ServerResponse) => void][] = [
      ['an upgrade nobody asked for', raw('HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\nhello')],
      ['headers too large', raw(() => `HTTP/1.1 200 OK\r\nx-big: ${'a'.repeat(100_000)}\r\n\r\n`)],
      ['not HTTP', raw('garbage\r\n\r\n')],
      ['an invalid status', raw('HTTP/1.1 999999 Odd\r\ncontent-length: 0\r\n\r\n')],
      [
        'informational heads, never an answer',
        (res) => {
          const sock = res.socket!;
          const t = setInterval(() => (sock.writable ? sock.write('HTTP/1.1 102 Processing\r\n\r\n') : clearInterval(t)), 5);
          sock.on('close', () => clearInterval(t));
        },
      ],
    ];
    for (const [what, answer] of cases) {
      answers.set('/e2b/rt/fs/stat', answer);
      const t0 = Date.now();
      const r = await unary('filesystem.Filesystem/Stat', { path: '/x' });
      assert.equal(r.body.code, 'unavailable', `${what}: ${JSON.stringify(r.body)}`);
      assert.ok(Date.now() - t0 < 5000, what);
    }
    // A body longer than its content-length: what follows is not taken for the next answer.
    answers.set('/e2b/rt/fs/stat', raw(`HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\n{}HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}`, false));
    const smuggled = await unary('filesystem.Filesystem/Stat', { path: '/x' });
    assert.equal(smuggled.body.code, 'unavailable', JSON.stringify(smuggled.body));
    await stillServes();
  });

  test('a large frame dripped in small pieces is joined once, not copied at every piece', async () => {
    // 4 MiB in 512-byte writes: joining at every piece copied ~16 GiB (seconds of the daemon's CPU).
    const size = 4 * 1024 * 1024 - 5;
    const all = Buffer.alloc(size + 5, 0x61);
    all[0] = FRAME.stdout;
    all.writeUInt32BE(size, 1);
    answers.set('/drip', (res) => {
      res.writeHead(200);
      let off = 0;
      const next = () => {
        if (off >= all.length) return void res.end();
        res.write(all.subarray(off, off + 512));
        off += 512;
        setImmediate(next);
      };
      next();
    });
    const call = { sandboxId: 'sbhostile', orgId: 'org_h', agent: new DialAgent(() => unixDial(socketPath)), authorization: null, headersMs: 3000 };
    const cpu = process.cpuUsage();
    const got: number[] = [];
    for await (const f of agentFrames(call, '/drip', {}, new AbortController().signal)) got.push(f.payload.length);
    const used = process.cpuUsage(cpu);
    call.agent.destroy();
    assert.deepEqual(got, [size]);
    assert.ok(used.user + used.system < 2_000_000, `${Math.round((used.user + used.system) / 1000)} ms of CPU for one dripped frame`);
  });

  test('an answer that never ends: the client going away closes the agent call; a deadline ends it', async () => {
    let closed = 0;
    answers.set('/e2b/rt/fs/stat', (res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"entry":');
      res.on('close', () => closed++);
    });
    // A deadline from the client.
    const t0 = Date.now();
    const r = await unary('filesystem.Filesystem/Stat', { path: '/x' }, { 'connect-timeout-ms': '300' });
    assert.equal(r.body.code, 'deadline_exceeded', JSON.stringify(r.body));
    assert.ok(Date.now() - t0 < 3000);
    assert.ok(await wait(() => closed === 1), 'the agent call was closed at the deadline');
    // A client that goes away.
    const gone = rpc('filesystem.Filesystem/Stat', '{"path":"/x"}', headers({ 'content-type': 'application/json' }), { timeoutMs: 300 });
    await assert.rejects(gone);
    assert.ok(await wait(() => closed === 2), 'the agent call was closed when the client went');
    // An endless stream: the client cancelling it closes the agent's stream.
    let streamClosed = false;
    answers.set('/e2b/rt/process/connect', (res) => {
      res.writeHead(200);
      const t = setInterval(() => res.write(frame(FRAME.keepalive, '')), 5);
      res.on('close', () => {
        clearInterval(t);
        streamClosed = true;
      });
    });
    const cancelled = rpc('process.Process/Connect', envelope(0, '{"process":{"pid":1}}'), headers({ 'content-type': 'application/connect+json' }), {
      onResponse: (res) => res.once('data', () => res.destroy()),
    });
    await assert.rejects(cancelled);
    assert.ok(await wait(() => streamClosed), 'the agent saw the stream closed');
    await stillServes();
  });

  test('a client that never reads: the agent is held back, the gateway does not buffer its output', async () => {
    let written = 0;
    let blocked = false;
    let closed = false;
    const chunk = frame(FRAME.stdout, Buffer.alloc(1024 * 1024, 0x61));
    answers.set('/e2b/rt/process/connect', (res) => {
      res.writeHead(200);
      const pump = () => {
        while (!closed) {
          written += chunk.length;
          if (!res.write(chunk)) {
            blocked = true;
            res.once('drain', () => {
              blocked = false;
              pump();
            });
            return;
          }
        }
      };
      res.on('close', () => (closed = true));
      pump();
    });
    let client: IncomingMessage | undefined;
    const pending = rpc('process.Process/Connect', envelope(0, '{"process":{"pid":1}}'), headers({ 'content-type': 'application/connect+json' }), {
      onResponse: (res) => {
        client = res;
        res.pause();
      },
      timeoutMs: 30_000,
    });
    pending.catch(() => undefined);
    assert.ok(await wait(() => client !== undefined));
    // Let it settle: the agent writes until every buffer on the way is full, then waits.
    await new Promise((r) => setTimeout(r, 1500));
    const settled = written;
    await new Promise((r) => setTimeout(r, 1000));
    assert.ok(blocked, 'the agent waits for room');
    assert.equal(written, settled, 'nothing more is taken from the agent while the client reads nothing');
    assert.ok(written < 64 * 1024 * 1024, `${written} bytes taken from the agent for a client that reads nothing`);
    // Meanwhile this sandbox and the other organization's are served.
    await stillServes();
    client!.destroy();
    assert.ok(await wait(() => closed), 'the client going closes the agent stream');
  });

  test('hostile client: no credentials, another sandbox\'s token, wrong types, huge or bombed bodies never reach the agent', async () => {
    hits.length = 0;
    answers.set('/e2b/rt/fs/stat', (res) => res.writeHead(200).end(JSON.stringify({ entry: ENTRY })));
    const stat = (h: Record<string, string>, body: Buffer | string = '{"path":"/x"}') => rpc('filesystem.Filesystem/Stat', body, h);
    // Not authenticated: E2B's user alone, nothing, a garbage token, the other sandbox's token.
    for (const [i, h] of [
      headers({ 'content-type': 'application/json' }, 'sbhostile', null),
      headers({ 'content-type': 'application/json', authorization: `Basic ${Buffer.from('root:').toString('base64')}` }, 'sbhostile', null),
      headers({ 'content-type': 'application/json' }, 'sbhostile', 'garbage'),
      headers({ 'content-type': 'application/json' }, 'sbhostile', otherToken),
    ].entries()) {
      const r = await stat(h);
      assert.equal(r.status, 401, `${i}: ${r.body.toString()}`);
    }
    // Another sandbox's processes with this sandbox's token.
    const cross = await rpc('process.Process/List', '{}', headers({ 'content-type': 'application/json' }, 'sbother', token));
    assert.equal(cross.status, 401);
    assert.deepEqual(hits, [], 'nothing reached the agent');
    // Wrong content type, a malformed body, a malformed envelope.
    assert.equal((await stat(headers({ 'content-type': 'text/plain' }))).status, 415);
    // gRPC and gRPC-web are not served (E2B's clients speak Connect).
    for (const type of ['application/grpc-web+json', 'application/grpc+json', 'application/grpc']) {
      assert.equal((await stat(headers({ 'content-type': type }), envelope(0, '{"path":"/x"}'))).status, 415, type);
    }
    for (const [type, body] of [
      ['application/json', '{"path":'],
      ['application/json', '{"path":{"x":1}}'],
    ] as const) {
      const r = await stat(headers({ 'content-type': type }), body);
      assert.equal(r.status, 400, `${String(body)}: ${r.status} ${r.body.toString()}`);
    }
    // connect-node answers a protobuf body it cannot parse with its `internal` (500), before any
    // handler of ours: nothing is logged and nothing reaches the agent.
    logs.length = 0;
    const garbled = await stat(headers({ 'content-type': 'application/proto' }), Buffer.from([0xff, 0xff, 0xff]));
    assert.ok(garbled.status === 400 || garbled.status === 500, String(garbled.status));
    assert.deepEqual(logs, []);
    const badEnvelope = await rpc('process.Process/Connect', Buffer.from([0, 0xff, 0xff, 0xff, 0xff, 1, 2]), headers({ 'content-type': 'application/connect+json' }));
    assert.equal(envelopes(badEnvelope.body).at(-1)?.flags, 2);
    assert.ok((envelopes(badEnvelope.body).at(-1)?.data as { error?: unknown }).error);
    // A message above the limit, and a gzip bomb: 64 MiB of zeros in a few dozen KiB.
    const big = Buffer.alloc(17 * 1024 * 1024, 0x20);
    big.write('{"path":"/x"}');
    const tooBig = await stat(headers({ 'content-type': 'application/json' }), big);
    assert.equal(JSON.parse(tooBig.body.toString()).code, 'resource_exhausted');
    const bomb = gzipSync(Buffer.concat([Buffer.from('{"path":"'), Buffer.alloc(64 * 1024 * 1024, 0x61), Buffer.from('"}')]));
    assert.ok(bomb.length < 1024 * 1024);
    const t0 = Date.now();
    const bombed = await stat(headers({ 'content-type': 'application/json', 'content-encoding': 'gzip' }), bomb);
    assert.equal(JSON.parse(bombed.body.toString()).code, 'resource_exhausted', bombed.body.toString());
    assert.ok(Date.now() - t0 < 5000);
    const streamBomb = await rpc('process.Process/Connect', envelope(1, bomb), headers({ 'content-type': 'application/connect+json', 'connect-content-encoding': 'gzip' }));
    assert.equal((envelopes(streamBomb.body).at(-1)?.data as { error?: { code: string } }).error?.code, 'resource_exhausted');
    assert.deepEqual(hits, [], 'nothing reached the agent');
    await stillServes();
  });

  test("bodies sent slowly: an organization's calls may hold 64 MiB of the daemon's reading at once, then 429 until they end; another organization is served", async () => {
    // Four requests announce 16 MiB each and send a byte: the organization's budget is taken.
    const held: ReturnType<typeof httpRequest>[] = [];
    for (let i = 0; i < 4; i++) {
      const req = httpRequest({
        host: '127.0.0.1',
        port: apiPort,
        path: '/e2b/sandbox/filesystem.Filesystem/Stat',
        method: 'POST',
        headers: headers({ 'content-type': 'application/json', 'content-length': String(16 * 1024 * 1024) }),
        agent: false,
      });
      req.on('error', () => undefined);
      req.write('{');
      held.push(req);
    }
    try {
      assert.ok(await wait(() => gateway.envdReading(routes.get('sbhostile')!.orgId) >= 64 * 1024 * 1024 - 16), 'the four reserve the budget');
      const refused = await unary('filesystem.Filesystem/Stat', { path: '/x' });
      assert.equal(refused.status, 429, JSON.stringify(refused.body));
      // Another organization's calls are not held by this one's.
      answers.set('/e2b/rt/fs/stat', (res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ entry: ENTRY })));
      const r = await rpc('filesystem.Filesystem/Stat', '{"path":"/x"}', headers({ 'content-type': 'application/json' }, 'sbother', otherToken));
      assert.equal(r.status, 200, r.body.toString());
    } finally {
      for (const req of held) req.destroy();
    }
    assert.ok(await wait(() => gateway.envdReading(routes.get('sbhostile')!.orgId) === 0), 'the budget comes back when they go');
    await stillServes();
  });

  test('many concurrent streams, cancelled at once: all end, the agent sees every one closed', async () => {
    let open = 0;
    let opened = 0;
    answers.set('/e2b/rt/process/connect', (res) => {
      open++;
      opened++;
      res.writeHead(200);
      res.write(frame(FRAME.json, '{"start":{"pid":1}}'));
      res.on('close', () => open--);
    });
    const n = 50;
    const clients: IncomingMessage[] = [];
    const all = Array.from({ length: n }, () =>
      rpc('process.Process/Connect', envelope(0, '{"process":{"pid":1}}'), headers({ 'content-type': 'application/connect+json' }), { onResponse: (res) => clients.push(res) }).catch(() => undefined),
    );
    assert.ok(await wait(() => opened === n && clients.length === n, 10_000), `${opened} streams opened`);
    for (const c of clients) c.destroy();
    await Promise.all(all);
    assert.ok(await wait(() => open === 0), `${open} agent streams left open`);
    await stillServes();
  });
});
