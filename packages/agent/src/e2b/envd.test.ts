import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, mkdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { after, before, test } from 'node:test';
import { Code, ConnectError, createClient, type Client } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { createAgent } from '../app.js';
import { loadConfig } from '../config.js';
import { Filesystem, EventType, FileType } from './gen/filesystem/filesystem_pb.js';
import { Process, Signal, type StartResponse, type ConnectResponse } from './gen/process/process_pb.js';

// A real agent (its HTTP server, sbx-helper, real processes) on a loopback port; E2B's wire spoken
// by Connect's own client, in both encodings, over HTTP/1.1 as E2B's clients do.
const agentDir = join(dirname(fileURLToPath(import.meta.url)), '../../bundle');
const dir = mkdtempSync(join(tmpdir(), 'envd-test-'));
const config = loadConfig(
  { SANDBOXD_AGENT_STATE_DIR: join(dir, 'state'), SANDBOXD_AGENT_WORKSPACE: join(dir, 'ws'), SANDBOXD_AGENT_PY_ZYGOTE: '0', PATH: process.env.PATH },
  agentDir,
);
const { server } = createAgent(config);
let base = '';
let json: { proc: Client<typeof Process>; fs: Client<typeof Filesystem> };
let binary: { proc: Client<typeof Process>; fs: Client<typeof Filesystem> };
const asNobody = { authorization: `Basic ${Buffer.from('nobody:').toString('base64')}` };

before(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const clients = (useBinaryFormat: boolean) => {
    const transport = createConnectTransport({ baseUrl: `${base}/e2b/envd`, httpVersion: '1.1', useBinaryFormat });
    return { proc: createClient(Process, transport), fs: createClient(Filesystem, transport) };
  };
  json = clients(false);
  binary = clients(true);
});

after(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

type Event = NonNullable<StartResponse['event']>['event'];

/** Reads a process stream to its end: its pid, output by stream, end, and when each output came. */
async function collect(stream: AsyncIterable<StartResponse | ConnectResponse>, onEvent?: (e: Event, ms: number) => void) {
  const t0 = Date.now();
  const out = { pid: 0, stdout: '', stderr: '', pty: '', end: undefined as Extract<Event, { case: 'end' }>['value'] | undefined };
  for await (const r of stream) {
    const e = r.event?.event;
    if (!e) continue;
    onEvent?.(e, Date.now() - t0);
    if (e.case === 'start') out.pid = e.value.pid;
    else if (e.case === 'data' && e.value.output.case) out[e.value.output.case] += Buffer.from(e.value.output.value).toString();
    else if (e.case === 'end') out.end = e.value;
  }
  return out;
}

const sh = (script: string) => ({ cmd: '/bin/sh', args: ['-c', script], envs: {} });

test('Start runs a command and streams its start, output and end (JSON and binary)', async () => {
  for (const c of [json, binary]) {
    const r = await collect(c.proc.start({ process: { ...sh('echo out; echo err >&2; exit 3'), envs: { A: 'x' } } }));
    assert.ok(r.pid > 0);
    assert.equal(r.stdout, 'out\n');
    assert.equal(r.stderr, 'err\n');
    assert.deepEqual([r.end?.exitCode, r.end?.exited, r.end?.status, r.end?.error], [3, true, 'exit status 3', 'exit status 3']);
  }
  const ok = await collect(json.proc.start({ process: sh('echo "$A $HOME"; pwd'), }, { headers: asNobody }));
  assert.equal(ok.end?.exitCode, 0);
  assert.equal(ok.end?.error, undefined);
});

test('output streams as it is written, not at exit', async () => {
  const seen: Array<[string, number]> = [];
  await collect(json.proc.start({ process: sh('echo one; sleep 1.5; echo two') }), (e, ms) => {
    if (e.case === 'data') seen.push([Buffer.from(e.value.output.value as Uint8Array).toString(), ms]);
    if (e.case === 'end') seen.push(['end', ms]);
  });
  assert.equal(seen[0]![0], 'one\n');
  assert.ok(seen[0]![1] < 1000, `first output after ${seen[0]![1]} ms`);
  assert.ok(seen.at(-1)![1] >= 1400);
});

test('envs, cwd and the user: relative cwd from the home, unprivileged user by Basic credentials', async () => {
  mkdirSync(join(dir, 'ws', 'sub'), { recursive: true });
  const r = await collect(json.proc.start({ process: { cmd: '/bin/sh', args: ['-c', 'echo "$GREETING"; pwd; id -u; echo "$USER $HOME"'], envs: { GREETING: 'hello' }, cwd: join(dir, 'ws', 'sub') } }));
  assert.equal(r.stdout, `hello\n${join(dir, 'ws', 'sub')}\n0\nroot /root\n`);
  const nobody = await collect(json.proc.start({ process: { ...sh('id -u; echo "$USER"; pwd'), cwd: '/tmp' } }, { headers: asNobody }));
  assert.equal(nobody.stdout, '65534\nnobody\n/tmp\n');
  const missing = await json.proc.start({ process: { ...sh('true'), cwd: '/does/not/exist' } })[Symbol.asyncIterator]().next().catch((e: unknown) => e);
  assert.ok(missing instanceof ConnectError && missing.code === Code.InvalidArgument, String(missing));
  const badUser = await json.proc.start({ process: sh('true') }, { headers: { authorization: `Basic ${Buffer.from('no-such-user:').toString('base64')}` } })[Symbol.asyncIterator]().next().catch((e: unknown) => e);
  assert.ok(badUser instanceof ConnectError && badUser.code === Code.InvalidArgument, String(badUser));
});

test('a process outlives its stream: List, Connect by tag replays and follows, stdin, CloseStdin', async () => {
  const ac = new AbortController();
  const stream = json.proc.start({ process: sh('echo ready; cat; echo done'), tag: 'bg-cat', stdin: true }, { signal: ac.signal });
  const it = stream[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal(first.value?.event?.event.case, 'start');
  const pid = (first.value!.event!.event.value as { pid: number }).pid;
  ac.abort(); // the client goes away; the process stays
  await new Promise((r) => setTimeout(r, 200));
  const list = await json.proc.list({});
  const mine = list.processes.find((p) => p.pid === pid);
  assert.ok(mine, 'still listed');
  assert.equal(mine.tag, 'bg-cat');
  assert.deepEqual(mine.config?.args, ['-c', 'echo ready; cat; echo done']);
  const following = collect(json.proc.connect({ process: { selector: { case: 'tag', value: 'bg-cat' } } }));
  await json.proc.sendInput({ process: { selector: { case: 'pid', value: pid } }, input: { input: { case: 'stdin', value: Buffer.from('typed\n') } } });
  await new Promise((r) => setTimeout(r, 200));
  await json.proc.closeStdin({ process: { selector: { case: 'pid', value: pid } } });
  const r = await following;
  assert.equal(r.pid, pid);
  assert.equal(r.stdout, 'ready\ntyped\ndone\n');
  assert.equal(r.end?.exitCode, 0);
  assert.ok(!(await json.proc.list({})).processes.some((p) => p.pid === pid));
});

test('signals: SIGKILL ends the process (exited false); unknown pids are not_found', async () => {
  const ac = new AbortController();
  const it = json.proc.start({ process: sh('sleep 30') }, { signal: ac.signal })[Symbol.asyncIterator]();
  const pid = ((await it.next()).value!.event!.event.value as { pid: number }).pid;
  const ending = collect({ [Symbol.asyncIterator]: () => it });
  await json.proc.sendSignal({ process: { selector: { case: 'pid', value: pid } }, signal: Signal.SIGKILL });
  const r = await ending;
  assert.deepEqual([r.end?.exited, r.end?.exitCode, r.end?.status], [false, -1, 'signal: killed']);
  for (const call of [
    () => json.proc.sendSignal({ process: { selector: { case: 'pid', value: 999999 } }, signal: Signal.SIGTERM }),
    () => json.proc.sendInput({ process: { selector: { case: 'tag', value: 'nope' } }, input: { input: { case: 'stdin', value: new Uint8Array(1) } } }),
  ]) {
    const err = await call().catch((e: unknown) => e);
    assert.ok(err instanceof ConnectError && err.code === Code.NotFound, String(err));
  }
  const bad = await json.proc.sendSignal({ process: {}, signal: Signal.SIGTERM }).catch((e: unknown) => e);
  assert.ok(bad instanceof ConnectError && bad.code === Code.InvalidArgument, String(bad));
});

test("the starting request's deadline is the command's: it is killed when it passes", async () => {
  const err = await collect(json.proc.start({ process: sh('echo $$ > ' + join(dir, 'deadline.pid') + '; sleep 30'), tag: 'deadline' }, { timeoutMs: 800 })).catch((e: unknown) => e);
  assert.ok(err instanceof ConnectError && err.code === Code.DeadlineExceeded, String(err));
  await new Promise((r) => setTimeout(r, 600));
  assert.ok(!(await json.proc.list({})).processes.some((p) => p.tag === 'deadline'));
});

test('a PTY: input, resize with Update, output as pty data', async () => {
  const ac = new AbortController();
  let out = '';
  const it = json.proc.start({ process: { cmd: '/bin/sh', args: ['-i'], envs: { PS1: '$ ' } }, pty: { size: { cols: 100, rows: 30 } } }, { signal: ac.signal })[Symbol.asyncIterator]();
  const pid = ((await it.next()).value!.event!.event.value as { pid: number }).pid;
  const reading = (async () => {
    for (;;) {
      const n = await it.next();
      if (n.done) return;
      const e = n.value.event?.event;
      if (e?.case === 'data' && e.value.output.case === 'pty') out += Buffer.from(e.value.output.value).toString();
      if (e?.case === 'end') return e.value;
    }
  })();
  const send = (s: string) => json.proc.sendInput({ process: { selector: { case: 'pid', value: pid } }, input: { input: { case: 'pty', value: Buffer.from(s) } } });
  const waitFor = async (re: RegExp) => {
    for (let i = 0; i < 100 && !re.test(out); i++) await new Promise((r) => setTimeout(r, 50));
    assert.match(out, re);
  };
  await send('stty size; echo $((6*7))\n');
  await waitFor(/30 100[\s\S]*42/);
  await json.proc.update({ process: { selector: { case: 'pid', value: pid } }, pty: { size: { cols: 120, rows: 40 } } });
  await send('stty size\n');
  await waitFor(/40 120/);
  const stdinErr = await json.proc.sendInput({ process: { selector: { case: 'pid', value: pid } }, input: { input: { case: 'stdin', value: Buffer.from('x') } } }).catch((e: unknown) => e);
  assert.ok(stdinErr instanceof ConnectError && stdinErr.code === Code.InvalidArgument);
  await send('exit 7\n');
  const end = await reading;
  assert.equal(end?.exitCode, 7);
});

test('filesystem: MakeDir, Stat, ListDir with depth, Move, Remove, with E2B codes', async () => {
  const root = join(dir, 'fs');
  const made = await json.fs.makeDir({ path: join(root, 'a', 'b') });
  assert.equal(made.entry?.type, FileType.DIRECTORY);
  const again = await json.fs.makeDir({ path: join(root, 'a', 'b') }).catch((e: unknown) => e);
  assert.ok(again instanceof ConnectError && again.code === Code.AlreadyExists);
  writeFileSync(join(root, 'a', 'b', 'f.txt'), 'hello');
  const st = await binary.fs.stat({ path: join(root, 'a', 'b', 'f.txt') });
  assert.deepEqual([st.entry?.name, st.entry?.type, st.entry?.size, st.entry?.permissions, st.entry?.owner], ['f.txt', FileType.FILE, 5n, '-rw-r--r--', 'root']);
  assert.ok(st.entry?.modifiedTime && Number(st.entry.modifiedTime.seconds) > 0);
  const one = await json.fs.listDir({ path: root, depth: 1 });
  assert.deepEqual(one.entries.map((e) => e.path), [join(root, 'a')]);
  const deep = await json.fs.listDir({ path: root, depth: 3 });
  assert.deepEqual(deep.entries.map((e) => e.path), [join(root, 'a'), join(root, 'a', 'b'), join(root, 'a', 'b', 'f.txt')]);
  const moved = await json.fs.move({ source: join(root, 'a', 'b', 'f.txt'), destination: join(root, 'c', 'g.txt') });
  assert.equal(moved.entry?.path, join(root, 'c', 'g.txt'));
  assert.equal(readFileSync(join(root, 'c', 'g.txt'), 'utf8'), 'hello');
  await json.fs.remove({ path: join(root, 'a') });
  for (const call of [() => json.fs.stat({ path: join(root, 'a') }), () => json.fs.remove({ path: join(root, 'a') }), () => json.fs.listDir({ path: join(root, 'nope') })]) {
    const err = await call().catch((e: unknown) => e);
    assert.ok(err instanceof ConnectError && err.code === Code.NotFound, String(err));
  }
  const notDir = await json.fs.listDir({ path: join(root, 'c', 'g.txt') }).catch((e: unknown) => e);
  assert.ok(notDir instanceof ConnectError && notDir.code === Code.InvalidArgument);
  // Relative paths are the user's home's; nobody's home does not exist here, /tmp does.
  const rel = await json.fs.stat({ path: '.' }).catch((e: unknown) => e);
  assert.ok(!(rel instanceof Error) || (rel instanceof ConnectError && rel.code === Code.NotFound));
});

test('WatchDir streams changes; the polled watcher API gives the same', async () => {
  const root = join(dir, 'watched');
  mkdirSync(root, { recursive: true });
  const ac = new AbortController();
  const it = json.fs.watchDir({ path: root, recursive: true, includeEntry: true }, { signal: ac.signal })[Symbol.asyncIterator]();
  assert.equal((await it.next()).value?.event.case, 'start');
  const watcherId = (await json.fs.createWatcher({ path: root, recursive: false })).watcherId;
  writeFileSync(join(root, 'new.txt'), 'x');
  mkdirSync(join(root, 'd'));
  writeFileSync(join(root, 'd', 'inner.txt'), 'y');
  const seen: Array<[string, EventType, boolean]> = [];
  while (seen.length < 3) {
    const n = await it.next();
    const e = n.value?.event;
    if (e?.case === 'filesystem') seen.push([e.value.name, e.value.type, e.value.entry !== undefined]);
  }
  ac.abort();
  assert.deepEqual(seen.slice(0, 2), [
    ['new.txt', EventType.CREATE, true],
    ['new.txt', EventType.WRITE, true],
  ]);
  await new Promise((r) => setTimeout(r, 200));
  const polled = await json.fs.getWatcherEvents({ watcherId });
  const names = polled.events.map((e) => e.name);
  assert.ok(names.includes('new.txt') && names.includes('d'), names.join(','));
  assert.ok(!names.includes('d/inner.txt'), 'not recursive');
  await json.fs.removeWatcher({ watcherId });
  const gone = await json.fs.getWatcherEvents({ watcherId }).catch((e: unknown) => e);
  assert.ok(gone instanceof ConnectError && gone.code === Code.NotFound);
});

test('/files: multipart upload of several files, raw and gzip uploads, download, errors as E2B answers them', async () => {
  const root = join(dir, 'files');
  const form = new FormData();
  form.append('file', new Blob(['first']), join(root, 'one.txt'));
  form.append('file', new Blob([new Uint8Array([0, 1, 2, 255])]), join(root, 'deep', 'two.bin'));
  const up = await fetch(`${base}/e2b/envd/files?username=root`, { method: 'POST', body: form });
  assert.equal(up.status, 200);
  assert.deepEqual(await up.json(), [
    { name: 'one.txt', type: 'file', path: join(root, 'one.txt') },
    { name: 'two.bin', type: 'file', path: join(root, 'deep', 'two.bin') },
  ]);
  const down = await fetch(`${base}/e2b/envd/files?path=${encodeURIComponent(join(root, 'deep', 'two.bin'))}&signature=v1_x&signature_expiration=1`);
  assert.equal(down.status, 200);
  assert.deepEqual([...new Uint8Array(await down.arrayBuffer())], [0, 1, 2, 255]);
  const single = new FormData();
  single.append('file', new Blob(['by path']), 'ignored-name');
  const one = await fetch(`${base}/e2b/envd/files?path=${encodeURIComponent(join(root, 'single.txt'))}`, { method: 'POST', body: single });
  assert.equal(one.status, 200);
  assert.equal(readFileSync(join(root, 'single.txt'), 'utf8'), 'by path');
  const gz = await fetch(`${base}/e2b/envd/files?path=${encodeURIComponent(join(root, 'gz.txt'))}`, {
    method: 'POST',
    headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
    body: gzipSync('zipped'),
  });
  assert.equal(gz.status, 200);
  assert.equal(readFileSync(join(root, 'gz.txt'), 'utf8'), 'zipped');
  // As nobody: the file is nobody's.
  const mine = new FormData();
  mine.append('file', new Blob(['n']), '/tmp/envd-test-nobody.txt');
  assert.equal((await fetch(`${base}/e2b/envd/files?username=nobody`, { method: 'POST', body: mine })).status, 200);
  assert.equal(statSync('/tmp/envd-test-nobody.txt').uid, 65534);
  rmSync('/tmp/envd-test-nobody.txt');
  const missing = await fetch(`${base}/e2b/envd/files?path=${encodeURIComponent(join(root, 'nope'))}`);
  assert.equal(missing.status, 404);
  assert.deepEqual(Object.keys((await missing.json()) as object).sort(), ['code', 'message']);
  const noUser = await fetch(`${base}/e2b/envd/files?path=/etc/hostname&username=no-such-user`);
  assert.equal(noUser.status, 401);
  const health = await fetch(`${base}/e2b/envd/health`);
  assert.equal(health.status, 204);
});

test('bounds and bad input: Connect codes, not crashes', async () => {
  const code = async (p: Promise<unknown> | AsyncIterable<unknown>) => {
    try {
      if (Symbol.asyncIterator in (p as object)) for await (const _ of p as AsyncIterable<unknown>) void _;
      else await p;
      return 'ok';
    } catch (e) {
      return e instanceof ConnectError ? Code[e.code] : String(e);
    }
  };
  assert.equal(await code(json.proc.start({ process: { cmd: '', args: [], envs: {} } })), 'InvalidArgument');
  assert.equal(await code(json.proc.start({ process: { ...sh('true'), envs: { 'A=B': 'x' } } })), 'InvalidArgument');
  assert.equal(await code(json.proc.start({ process: sh('true'), pty: { size: { cols: 100000, rows: 5 } } })), 'InvalidArgument');
  assert.equal(await code(json.proc.start({ process: { cmd: '/no/such/program', args: [], envs: {} } })), 'ok', 'a missing program is its exit status, as in a shell');
  assert.equal(await code(json.proc.sendInput({ process: { selector: { case: 'pid', value: 1 } }, input: { input: { case: 'stdin', value: new Uint8Array(17 * 1024 * 1024) } } })), 'ResourceExhausted');
  assert.equal(await code(json.fs.listDir({ path: '/', depth: 1000 })), 'InvalidArgument');
  assert.equal(await code(json.fs.remove({ path: '/' })), 'InvalidArgument');
  assert.equal(await code(json.fs.stat({ path: 'a\0b' })), 'InvalidArgument');
  assert.equal(await code(json.fs.getWatcherEvents({ watcherId: 'nope' })), 'NotFound');
  const res = await fetch(`${base}/e2b/envd/process.Process/Nope`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  assert.equal(res.status, 404);
  const garbage = await fetch(`${base}/e2b/envd/process.Process/List`, { method: 'POST', headers: { 'content-type': 'application/json', 'connect-protocol-version': '1' }, body: '{not json' });
  assert.deepEqual([garbage.status, ((await garbage.json()) as { code: string }).code], [400, 'invalid_argument']);
  const meta = await fetch(`${base}/e2b/envd/files?path=/tmp/meta.txt`, { method: 'POST', headers: { 'content-type': 'application/octet-stream', 'x-metadata-k': 'v' }, body: 'x' });
  assert.equal(meta.status, 400);
});
