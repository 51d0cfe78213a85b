import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { FRAME } from './frames.js';
import { basicAuth, collect, openStream, post, startTestAgent, type TestAgent } from './rt-testing.js';

// The process routes of /e2b/rt on a real agent: real processes through sbx-helper.
let agent: TestAgent;
before(async () => {
  agent = await startTestAgent('rt-process-test-');
});
after(() => agent.close());

const sh = (script: string) => ({ cmd: '/bin/sh', args: ['-c', script], envs: {} });
const start = (body: Record<string, unknown>) => openStream(agent.base, '/e2b/rt/process/start', body);
const connect = (body: Record<string, unknown>) => openStream(agent.base, '/e2b/rt/process/connect', body);
const call = (route: string, body: unknown) => post(agent.base, `/e2b/rt/process/${route}`, body);
const list = async () => ((await fetch(`${agent.base}/e2b/rt/process/list`)).json()) as Promise<{ processes: Array<Record<string, unknown>> }>;
const b64 = (s: string) => Buffer.from(s).toString('base64');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The pid of a stream's first frame, which is always its start. */
async function startPid(s: Awaited<ReturnType<typeof start>>): Promise<number> {
  const first = await s.frames.next();
  assert.equal(first.value?.kind, FRAME.json);
  return (first.value!.json!.start as { pid: number }).pid;
}

test('start streams start, output and end in order; the exit code and status', async () => {
  const r = await collect(await start({ ...sh('echo out; echo err >&2; exit 3'), envs: { A: 'x' }, stdin: false }));
  assert.ok(r.pid > 0);
  assert.deepEqual(r.frames[0]!.json, { start: { pid: r.pid } });
  assert.deepEqual(r.frames.at(-1)!.json, { end: { exit_code: 3, exited: true, status: 'exit status 3', error: 'exit status 3' } });
  assert.equal(r.stdout, 'out\n');
  assert.equal(r.stderr, 'err\n');
  const ok = await collect(await start({ ...sh('echo "$A"'), envs: { A: 'from envs' } }));
  assert.equal(ok.stdout, 'from envs\n');
  assert.deepEqual(ok.end, { exit_code: 0, exited: true, status: 'exit status 0' });
});

test('output streams as it is written, not at exit', async () => {
  const seen: Array<[string, number]> = [];
  await collect(await start(sh('echo one; sleep 1.5; echo two')), (f) => {
    if (f.kind === FRAME.stdout) seen.push([f.text, f.ms]);
    if (f.json?.end) seen.push(['end', f.ms]);
  });
  assert.equal(seen[0]![0], 'one\n');
  assert.ok(seen[0]![1] < 1000, `first output after ${seen[0]![1]} ms`);
  assert.ok(seen.at(-1)![1] >= 1400);
});

test('envs, cwd and the user: Basic credentials name the user, an unknown one is a 400', async () => {
  const sub = join(agent.dir, 'ws', 'sub');
  mkdirSync(sub, { recursive: true });
  const r = await collect(await start({ cmd: '/bin/sh', args: ['-c', 'echo "$GREETING"; pwd; id -u; echo "$USER $HOME"'], envs: { GREETING: 'hello' }, cwd: sub, authorization: basicAuth('root') }));
  assert.equal(r.stdout, `hello\n${sub}\n0\nroot /root\n`);
  const nobody = await collect(await start({ ...sh('id -u; echo "$USER"; pwd'), cwd: '/tmp', authorization: basicAuth('nobody') }));
  assert.equal(nobody.stdout, '65534\nnobody\n/tmp\n');
  const missing = await call('start', { ...sh('true'), cwd: '/does/not/exist' });
  assert.deepEqual([missing.status, missing.body.code], [400, 'INVALID_PATH']);
  const badUser = await call('start', { ...sh('true'), authorization: basicAuth('no-such-user') });
  assert.deepEqual([badUser.status, badUser.body.code], [400, 'VALIDATION_ERROR']);
  assert.match(String(badUser.body.message), /no-such-user/);
});

test('a process outlives its stream: list, connect by tag replays and follows, stdin input, close-stdin', async () => {
  const s = await start({ ...sh('echo ready; cat; echo done'), tag: 'bg-cat', stdin: true, cwd: '/tmp' });
  const pid = await startPid(s);
  s.abort(); // the client goes away; the process stays
  await sleep(200);
  const mine = (await list()).processes.find((p) => p.pid === pid);
  assert.deepEqual(mine, { pid, tag: 'bg-cat', cmd: '/bin/sh', args: ['-c', 'echo ready; cat; echo done'], envs: {}, cwd: '/tmp' });
  assert.deepEqual(await call('find', { tag: 'bg-cat' }), { status: 200, body: { pid } });
  const following = collect(await connect({ tag: 'bg-cat' }));
  assert.deepEqual(await call('input', { pid, kind: 'stdin', data: b64('typed\n') }), { status: 200, body: {} });
  await sleep(200);
  assert.deepEqual(await call('close-stdin', { tag: 'bg-cat' }), { status: 200, body: {} });
  const r = await following;
  assert.equal(r.pid, pid);
  assert.equal(r.stdout, 'ready\ntyped\ndone\n', 'the kept output first, then the live');
  assert.equal(r.end?.exit_code, 0);
  assert.ok(!(await list()).processes.some((p) => p.pid === pid));
  assert.equal((await call('find', { pid })).status, 404, 'find answers running processes only');
  // Ended, within its keep time: connect replays its output and its end.
  const again = await collect(await connect({ pid, keepalive_ms: 1000 }));
  assert.deepEqual([again.pid, again.stdout, again.end?.exit_code], [pid, 'ready\ntyped\ndone\n', 0]);
});

test('signals: SIGKILL ends the process (exited false); unknown pids and tags are 404 PROCESS_NOT_FOUND', async () => {
  const s = await start(sh('sleep 30'));
  const pid = await startPid(s);
  const ending = collect(s);
  assert.equal((await call('signal', { pid, signal: 'SIGKILL' })).status, 200);
  const r = await ending;
  assert.deepEqual(r.end, { exit_code: -1, exited: false, status: 'signal: killed', error: 'signal: killed' });
  for (const [route, body] of [
    ['signal', { pid: 999999, signal: 'SIGTERM' }],
    ['input', { tag: 'nope', kind: 'stdin', data: '' }],
    ['close-stdin', { pid }],
    ['resize', { pid: 999999, cols: 10, rows: 10 }],
    ['connect', { pid: 999999 }],
  ] as const) {
    const res = await call(route, body);
    assert.deepEqual([route, res.status, res.body.code], [route, 404, 'PROCESS_NOT_FOUND']);
  }
  const neither = await call('signal', { signal: 'SIGTERM' });
  assert.deepEqual([neither.status, neither.body.code], [400, 'VALIDATION_ERROR']);
});

test('timeout_ms: the process is killed when it passes', async () => {
  const t0 = Date.now();
  const r = await collect(await start({ ...sh('sleep 30'), tag: 'deadline', timeout_ms: 800 }));
  assert.equal(r.end?.status, 'signal: killed');
  assert.ok(Date.now() - t0 < 5000, `${Date.now() - t0} ms`);
  assert.ok(!(await list()).processes.some((p) => p.tag === 'deadline'));
});

test('keepalive frames every keepalive_ms (clamped to 1 s at least)', async () => {
  const r = await collect(await start({ ...sh('sleep 2.6'), keepalive_ms: 10 }));
  const keepalives = r.frames.filter((f) => f.kind === FRAME.keepalive);
  assert.ok(keepalives.length >= 2 && keepalives.length <= 3, `${keepalives.length} keepalives`);
  assert.ok(keepalives[0]!.ms >= 900);
});

test('a PTY: input, resize, output as pty frames', async () => {
  const s = await start({ cmd: '/bin/sh', args: ['-i'], envs: { PS1: '$ ' }, pty: { cols: 100, rows: 30 } });
  const pid = await startPid(s);
  let out = '';
  const reading = collect(s, (f) => {
    if (f.kind === FRAME.pty) out += f.text;
  });
  const send = (text: string) => call('input', { pid, kind: 'pty', data: b64(text) });
  const waitFor = async (re: RegExp) => {
    for (let i = 0; i < 100 && !re.test(out); i++) await sleep(50);
    assert.match(out, re);
  };
  assert.equal((await send('stty size; echo $((6*7)); echo "$TERM"\n')).status, 200);
  await waitFor(/30 100[\s\S]*42[\s\S]*xterm-256color/);
  assert.equal((await call('resize', { pid, cols: 120, rows: 40 })).status, 200);
  await send('stty size\n');
  await waitFor(/40 120/);
  const stdinErr = await call('input', { pid, kind: 'stdin', data: b64('x') });
  assert.deepEqual([stdinErr.status, stdinErr.body.code], [400, 'VALIDATION_ERROR']);
  const badSize = await call('resize', { pid, cols: 100000, rows: 5 });
  assert.equal(badSize.status, 400);
  await send('exit 7\n');
  const r = await reading;
  assert.equal(r.end?.exit_code, 7);
  assert.equal(r.stdout + r.stderr, '', 'a terminal has one stream');
});

test('bad input is a 400 before any stream', async () => {
  const refused = async (route: string, body: unknown, field?: string) => {
    const r = await call(route, body);
    assert.equal(r.status, 400, `${route} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
    if (field) assert.equal(r.body.field, field, JSON.stringify(r.body));
  };
  await refused('start', { args: [], envs: {} }, 'cmd');
  await refused('start', { cmd: '', args: [] }, 'cmd');
  await refused('start', { cmd: 'echo', args: ['a\0b'] }, 'cmd');
  await refused('start', { cmd: 'echo', args: 'not an array' }, 'args');
  await refused('start', { ...sh('true'), envs: { 'A=B': 'x' } }, 'envs');
  await refused('start', { ...sh('true'), envs: { A: 'x\0y' } }, 'envs');
  await refused('start', { ...sh('true'), pty: { cols: 100000, rows: 5 } }, 'pty.cols');
  await refused('start', { ...sh('true'), tag: 'x'.repeat(257) }, 'tag');
  await refused('start', { ...sh('true'), timeout_ms: -1 }, 'timeout_ms');
  await refused('start', { ...sh('true'), keepalive_ms: 'soon' }, 'keepalive_ms');
  await refused('start', '{not json');
  await refused('start', '[1]');
  await refused('connect', { pid: 'one' }, 'pid');
  await refused('signal', { pid: 1, signal: 'SIGHUP' });
  await refused('input', { pid: 1 });
  const s = await start({ ...sh('cat'), stdin: true });
  const pid = await startPid(s);
  await refused('input', { pid, kind: 'stdin', data: '***' }, 'data');
  await refused('input', { pid, kind: 'other', data: '' }, 'kind');
  await call('signal', { pid, signal: 'SIGTERM' });
  assert.equal((await collect(s)).end?.status, 'signal: terminated');
  // A program that does not exist ends as a shell would say, in the stream.
  const missing = await collect(await start({ cmd: '/no/such/program', args: [], envs: {} }));
  assert.equal(missing.end?.exited, true);
  assert.notEqual(missing.end?.exit_code, 0);
});
