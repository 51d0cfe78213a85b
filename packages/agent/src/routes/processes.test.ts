import assert from 'node:assert/strict';
import { get, type IncomingMessage } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { createAgent } from '../app.js';
import { loadConfig } from '../config.js';

// The output routes on a real agent (its HTTP server, real processes) on a loopback port, with a
// 64 KiB log per stream so that a flood wraps it quickly.
const agentDir = join(dirname(fileURLToPath(import.meta.url)), '../../bundle');
const dir = mkdtempSync(join(tmpdir(), 'agent-processes-test-'));
const config = loadConfig(
  {
    SANDBOXD_AGENT_STATE_DIR: join(dir, 'state'),
    SANDBOXD_AGENT_WORKSPACE: join(dir, 'ws'),
    SANDBOXD_AGENT_PY_ZYGOTE: '0',
    SANDBOXD_PROCESS_OUTPUT_RING_KB: '64',
    PATH: process.env.PATH,
  },
  agentDir,
);
const { agent, server } = createAgent(config);
let base = '';

before(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  agent.executor.contexts.stopAll();
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`, { method, headers: body ? { 'content-type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function background(command: string): Promise<string> {
  const r = await call('POST', '/commands/background', { command });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return String(r.body.process_id);
}

type Chunk = { stream: string; offset: number; data: string };
const joined = (chunks: unknown) => (chunks as Chunk[]).map((c) => c.data).join('');

interface Sse {
  event: string;
  data: Record<string, unknown>;
  id?: string;
}

/** Opens an attach; `events` fills as they come, `ended` resolves at the end of the stream. */
function attach(path: string): Promise<{ res: IncomingMessage; events: Sse[]; ended: Promise<void> }> {
  return new Promise((resolve, reject) => {
    get(`${base}${path}`, (res) => {
      const events: Sse[] = [];
      let buf = '';
      res.setEncoding('utf8');
      const ended = new Promise<void>((done) => res.on('end', done));
      res.on('data', (s: string) => {
        buf += s;
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev: Partial<Sse> = {};
          for (const line of block.split('\n')) {
            if (line.startsWith('event: ')) ev.event = line.slice(7);
            else if (line.startsWith('data: ')) ev.data = JSON.parse(line.slice(6)) as Record<string, unknown>;
            else if (line.startsWith('id: ')) ev.id = line.slice(4);
          }
          if (ev.event) events.push(ev as Sse);
        }
      });
      resolve({ res, events, ended });
    }).on('error', reject);
  });
}

test('output is readable while the process runs; since and next_offset go on without a gap; exit status after', async () => {
  const id = await background('for i in $(seq 1 5); do echo "line $i"; echo "err $i" >&2; sleep 0.2; done');
  await new Promise((r) => setTimeout(r, 300));
  const first = await call('GET', `/processes/${id}/output`);
  assert.equal(first.status, 200);
  assert.equal(first.body.status, 'running');
  assert.equal(first.body.complete, false);
  assert.match(joined(first.body.chunks), /^line 1\n/);
  const since = Number(first.body.next_offset);
  assert.ok(since > 0);
  let offset = since;
  let rest = '';
  for (;;) {
    const r = await call('GET', `/processes/${id}/output?since=${offset}&max_bytes=7`);
    assert.equal(r.body.lost_bytes, 0);
    rest += joined(r.body.chunks);
    offset = Number(r.body.next_offset);
    if (r.body.complete) {
      assert.equal(r.body.status, 'completed');
      assert.equal(r.body.exit_code, 0);
      break;
    }
    if (joined(r.body.chunks) === '') await new Promise((res) => setTimeout(res, 100));
  }
  const all = await call('GET', `/processes/${id}/output`);
  assert.equal(joined(all.body.chunks), joined(first.body.chunks) + rest, 'the pieces add up to the whole');
  assert.equal((all.body.chunks as Chunk[]).filter((c) => c.stream === 'stderr').map((c) => c.data).join(''), 'err 1\nerr 2\nerr 3\nerr 4\nerr 5\n');
  assert.equal(all.body.end_offset, offset);
});

test('bad input is a 400 naming the field; an unknown process a 404; a foreground one a 409', async () => {
  const id = await background('echo hi');
  for (const q of ['since=abc', 'since=-1', 'since=1.5', 'since=99999', 'max_bytes=0', 'max_bytes=x', `max_bytes=${64 * 1024 * 1024}`]) {
    const r = await call('GET', `/processes/${id}/output?${q}`);
    assert.equal(r.status, 400, q);
    assert.equal(r.body.code, 'VALIDATION_ERROR', q);
    assert.equal((r.body.details as Record<string, unknown>)?.field ?? r.body.field, q.split('=')[0], JSON.stringify(r.body));
  }
  const past = await fetch(`${base}/processes/${id}/attach?since=99999`);
  assert.equal(past.status, 400);
  assert.equal(((await past.json()) as { code: string }).code, 'VALIDATION_ERROR');
  for (const path of ['/processes/proc_0000000000000000/output', '/processes/proc_0000000000000000/attach']) {
    const r = await call('GET', path);
    assert.equal(r.status, 404);
    assert.equal(r.body.code, 'PROCESS_NOT_FOUND');
  }
  assert.equal((await call('GET', `/processes/${id}/nothing`)).body.code, 'ROUTE_NOT_FOUND');
  await call('POST', '/commands/run', { command: 'true', name: 'fg-probe' });
  const list = await call('GET', '/execute/processes');
  const fg = (list.body.processes as Array<{ process_id: string; name: string }>).find((p) => p.name === 'fg-probe')!;
  const r = await call('GET', `/processes/${fg.process_id}/output`);
  assert.equal(r.status, 409);
  assert.equal(r.body.code, 'INVALID_STATE');
});

test('two attaches at once each get everything from their offset, live, then exit', async () => {
  const id = await background('for i in $(seq 1 20); do echo "tick $i"; sleep 0.02; done; exit 3');
  const a = await attach(`/processes/${id}/attach`);
  const b = await attach(`/processes/${id}/attach?since=0`);
  await Promise.all([a.ended, b.ended]);
  for (const s of [a, b]) {
    const out = s.events.filter((e) => e.event === 'output');
    assert.equal(out.map((e) => e.data.data).join(''), Array.from({ length: 20 }, (_, i) => `tick ${i + 1}\n`).join(''));
    const exit = s.events.at(-1)!;
    assert.equal(exit.event, 'exit');
    assert.equal(exit.data.status, 'failed');
    assert.equal(exit.data.exit_code, 3);
    assert.equal(out.at(-1)!.id, String(exit.data.next_offset), 'an event id is the offset to resume from');
  }
  assert.ok(a.events.filter((e) => e.event === 'output').length > 1, 'followed live, not in one piece at the end');
  // After exit: the replay and the exit at once.
  const late = await attach(`/processes/${id}/attach?since=8`);
  await late.ended;
  assert.match(String(late.events[0]!.data.data), /^ick 2\ntick 3\n/);
  assert.equal(late.events.at(-1)!.event, 'exit');
});

test('a client that reads nothing never stalls the process; when it reads again it learns what it lost', async () => {
  // 4 MiB in 64 KiB writes: far more than the 64 KiB log and the socket buffers hold.
  const id = await background("head -c 4194304 /dev/zero | tr '\\0' 'x'");
  const slow = await attach(`/processes/${id}/attach`);
  slow.res.pause();
  const t0 = Date.now();
  for (;;) {
    const r = await call('GET', `/processes/${id}/output?since=0&max_bytes=1`);
    if (r.body.status !== 'running') {
      assert.equal(r.body.status, 'completed');
      break;
    }
    assert.ok(Date.now() - t0 < 10_000, 'the process is stalled');
    await new Promise((res) => setTimeout(res, 50));
  }
  slow.res.resume();
  await slow.ended;
  const lost = slow.events.filter((e) => e.event === 'lost').reduce((n, e) => n + Number(e.data.bytes), 0);
  const got = slow.events.filter((e) => e.event === 'output').reduce((n, e) => n + Buffer.byteLength(String(e.data.data)), 0);
  assert.ok(lost > 0, 'bytes were lost');
  assert.equal(lost + got, 4 * 1024 * 1024, 'every byte is either read or counted lost');
  assert.equal(slow.events.at(-1)!.event, 'exit');
  const r = await call('GET', `/processes/${id}/output`);
  assert.equal(r.body.lost_bytes, 4 * 1024 * 1024 - 64 * 1024);
  assert.equal(r.body.start_offset, 4 * 1024 * 1024 - 64 * 1024);
});
