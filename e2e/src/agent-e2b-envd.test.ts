import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { Filesystem, FileType } from '../../packages/server/dist/gateway/envd/gen/filesystem/filesystem_pb.js';
import { Process } from '../../packages/server/dist/gateway/envd/gen/process/process_pb.js';
import { createSandbox, startAgentServer, stopServer, type CreatedSandbox, type TestServer } from './agent-support.js';

// E2B's in-sandbox daemon protocol ("envd": Connect RPC, served by the daemon's gateway over the
// agent's plain routes, and /files, the agent's) for a real sandbox, spoken on the wire as E2B's
// clients speak it (Connect JSON over HTTP/1.1), through the sandbox's own route (/e2b/envd/...)
// and E2B's base URL with its routing headers; and in Connect's binary encoding.

let server: TestServer;
let sb: CreatedSandbox;

before(async () => {
  server = await startAgentServer({ templates: ['base'] });
  sb = await createSandbox(server, { template_name: 'base' });
});
after(async () => {
  await stopServer(server);
});

type Via = { url: (method: string) => URL; headers: Record<string, string> };
/** The sandbox's own route (Bearer token; no Basic user: the default user). */
const own = (): Via => ({ url: (m) => new URL(`/e2b/envd/${m}`, sb.publicHost), headers: { authorization: `Bearer ${sb.authToken}` } });
/** E2B's base URL on the API port, as `E2B_SANDBOX_URL` points the clients at it; `user` as E2B sends it. */
const e2b = (user?: string): Via => ({
  url: (m) => new URL(`/e2b/sandbox/${m}`, server.baseUrl),
  headers: {
    'e2b-sandbox-id': sb.id,
    'e2b-sandbox-port': '49983',
    'x-access-token': sb.authToken,
    ...(user ? { authorization: `Basic ${Buffer.from(`${user}:`).toString('base64')}` } : {}),
  },
});

async function unary(via: Via, method: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(via.url(method), {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'connect-protocol-version': '1', ...via.headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

/** A server stream's messages as they arrive (Connect's enveloped JSON), each with when it came. */
async function* stream(via: Via, method: string, body: unknown, signal?: AbortSignal, extra: Record<string, string> = {}): AsyncGenerator<{ msg: any; ms: number }> {
  const payload = Buffer.from(JSON.stringify(body));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  const t0 = Date.now();
  const res = await fetch(via.url(method), {
    method: 'POST',
    headers: { 'content-type': 'application/connect+json', 'connect-protocol-version': '1', 'keepalive-ping-interval': '50', ...via.headers, ...extra },
    body: Buffer.concat([head, payload]),
    signal,
  });
  assert.equal(res.status, 200, `${method} answered ${res.status}`);
  let buf = Buffer.alloc(0);
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
      const flags = buf[0]!;
      const msg = JSON.parse(buf.subarray(5, 5 + buf.readUInt32BE(1)).toString() || '{}');
      buf = buf.subarray(5 + buf.readUInt32BE(1));
      if (flags & 2) {
        if (msg.error) throw Object.assign(new Error(`${msg.error.code}: ${msg.error.message}`), { code: msg.error.code });
        return;
      }
      yield { msg, ms: Date.now() - t0 };
    }
  }
}

const b64 = (s: string) => Buffer.from(s).toString('base64');
const text = (s: string | undefined) => (s ? Buffer.from(s, 'base64').toString() : '');

async function run(via: Via, cmd: string, extra: Record<string, unknown> = {}) {
  const out = { pid: 0, stdout: '', stderr: '', end: undefined as any, firstDataMs: -1 };
  for await (const { msg, ms } of stream(via, 'process.Process/Start', { process: { cmd: '/bin/bash', args: ['-l', '-c', cmd] }, ...extra })) {
    const e = msg.event ?? {};
    if (e.start) out.pid = e.start.pid;
    if (e.data?.stdout) out.stdout += text(e.data.stdout);
    if (e.data?.stderr) out.stderr += text(e.data.stderr);
    if (e.data && out.firstDataMs < 0) out.firstDataMs = ms;
    if (e.end) out.end = e.end;
  }
  return out;
}

test("the sandbox answers E2B's health check, and commands run inside it as E2B's default user", async () => {
  assert.equal((await fetch(new URL('/e2b/envd/health', sb.publicHost), { headers: own().headers })).status, 204);
  const r = await run(own(), 'id -un; id -u; echo "$HOME"; pwd; tr "\\0" " " < /proc/1/cmdline');
  const [name, uid, home, cwd, init] = r.stdout.split('\n');
  assert.deepEqual([name, uid, home, cwd], ['user', '1000', '/home/user', '/home/user']);
  assert.match(init!, /^\/\.sb\/init/, 'PID 1 is the sandbox init: the process runs in the sandbox');
  assert.equal(r.end.exitCode, undefined, 'exit code 0 (proto3 JSON omits it)');
  assert.equal(r.end.exited, true);
});

test("Connect's binary encoding, through E2B's base URL: processes and files, and errors as Connect codes", async () => {
  const transport = createConnectTransport({ baseUrl: `${server.baseUrl}/e2b/sandbox`, httpVersion: '1.1', useBinaryFormat: true });
  const headers = { ...e2b('root').headers };
  const proc = createClient(Process, transport);
  const fs = createClient(Filesystem, transport);
  let out = '';
  let exitCode = -1;
  for await (const r of proc.start({ process: { cmd: '/bin/sh', args: ['-c', 'id -un; printf "%s" "$X" > /tmp/bin.txt'], envs: { X: 'binary' } } }, { headers })) {
    const e = r.event?.event;
    if (e?.case === 'data' && e.value.output.case === 'stdout') out += Buffer.from(e.value.output.value).toString();
    if (e?.case === 'end') exitCode = e.value.exitCode;
  }
  assert.deepEqual([out, exitCode], ['root\n', 0]);
  const st = await fs.stat({ path: '/tmp/bin.txt' }, { headers });
  assert.deepEqual([st.entry?.type, st.entry?.size, st.entry?.owner], [FileType.FILE, 6n, 'root']);
  await assert.rejects(fs.stat({ path: '/tmp/none' }, { headers }), (err: ConnectError) => err.code === Code.NotFound);
  await assert.rejects(proc.sendInput({ process: { selector: { case: 'pid', value: 999_999 } }, input: { input: { case: 'stdin', value: Buffer.from('x') } } }, { headers }), (err: ConnectError) => err.code === Code.NotFound);
});

test('commands stream output while they run, and fail with their exit status', async () => {
  const r = await run(own(), 'echo one; sleep 1.2; echo two >&2; exit 4');
  assert.equal(r.stdout, 'one\n');
  assert.equal(r.stderr, 'two\n');
  assert.ok(r.firstDataMs >= 0 && r.firstDataMs < 1000, `first output after ${r.firstDataMs} ms`);
  assert.deepEqual([r.end.exitCode, r.end.error], [4, 'exit status 4']);
});

test("through E2B's base URL: the user of Basic credentials, root or user", async () => {
  const root = await run(e2b('root'), 'id -un; pwd');
  assert.equal(root.stdout, 'root\n/root\n');
  const user = await run(e2b('user'), 'id -un');
  assert.equal(user.stdout, 'user\n');
  const list = await unary(e2b(), 'process.Process/List', {});
  assert.equal(list.status, 200);
});

test('a background command outlives its stream: List, stdin, Connect by tag replays and follows, CloseStdin', async () => {
  const ac = new AbortController();
  const it = stream(own(), 'process.Process/Start', { process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo ready; cat; echo done'] }, tag: 'e2e-cat', stdin: true }, ac.signal);
  const pid = (await it.next()).value!.msg.event.start.pid as number;
  ac.abort();
  await new Promise((r) => setTimeout(r, 300));
  const list = await unary(own(), 'process.Process/List', {});
  assert.ok(list.body.processes.some((p: any) => p.pid === pid && p.tag === 'e2e-cat'), JSON.stringify(list.body));
  assert.equal((await unary(own(), 'process.Process/SendInput', { process: { pid }, input: { stdin: b64('typed\n') } })).status, 200);
  await new Promise((r) => setTimeout(r, 200));
  const following = (async () => {
    let out = '';
    let end;
    for await (const { msg } of stream(own(), 'process.Process/Connect', { process: { tag: 'e2e-cat' } })) {
      if (msg.event?.data?.stdout) out += text(msg.event.data.stdout);
      if (msg.event?.end) end = msg.event.end;
    }
    return { out, end };
  })();
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await unary(own(), 'process.Process/CloseStdin', { process: { pid } })).status, 200);
  const r = await following;
  assert.equal(r.out, 'ready\ntyped\ndone\n');
  assert.ok(r.end);
  const gone = await unary(own(), 'process.Process/SendSignal', { process: { pid }, signal: 'SIGNAL_SIGKILL' });
  assert.deepEqual([gone.status, gone.body.code], [404, 'not_found']);
});

test('a PTY: interactive bash, input, resize, kill', async () => {
  const ac = new AbortController();
  const it = stream(own(), 'process.Process/Start', { process: { cmd: '/bin/bash', args: ['-i', '-l'], envs: { TERM: 'xterm-256color' } }, pty: { size: { cols: 90, rows: 20 } } }, ac.signal);
  const pid = (await it.next()).value!.msg.event.start.pid as number;
  let out = '';
  let ended: any;
  const reading = (async () => {
    for await (const { msg } of { [Symbol.asyncIterator]: () => it }) {
      if (msg.event?.data?.pty) out += text(msg.event.data.pty);
      if (msg.event?.end) ended = msg.event.end;
    }
  })();
  const waitFor = async (re: RegExp) => {
    for (let i = 0; i < 100 && !re.test(out); i++) await new Promise((r) => setTimeout(r, 100));
    assert.match(out, re);
  };
  await unary(own(), 'process.Process/SendInput', { process: { pid }, input: { pty: b64('stty size; echo $((6*7))\n') } });
  await waitFor(/20 90[\s\S]*42/);
  assert.equal((await unary(own(), 'process.Process/Update', { process: { pid }, pty: { size: { cols: 132, rows: 43 } } })).status, 200);
  await unary(own(), 'process.Process/SendInput', { process: { pid }, input: { pty: b64('stty size\n') } });
  await waitFor(/43 132/);
  assert.equal((await unary(own(), 'process.Process/SendSignal', { process: { pid }, signal: 'SIGNAL_SIGKILL' })).status, 200);
  await reading;
  assert.equal(ended?.exited ?? false, false);
});

test("files: upload relative to the user's home (owned by user), download, list, stat, watch, remove", async () => {
  const ac = new AbortController();
  const watch = stream(own(), 'filesystem.Filesystem/WatchDir', { path: '/home/user', recursive: true }, ac.signal);
  assert.deepEqual((await watch.next()).value!.msg, { start: {} });
  const form = new FormData();
  form.append('file', new Blob(['hello from e2b']), 'notes/a.txt');
  form.append('file', new Blob([new Uint8Array([0, 255, 7])]), '/tmp/b.bin');
  const up = await fetch(new URL('/e2b/envd/files', sb.publicHost), { method: 'POST', body: form, headers: own().headers });
  assert.equal(up.status, 200);
  assert.deepEqual(await up.json(), [
    { name: 'a.txt', type: 'file', path: '/home/user/notes/a.txt' },
    { name: 'b.bin', type: 'file', path: '/tmp/b.bin' },
  ]);
  const events: any[] = [];
  for await (const { msg } of { [Symbol.asyncIterator]: () => watch }) {
    if (msg.filesystem) events.push(msg.filesystem);
    if (events.some((e) => e.name === 'notes/a.txt')) break;
  }
  ac.abort();
  assert.ok(events.some((e) => e.name === 'notes' && e.type === 'EVENT_TYPE_CREATE'), JSON.stringify(events));
  // Written in place, as E2B's daemon writes: a watcher sees the file itself, never a temp name.
  assert.ok(events.every((e) => /^notes(\/a\.txt)?$/.test(e.name)), JSON.stringify(events));
  const down = await fetch(new URL('/e2b/envd/files?path=notes%2Fa.txt', sb.publicHost), { headers: own().headers });
  assert.equal(await down.text(), 'hello from e2b');
  const bin = await fetch(new URL('/e2b/envd/files?path=%2Ftmp%2Fb.bin&username=root', sb.publicHost), { headers: own().headers });
  assert.deepEqual([...new Uint8Array(await bin.arrayBuffer())], [0, 255, 7]);
  const st = await unary(own(), 'filesystem.Filesystem/Stat', { path: 'notes/a.txt' });
  assert.deepEqual([st.body.entry.path, st.body.entry.owner, st.body.entry.group, st.body.entry.size, st.body.entry.type], ['/home/user/notes/a.txt', 'user', 'user', '14', 'FILE_TYPE_FILE']);
  const list = await unary(own(), 'filesystem.Filesystem/ListDir', { path: '/home/user', depth: 2 });
  assert.ok(list.body.entries.some((e: any) => e.path === '/home/user/notes/a.txt'));
  assert.equal((await unary(own(), 'filesystem.Filesystem/Remove', { path: 'notes' })).status, 200);
  const missing = await unary(own(), 'filesystem.Filesystem/Stat', { path: 'notes' });
  assert.deepEqual([missing.status, missing.body.code], [404, 'not_found']);
  const notFile = await fetch(new URL('/e2b/envd/files?path=nope.txt', sb.publicHost), { headers: own().headers });
  assert.equal(notFile.status, 404);
  assert.equal(((await notFile.json()) as any).code, 404);
});
