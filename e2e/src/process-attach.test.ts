import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { NotFoundError, ValidationError, type AttachEvent, type Sandbox } from '@sandboxd/sdk';
import { startServer, type TestServer } from './harness.js';
import { clientFor, describeResult, sbx, SandboxPool } from './sdk-support.js';

// Background processes' output kept while they run (issue 32, items 2 and 3), on a real daemon and
// real sandboxes, through the gateway: with a 64 KiB log per stream, so that a flood wraps it.
const RING = 64 * 1024;
let server: TestServer;
let pool: SandboxPool;
let sb: Sandbox;

before(async () => {
  server = await startServer({ templates: ['base', 'code-interpreter'], env: { SANDBOXD_PROCESS_OUTPUT_RING_KB: '64' } });
  pool = new SandboxPool(clientFor(server));
  sb = await pool.create({ template: 'code-interpreter' });
});

after(async () => {
  await pool?.cleanup();
  await server?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const counter = (n: number) => Array.from({ length: n }, (_, i) => `${i + 1}\n`).join('');

test('output is visible while the process runs; since and next_offset read on without a gap; the exit stays readable', async () => {
  const p = await sb.commands.background('for i in $(seq 1 30); do echo $i; echo "e$i" >&2; sleep 0.1; done; exit 7');
  await sleep(800);
  const first = await sb.processes.output(p.processId);
  assert.equal(first.status, 'running');
  assert.equal(first.complete, false);
  assert.match(first.text, /^1\ne1\n2\ne2\n/);
  let since = first.nextOffset;
  let stdout = first.chunks.filter((c) => c.stream === 'stdout').map((c) => c.data).join('');
  for (;;) {
    const next = await sb.processes.output(p.processId, { since, maxBytes: 5 });
    assert.equal(next.lostBytes, 0);
    assert.equal(next.since, since);
    stdout += next.chunks.filter((c) => c.stream === 'stdout').map((c) => c.data).join('');
    since = next.nextOffset;
    if (next.complete) {
      assert.equal(next.status, 'failed');
      assert.equal(next.exitCode, 7);
      break;
    }
    if (next.chunks.length === 0) await sleep(100);
  }
  assert.equal(stdout, counter(30));
  const info = await sb.processes.get(p.processId);
  assert.equal(info.exitCode, 7, 'the exit code is readable after exit, as before');

  // Python in the background (/execute/background) is read as it prints, not when it exits.
  const py = await sb.runCodeBackground('import time\nfor i in range(50):\n    print("py", i)\n    time.sleep(0.1)');
  await sleep(1500);
  const mid = await sb.processes.output(py.processId);
  assert.equal(mid.status, 'running');
  assert.match(mid.text, /^py 0\npy 1\n/);

  // A background cell of the code context's kernel too.
  const ctx = await sb.createCodeContext({ language: 'python' });
  const cell = await sb.runCodeBackground('import time\nfor i in range(30):\n    print("cell", i, flush=True)\n    time.sleep(0.1)', { context: ctx });
  await sleep(1500);
  const kernelOut = await sb.processes.output(cell.processId);
  assert.equal(kernelOut.status, 'running');
  assert.match(kernelOut.text, /^cell 0\ncell 1\n/);
  await sb.processes.kill(py.processId);
  await sb.processes.kill(cell.processId);
});

test('bad offsets are a 400; an unknown process a 404', async () => {
  const p = await sb.commands.background('echo hi');
  await sb.processes.wait(p.processId);
  await assert.rejects(sb.processes.output(p.processId, { since: 10_000 }), ValidationError);
  await assert.rejects(sb.processes.output('proc_00000000deadbeef'), NotFoundError);
  await assert.rejects(sb.processes.attach('proc_00000000deadbeef').wait(), NotFoundError);
  const raw = await fetch(`${sb.info.publicHost}/processes/${p.processId}/output?since=-3`, { headers: { authorization: `Bearer ${sb.token!.token}` } });
  assert.equal(raw.status, 400);
  assert.equal(((await raw.json()) as { code: string }).code, 'VALIDATION_ERROR');
});

test('two clients attach at once; each gets everything live, then the exit', async () => {
  const p = await sb.commands.background('for i in $(seq 1 40); do echo $i; sleep 0.05; done');
  const seen: string[] = [];
  const a = sb.processes.attach(p.processId, { onStdout: (d) => seen.push(d) });
  const events: AttachEvent[] = [];
  const b = sb.processes.attach(p.processId, { since: 0 });
  const iterate = (async () => {
    for await (const e of b) events.push(e);
  })();
  const [exitA, exitB] = await Promise.all([a, b.wait(), iterate]);
  assert.equal(seen.join(''), counter(40));
  assert.ok(seen.length > 3, `followed live, in ${seen.length} pieces`);
  assert.equal(events.map((e) => (e.type === 'stdout' ? e.data : '')).join(''), counter(40));
  assert.equal(exitA.status, 'completed');
  assert.equal(exitA.exitCode, 0);
  assert.equal(exitB.nextOffset, Buffer.byteLength(counter(40)));
  assert.equal(a.offset, exitA.nextOffset);
});

test('a reader that stops reading never stalls the writer; it learns what it lost; reads after the ring wrapped say so', async () => {
  const total = 8 * 1024 * 1024;
  const p = await sb.commands.background(`head -c ${total} /dev/zero | tr '\\0' 'x'`);
  // A raw SSE client that reads the headers, then nothing.
  const url = new URL(`${sb.info.publicHost}/processes/${p.processId}/attach`);
  const res = await new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
    request(url, { headers: { authorization: `Bearer ${sb.token!.token}` } }, resolve).on('error', reject).end();
  });
  assert.equal(res.statusCode, 200);
  assert.match(String(res.headers['content-type']), /text\/event-stream/);
  res.pause();
  const t0 = Date.now();
  let done;
  for (;;) {
    done = await sb.processes.output(p.processId, { maxBytes: 1 });
    if (done.status !== 'running') break;
    assert.ok(Date.now() - t0 < 20_000, 'the writer is stalled by a reader that does not read');
    await sleep(100);
  }
  assert.equal(done.status, 'completed');
  assert.ok(Date.now() - t0 < 10_000, `8 MiB took ${Date.now() - t0} ms with a stalled reader`);
  // The stalled reader now reads: what it missed is a lost event, and every byte is accounted for.
  let text = '';
  res.setEncoding('utf8');
  res.on('data', (s: string) => (text += s));
  res.resume();
  await new Promise((r) => res.on('end', r));
  let lost = 0;
  let got = 0;
  let exit: Record<string, unknown> | undefined;
  for (const block of text.split('\n\n')) {
    const ev = /^event: (\w+)$/m.exec(block)?.[1];
    const data = /^data: (.*)$/m.exec(block)?.[1];
    if (!ev || !data) continue;
    const d = JSON.parse(data) as Record<string, unknown>;
    if (ev === 'lost') lost += Number(d.bytes);
    else if (ev === 'output') got += Buffer.byteLength(String(d.data));
    else if (ev === 'exit') exit = d;
  }
  assert.ok(lost > 0, 'bytes were lost');
  assert.equal(lost + got, total);
  assert.equal(exit?.status, 'completed');
  const all = await sb.processes.output(p.processId);
  assert.equal(all.lostBytes, total - RING);
  assert.equal(all.startOffset, total - RING);
  assert.equal(all.text.length, RING);
  assert.equal(all.complete, true);
});

test('sbx logs SANDBOX PROCESS prints the output; --follow --since goes on from an offset', async () => {
  const p = await sb.commands.background('for i in $(seq 1 20); do echo $i; echo "warn $i" >&2; sleep 0.05; done');
  const follow = await sbx(server, ['logs', sb.id, p.processId, '--follow', '--since', '0']);
  assert.equal(follow.code, 0, describeResult(follow));
  assert.equal(follow.stdout, counter(20));
  assert.match(follow.stderr, /warn 1\n/);
  assert.match(follow.stderr, /completed \(exit 0\); next offset \d+/);
  const offset = Buffer.byteLength('1\nwarn 1\n');
  const rest = await sbx(server, ['logs', sb.id, p.processId, '--since', String(offset)]);
  assert.equal(rest.code, 0, describeResult(rest));
  assert.equal(rest.stdout, counter(20).slice(2));
  const bad = await sbx(server, ['logs', sb.id, p.processId, '--since', 'soon']);
  assert.equal(bad.code, 2, describeResult(bad));
});

test('a daemon restart loses nothing: a re-attach from the offset gets the rest with no gap, and an attachment rides through it', async () => {
  const n = 150;
  const p = await sb.commands.background(`for i in $(seq 1 ${n}); do echo $i; sleep 0.05; done`);
  const live: string[] = [];
  const riding = sb.processes.attach(p.processId, { onStdout: (d) => live.push(d), reconnectForMs: 120_000 });
  await sleep(1500);
  const before = await sb.processes.output(p.processId);
  assert.equal(before.status, 'running');
  assert.ok(before.text.length > 0);

  await server.kill9();
  await sleep(1000); // the process prints on while the daemon is down
  await server.restart();

  const after = sb.processes.attach(p.processId, { since: before.nextOffset });
  let rest = '';
  for await (const e of after) {
    assert.notEqual(e.type, 'lost');
    if (e.type === 'stdout') rest += e.data;
  }
  const exit = await after;
  assert.equal(exit.status, 'completed');
  assert.equal(before.text + rest, counter(n), 'what was read before and after the restart is the whole, once');
  const rode = await riding;
  assert.equal(rode.status, 'completed');
  assert.equal(live.join(''), counter(n), 'the attachment open across the restart re-attached from its offset');
});
