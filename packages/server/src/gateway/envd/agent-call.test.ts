import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { unixDial } from '../../testing/fake-node.js';
import { DialAgent } from '../proxy.js';
import { agentFrames, callAgent, FRAME, type EnvdCall, type Frame } from './agent-call.js';

// The gateway's side of envd's plain calls, against an agent that answers what each case needs:
// whatever a sandbox sends is hostile input, and ends as an error of this one call.

function frame(kind: number, payload: Buffer | string): Buffer {
  const p = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const head = Buffer.alloc(5);
  head[0] = kind;
  head.writeUInt32BE(p.length, 1);
  return Buffer.concat([head, p]);
}

const answers = new Map<string, (res: ServerResponse) => void>();
const dir = mkdtempSync(join(tmpdir(), 'sbd-envd-call-'));
const socketPath = join(dir, 'agent.sock');
let server: Server;
let call: EnvdCall;

before(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on('end', () => (answers.get(req.url ?? '') ?? ((r: ServerResponse) => r.writeHead(404).end()))(res));
  });
  await new Promise<void>((r) => server.listen(socketPath, r));
  call = { sandboxId: 'sbtest', orgId: 'org_t', agent: new DialAgent(() => unixDial(socketPath)), authorization: null, headersMs: 2000 };
});
after(async () => {
  call.agent.destroy();
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

async function frames(path: string): Promise<Frame[]> {
  const out: Frame[] = [];
  for await (const f of agentFrames(call, path, {}, new AbortController().signal)) out.push(f);
  return out;
}

describe('agent calls', () => {
  test('a JSON answer, and the agent error it rendered', async () => {
    answers.set('/ok', (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"pid":7}'));
    assert.deepEqual(await callAgent(call, 'POST', '/ok', { a: 1 }), { pid: 7 });
    answers.set('/gone', (res) => res.writeHead(404).end(JSON.stringify({ error: 'Process not found', code: 'PROCESS_NOT_FOUND', message: 'process with pid 9 not found' })));
    await assert.rejects(callAgent(call, 'POST', '/gone', {}), (err: ServiceError) => err.code === 'PROCESS_NOT_FOUND' && err.message === 'process with pid 9 not found');
  });

  test('what is not an agent answer: an unknown code, not JSON, a stall', async () => {
    answers.set('/odd', (res) => res.writeHead(418).end('{"code":"TEAPOT"}'));
    await assert.rejects(callAgent(call, 'POST', '/odd', {}), (err: ServiceError) => err.code === 'VALIDATION_ERROR');
    answers.set('/html', (res) => res.writeHead(200).end('<html>'));
    await assert.rejects(callAgent(call, 'GET', '/html'), (err: ServiceError) => err.code === 'AGENT_UNAVAILABLE');
    answers.set('/500', (res) => res.writeHead(500).end('boom'));
    await assert.rejects(callAgent(call, 'GET', '/500'), (err: ServiceError) => err.code === 'AGENT_UNAVAILABLE');
    answers.set('/stall', () => undefined);
    const t0 = Date.now();
    await assert.rejects(callAgent(call, 'GET', '/stall'), (err: ServiceError) => err.code === 'AGENT_UNAVAILABLE' && /in time/.test(err.message));
    assert.ok(Date.now() - t0 < 5000);
  });

  test('an agent that is not there', async () => {
    const gone: EnvdCall = { ...call, agent: new DialAgent(() => unixDial(join(dir, 'nobody.sock'))) };
    await assert.rejects(callAgent(gone, 'GET', '/ok'), (err: ServiceError) => err.code === 'AGENT_UNAVAILABLE' && err.message.includes('sbtest'));
  });

  test('frames split anywhere arrive whole and in order', async () => {
    const all = Buffer.concat([frame(FRAME.json, '{"start":{"pid":3}}'), frame(FRAME.stdout, 'a'.repeat(70_000)), frame(FRAME.keepalive, ''), frame(FRAME.stderr, 'err'), frame(FRAME.json, '{"end":{"exit_code":0}}')]);
    answers.set('/split', (res) => {
      res.writeHead(200);
      // One byte, then odd-sized pieces: a frame head split across writes too.
      let off = 0;
      const sizes = [1, 3, 7, 5000, 2, 65_536];
      const next = (i: number) => {
        if (off >= all.length) return res.end();
        const n = sizes[i % sizes.length]!;
        res.write(all.subarray(off, off + n));
        off += n;
        setImmediate(() => next(i + 1));
      };
      next(0);
    });
    const got = await frames('/split');
    assert.deepEqual(
      got.map((f) => [f.kind, f.payload.length]),
      [
        [FRAME.json, 19],
        [FRAME.stdout, 70_000],
        [FRAME.keepalive, 0],
        [FRAME.stderr, 3],
        [FRAME.json, 23],
      ],
    );
  });

  test('an error frame, a refusal before the stream, an oversized or cut frame', async () => {
    answers.set('/errframe', (res) => res.writeHead(200).end(Buffer.concat([frame(FRAME.json, '{"start":{"pid":1}}'), frame(FRAME.error, '{"code":"QUOTA_EXCEEDED","message":"too slow"}')])));
    await assert.rejects(frames('/errframe'), (err: ServiceError) => err.code === 'QUOTA_EXCEEDED' && err.message === 'too slow');
    answers.set('/refused', (res) => res.writeHead(400).end(JSON.stringify({ code: 'VALIDATION_ERROR', message: 'process.cmd is required' })));
    await assert.rejects(frames('/refused'), (err: ServiceError) => err.code === 'VALIDATION_ERROR' && err.message === 'process.cmd is required');
    const huge = Buffer.alloc(5);
    huge[0] = FRAME.stdout;
    huge.writeUInt32BE(0xffffffff, 1);
    answers.set('/huge', (res) => res.writeHead(200).end(huge));
    await assert.rejects(frames('/huge'), (err: ServiceError) => err.code === 'AGENT_UNAVAILABLE' && /too large/.test(err.message));
    answers.set('/cut', (res) => res.writeHead(200).end(frame(FRAME.stdout, 'abcdef').subarray(0, 8)));
    await assert.rejects(frames('/cut'), (err: ServiceError) => err.code === 'AGENT_UNAVAILABLE' && /inside a frame/.test(err.message));
  });

  test('the client going away ends the stream and its connection', async () => {
    let closed = false;
    answers.set('/forever', (res) => {
      res.writeHead(200);
      res.write(frame(FRAME.json, '{"start":{"pid":1}}'));
      res.on('close', () => (closed = true));
    });
    const ac = new AbortController();
    const it = agentFrames(call, '/forever', {}, ac.signal);
    const first = await it.next();
    assert.equal(first.value?.kind, FRAME.json);
    ac.abort();
    await assert.rejects(it.next());
    for (let i = 0; i < 100 && !closed; i++) await new Promise((r) => setTimeout(r, 10));
    assert.ok(closed, 'the agent saw the stream closed');
  });
});

describe('the wire is the gateway’s alone', () => {
  test('isEnvdWire: every spelling that reaches the agent’s /e2b/rt routes', async () => {
    const { isEnvdWire, isEnvdRpc } = await import('./envd.js');
    for (const u of ['/e2b/rt/process/start', '/e2b/rt', '/x/../e2b/rt/process/list', '/e2b/./rt/fs/stat', '/%2e%2e/e2b/rt/process/input', '/e2b/rt/process/list?x=1']) assert.ok(isEnvdWire(u), u);
    for (const u of ['/e2b/envd/files', '/e2b/rtx', '/commands/run', '/E2B/rt/process/start', undefined]) assert.ok(!isEnvdWire(u), String(u));
    assert.ok(isEnvdRpc('/e2b/envd/process.Process/Start'));
    assert.ok(!isEnvdRpc('/e2b/envd/files'));
  });
});
