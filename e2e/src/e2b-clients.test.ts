import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { AuthenticationError, CommandExitError, FileType, NotFoundError, Sandbox, SandboxError, Volume, VolumeError, VolumeNotFoundError, type CommandHandle, type FilesystemEvent } from 'e2b';
import { Sandbox as CodeSandbox, NotFoundError as CiNotFoundError, type Result } from '@e2b/code-interpreter';
import { api, startServer, type TestServer } from './harness.js';

// The unmodified `e2b` (2.51.0) and `@e2b/code-interpreter` (2.8.0) clients, pinned in
// e2e/package.json, through their core flows on a real daemon and real sandboxes, configured as a
// user would: E2B_API_URL (the control plane, /e2b) and E2B_SANDBOX_URL (the data plane through
// the API port, /e2b/sandbox) and an `e2b_` key of our own. Lifecycle, commands (streaming, exit
// codes, cwd/envs/user, background, stdin, list, re-attach), files, watch, PTY, pause and connect,
// the code interpreter (state, languages, contexts, charts, DataFrames, errors, streaming), and
// what a stranger's or a wrong credential reaches: nothing.

let server: TestServer;
let key: string;
let sandboxUrl: string;
const made: string[] = [];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `cond` until it holds or `ms` passes (then fails with `what`). */
async function until(cond: () => boolean, ms: number, what: () => string): Promise<void> {
  for (const deadline = Date.now() + ms; !cond(); await sleep(50)) assert.ok(Date.now() < deadline, what());
}

async function templateReady(name: string): Promise<void> {
  for (const deadline = Date.now() + 15 * 60_000; ; await sleep(2000)) {
    const t = await api(server, 'GET', `/v1/templates/${name}`);
    if (t.body?.status === 'active') return;
    assert.ok(Date.now() < deadline && t.body?.status !== 'failed', `template ${name}: ${JSON.stringify(t.body)}`);
  }
}

async function baseSandbox(opts: Parameters<typeof Sandbox.create>[1] = {}): Promise<Sandbox> {
  const sbx = await Sandbox.create('base', { timeoutMs: 600_000, ...opts });
  made.push(sbx.sandboxId);
  return sbx;
}

before(async () => {
  server = await startServer({ env: { SANDBOXD_REGISTRY_URL: 'none' }, templates: ['base', 'code-interpreter'] });
  await templateReady('base');
  await templateReady('code-interpreter');
  const k = await api(server, 'POST', '/v1/admin/keys', { org: 'default', name: 'e2b-clients', format: 'e2b' });
  assert.equal(k.status, 201, JSON.stringify(k.body));
  key = k.body.secret;
  sandboxUrl = `${server.baseUrl}/e2b/sandbox`;
  // All a user sets: the two URLs and the key.
  process.env.E2B_API_URL = `${server.baseUrl}/e2b`;
  process.env.E2B_SANDBOX_URL = sandboxUrl;
  process.env.E2B_API_KEY = key;
  // Nothing may reach E2B's own hosts: a client that ignored the URLs would fail, not leak.
  process.env.E2B_DOMAIN = 'invalid';
});

after(async () => {
  for (const id of made) await api(server, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
  await server?.stop();
});

test('lifecycle: create, isRunning, list, kill; a killed, expired or unknown sandbox is NotFoundError', { timeout: 120_000 }, async () => {
  const sbx = await baseSandbox({ metadata: { suite: 'e2b-clients' } });
  assert.match(sbx.sandboxId, /^[a-z0-9]/);
  assert.equal(await sbx.isRunning(), true);
  const listed = await Sandbox.list({ query: { metadata: { suite: 'e2b-clients' } } }).nextItems();
  assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId]);
  assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n');

  assert.equal(await sbx.kill(), true);
  assert.equal(await sbx.isRunning(), false);
  await assert.rejects(sbx.commands.run('true', { requestTimeoutMs: 20_000 }), NotFoundError, 'a command in a killed sandbox');
  await assert.rejects(Sandbox.connect(sbx.sandboxId), NotFoundError);
  await assert.rejects(Sandbox.connect('sbnosuchsandbox00000000'), NotFoundError);

  // Expired: its timeout passed (the daemon's sweep ends it).
  const brief = await baseSandbox({ timeoutMs: 1000 });
  for (const deadline = Date.now() + 20_000; (await api(server, 'GET', `/v1/sandboxes/${brief.sandboxId}`)).body?.status === 'running'; await sleep(250)) {
    assert.ok(Date.now() < deadline, 'the sandbox outlived its timeout');
  }
  await assert.rejects(Sandbox.getInfo(brief.sandboxId), NotFoundError);
  await assert.rejects(Sandbox.connect(brief.sandboxId), NotFoundError);
  await assert.rejects(brief.commands.run('true', { requestTimeoutMs: 20_000 }), NotFoundError);
  assert.equal(await brief.isRunning(), false);
});

test('commands.run: output streams while the command runs; exit codes; cwd, envs and user', { timeout: 120_000 }, async () => {
  const sbx = await baseSandbox({ envs: { FROM_CREATE: 'create-env' } });
  const chunks: Array<{ at: number; data: string }> = [];
  const errs: string[] = [];
  const t0 = Date.now();
  const res = await sbx.commands.run('echo first; sleep 1; echo second; echo oops >&2', {
    onStdout: (d) => void chunks.push({ at: Date.now() - t0, data: d }),
    onStderr: (d) => void errs.push(d),
  });
  const done = Date.now() - t0;
  assert.equal(res.exitCode, 0);
  assert.equal(res.stdout, 'first\nsecond\n');
  assert.equal(res.stderr, 'oops\n');
  assert.equal(chunks.map((c) => c.data).join(''), 'first\nsecond\n');
  assert.equal(errs.join(''), 'oops\n');
  assert.equal(chunks[0]!.data, 'first\n');
  assert.ok(chunks[0]!.at < done - 700, `the first chunk came at ${chunks[0]!.at} ms, the command ended at ${done} ms: not streamed`);

  const failed = await sbx.commands.run('echo partial; echo bad >&2; exit 3').then(
    () => assert.fail('a non-zero exit must reject'),
    (e: unknown) => e,
  );
  assert.ok(failed instanceof CommandExitError, String(failed));
  assert.equal(failed.exitCode, 3);
  assert.equal(failed.stdout, 'partial\n');
  assert.equal(failed.stderr, 'bad\n');

  // E2B's defaults: the user `user` in /home/user; the create's envVars reach every command.
  assert.equal((await sbx.commands.run('whoami; pwd; echo $FROM_CREATE')).stdout, 'user\n/home/user\ncreate-env\n');
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n');
  assert.equal((await sbx.commands.run('whoami', { user: 'user' })).stdout, 'user\n');
  assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n');
  assert.equal((await sbx.commands.run('echo "$A-$B"', { envs: { A: 'one', B: 'two words' } })).stdout, 'one-two words\n');
  // A file written by `user` is theirs; root's is root's.
  await sbx.commands.run('touch /tmp/by-user');
  await sbx.commands.run('touch /tmp/by-root', { user: 'root' });
  assert.equal((await sbx.commands.run('stat -c %U /tmp/by-user /tmp/by-root')).stdout, 'user\nroot\n');
});

test('background commands: wait, kill, stdin, list, and re-attach with connect after the stream is dropped', { timeout: 180_000 }, async () => {
  const sbx = await baseSandbox();
  const bg = await sbx.commands.run('sleep 1; echo finished', { background: true });
  assert.ok(bg.pid > 0);
  const r = await bg.wait();
  assert.deepEqual([r.exitCode, r.stdout], [0, 'finished\n']);

  const long = await sbx.commands.run('sleep 600', { background: true });
  const listed = await sbx.commands.list();
  const entry = listed.find((p) => p.pid === long.pid);
  assert.ok(entry, JSON.stringify(listed));
  assert.match([entry.cmd, ...entry.args].join(' '), /sleep 600/);
  assert.equal(await long.kill(), true);
  await assert.rejects(long.wait(), CommandExitError, 'a killed command ends with an exit error');
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === long.pid), 'gone from the list');
  assert.equal(await sbx.commands.kill(long.pid), false, 'killing it again: false');

  // stdin: the handle's sendStdin and closeStdin, then the module's sendStdin by pid.
  const out: string[] = [];
  const cat = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => void out.push(d) });
  await cat.sendStdin('hello\n');
  await until(() => out.join('').includes('hello\n'), 10_000, () => `cat echoed ${JSON.stringify(out)}`);
  await sbx.commands.sendStdin(cat.pid, 'world\n');
  assert.equal(sbx.commands.supportsStdinClose, true);
  await cat.closeStdin();
  const catDone = await cat.wait();
  assert.deepEqual([catDone.exitCode, catDone.stdout], [0, 'hello\nworld\n']);

  // Re-attach: drop the starting stream mid-way; connect(pid) sees what was written so far and what follows.
  const ticker = await sbx.commands.run('for i in 1 2 3 4 5 6; do echo line$i; sleep 0.4; done', { background: true });
  await sleep(1000);
  await ticker.disconnect();
  await sleep(500);
  const seen: string[] = [];
  const again: CommandHandle = await sbx.commands.connect(ticker.pid, { onStdout: (d) => void seen.push(d) });
  const end = await again.wait();
  assert.equal(end.exitCode, 0);
  assert.equal(end.stdout, 'line1\nline2\nline3\nline4\nline5\nline6\n');
  assert.ok(seen.join('').endsWith('line6\n'), JSON.stringify(seen));
  await assert.rejects(sbx.commands.connect(999_999), NotFoundError, 'an unknown pid');
});

test('files: text, bytes, many at once, list, exists, makeDir, rename, remove, getInfo; relative paths are under /home/user', { timeout: 120_000 }, async () => {
  const sbx = await baseSandbox();
  const info = await sbx.files.write('notes.txt', 'hello files\n');
  assert.deepEqual([info.name, info.path], ['notes.txt', '/home/user/notes.txt']);
  assert.equal(await sbx.files.read('notes.txt'), 'hello files\n');
  assert.equal(await sbx.files.read('/home/user/notes.txt'), 'hello files\n');
  assert.equal((await sbx.commands.run('cat /home/user/notes.txt; stat -c %U /home/user/notes.txt')).stdout, 'hello files\nuser\n');

  const bytes = new Uint8Array(256).map((_, i) => i);
  await sbx.files.write('/tmp/all.bin', bytes.buffer);
  assert.deepEqual(Buffer.from(await sbx.files.read('/tmp/all.bin', { format: 'bytes' })), Buffer.from(bytes));
  assert.equal((await sbx.commands.run('sha256sum < /tmp/all.bin | cut -c1-16')).stdout.trim(), (await import('node:crypto')).createHash('sha256').update(bytes).digest('hex').slice(0, 16));

  const many = await sbx.files.write([
    { path: 'multi/a.txt', data: 'A' },
    { path: '/home/user/multi/sub/b.txt', data: 'B' },
    { path: 'multi/c.bin', data: new Uint8Array([0, 1, 2]).buffer },
  ]);
  assert.deepEqual(many.map((w) => w.path).sort(), ['/home/user/multi/a.txt', '/home/user/multi/c.bin', '/home/user/multi/sub/b.txt']);
  const listing = await sbx.files.list('multi');
  assert.deepEqual(listing.map((e) => `${e.name}:${e.type}`).sort(), ['a.txt:file', 'c.bin:file', 'sub:dir']);
  const deep = await sbx.files.list('/home/user/multi', { depth: 2 });
  assert.ok(deep.some((e) => e.path === '/home/user/multi/sub/b.txt'), JSON.stringify(deep.map((e) => e.path)));

  assert.equal(await sbx.files.exists('multi/a.txt'), true);
  assert.equal(await sbx.files.exists('multi/nope.txt'), false);
  assert.equal(await sbx.files.makeDir('made/deep'), true);
  assert.equal(await sbx.files.makeDir('made/deep'), false, 'already there');
  assert.equal((await sbx.files.getInfo('made/deep')).type, FileType.DIR);

  const moved = await sbx.files.rename('multi/a.txt', 'made/a-moved.txt');
  assert.equal(moved.path, '/home/user/made/a-moved.txt');
  assert.equal(await sbx.files.read('made/a-moved.txt'), 'A');
  assert.equal(await sbx.files.exists('multi/a.txt'), false);

  const st = await sbx.files.getInfo('notes.txt');
  assert.equal(st.name, 'notes.txt');
  assert.equal(st.type, FileType.FILE);
  assert.equal(st.path, '/home/user/notes.txt');
  assert.equal(st.size, 12);
  assert.equal(st.owner, 'user');
  assert.match(st.permissions, /^-rw/);
  assert.ok(st.modifiedTime instanceof Date && Math.abs(st.modifiedTime.getTime() - Date.now()) < 120_000, String(st.modifiedTime));

  await sbx.files.remove('multi');
  assert.equal(await sbx.files.exists('multi/sub/b.txt'), false);
  await assert.rejects(sbx.files.read('multi/sub/b.txt'), NotFoundError);
  await assert.rejects(sbx.files.getInfo('nope'), NotFoundError);
  // The `user` option: whose file it is, and whose home a relative path is under.
  await sbx.files.write('/tmp/root-owned.txt', 'yes', { user: 'root' });
  assert.equal(await sbx.files.read('/tmp/root-owned.txt', { user: 'root' }), 'yes');
  await sbx.files.write('rel-root.txt', 'r', { user: 'root' });
  assert.equal((await sbx.commands.run('stat -c %U /tmp/root-owned.txt /root/rel-root.txt', { user: 'root' })).stdout, 'root\nroot\n');
});

test('files.watchDir: create, write, rename and remove events', { timeout: 120_000 }, async () => {
  const sbx = await baseSandbox();
  await sbx.files.makeDir('watched');
  const events: FilesystemEvent[] = [];
  const handle = await sbx.files.watchDir('watched', (e) => void events.push(e));
  try {
    await sbx.files.write('watched/one.txt', 'x');
    await sbx.commands.run('mv /home/user/watched/one.txt /home/user/watched/two.txt; rm /home/user/watched/two.txt');
    const seen = () => events.map((e) => `${e.type}:${e.name}`);
    await until(() => seen().includes('remove:two.txt'), 15_000, () => `events ${JSON.stringify(seen())}`);
    for (const want of ['create:one.txt', 'write:one.txt', 'rename:one.txt', 'create:two.txt']) {
      assert.ok(seen().includes(want), `${want} in ${JSON.stringify(seen())}`);
    }
  } finally {
    await handle.stop();
  }
  await assert.rejects(sbx.files.watchDir('no-such-dir', () => undefined), NotFoundError);
});

test('PTY: create, sendInput, resize, output, exit', { timeout: 120_000 }, async () => {
  const sbx = await baseSandbox();
  let out = '';
  const dec = new TextDecoder();
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void (out += dec.decode(d, { stream: true })), envs: { PTY_VAR: 'in-pty' }, cwd: '/tmp' });
  const enc = new TextEncoder();
  await sbx.pty.sendInput(pty.pid, enc.encode('echo $((6*7)) $PTY_VAR $PWD; stty size; tty\n'));
  await until(() => /42 in-pty \/tmp/.test(out) && /24 80/.test(out), 15_000, () => `pty output ${JSON.stringify(out)}`);
  assert.match(out, /\/dev\/pts\/\d+/);
  await sbx.pty.resize(pty.pid, { cols: 120, rows: 40 });
  await sbx.pty.sendInput(pty.pid, enc.encode('stty size\n'));
  await until(() => /40 120/.test(out), 15_000, () => `after resize ${JSON.stringify(out)}`);
  await sbx.pty.sendInput(pty.pid, enc.encode('exit 0\n'));
  const end = await pty.wait();
  assert.equal(end.exitCode, 0);
  // A second terminal killed from outside.
  const other = await sbx.pty.create({ cols: 80, rows: 24, onData: () => undefined });
  assert.equal(await sbx.pty.kill(other.pid), true);
  await assert.rejects(other.wait());
});

test('pause, then Sandbox.connect resumes it with its files and processes', { timeout: 180_000 }, async () => {
  const sbx = await baseSandbox();
  await sbx.files.write('state.txt', 'kept');
  const bg = await sbx.commands.run('sleep 900', { background: true });
  assert.equal(await sbx.pause(), true);
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running');
  assert.equal(await again.files.read('state.txt'), 'kept');
  assert.ok((await again.commands.list()).some((p) => p.pid === bg.pid), 'the process outlived the pause');
  assert.equal((await again.commands.run('echo resumed')).stdout, 'resumed\n');
});

test('snapshots: createSnapshot, listSnapshots, Sandbox.create from one (by id and by name) has its files, deleteSnapshot', { timeout: 240_000 }, async () => {
  const sbx = await baseSandbox();
  await sbx.files.write('snap.txt', 'in the snapshot');
  const snap = await sbx.createSnapshot();
  assert.match(snap.snapshotId, /^snap_/);
  assert.deepEqual(snap.names, []);
  const name = `e2b-clients-${Date.now()}`;
  const named = await Sandbox.createSnapshot(sbx.sandboxId, { name });
  assert.deepEqual(named.names, [name]);
  // The sandbox runs on after it.
  assert.equal((await sbx.commands.run('cat snap.txt')).stdout, 'in the snapshot');

  const mine = await sbx.listSnapshots().nextItems();
  assert.deepEqual(mine.map((s) => s.snapshotId), [named.snapshotId, snap.snapshotId], 'this sandbox\'s, newest first');
  const paged = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 1 });
  assert.deepEqual((await paged.nextItems()).map((s) => s.snapshotId), [named.snapshotId]);
  assert.equal(paged.hasNext, true);
  assert.deepEqual((await paged.nextItems()).map((s) => s.snapshotId), [snap.snapshotId]);
  assert.equal(paged.hasNext, false);
  assert.deepEqual(await Sandbox.listSnapshots({ name }).nextItems(), [named]);

  for (const ref of [snap.snapshotId, name]) {
    const from = await Sandbox.create(ref, { timeoutMs: 600_000 });
    made.push(from.sandboxId);
    assert.notEqual(from.sandboxId, sbx.sandboxId);
    assert.equal(await from.files.read('snap.txt'), 'in the snapshot', ref);
  }

  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'a deleted snapshot is not found');
  const failed = await Sandbox.create(snap.snapshotId).then(
    (s) => (made.push(s.sandboxId), assert.fail('a create from a deleted snapshot must fail')),
    (e: unknown) => e,
  );
  assert.ok(failed instanceof SandboxError && failed.statusCode === 404, String(failed));
  assert.equal(await Sandbox.deleteSnapshot('base'), false, 'a template is not deleted through it');
  assert.equal((await api(server, 'GET', '/v1/templates/base')).status, 200);
  assert.equal(await Sandbox.deleteSnapshot(named.snapshotId), true);
  assert.deepEqual(await sbx.listSnapshots().nextItems(), []);
});

test('volumes: Volume.create, list, getInfo, connect; two sandboxes share one through volumeMounts; destroy true then false', { timeout: 240_000 }, async () => {
  const name = `e2b-vol-${Date.now()}`;
  const vol = await Volume.create(name);
  try {
    assert.match(vol.volumeId, /^vol-[a-z0-9]{20}$/, 'our volume id');
    assert.equal(vol.name, name);
    assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId && v.name === name), 'listed');
    const info = await Volume.getInfo(vol.volumeId);
    assert.deepEqual([info.volumeId, info.name], [vol.volumeId, name]);
    assert.equal((await Volume.connect(vol.volumeId)).name, name);
    await assert.rejects(Volume.getInfo('vol-00000000000000000000'), VolumeNotFoundError);

    // The client sends the volume's name in volumeMounts, from a Volume or a plain name.
    const writer = await baseSandbox({ volumeMounts: { '/mnt/shared': vol } });
    await writer.files.write('/mnt/shared/note.txt', 'from the first sandbox', { user: 'root' });
    assert.deepEqual((await Sandbox.getInfo(writer.sandboxId)).volumeMounts, [{ name, path: '/mnt/shared' }]);
    const reader = await baseSandbox({ volumeMounts: { '/data': name } });
    assert.equal(await reader.files.read('/data/note.txt'), 'from the first sandbox');
    assert.equal((await reader.commands.run('cat /data/note.txt')).stdout, 'from the first sandbox');

    // The content API (a volume's files without a sandbox) is not served: a clear VolumeError here.
    const content = await vol.list('/', { apiUrl: `${server.baseUrl}/e2b` }).then(
      () => assert.fail('the volume content API is not served'),
      (e: unknown) => e,
    );
    assert.ok(content instanceof VolumeError && !(content instanceof VolumeNotFoundError) && /405.*not served/.test(content.message), String(content));

    // Another organization: nothing of ours.
    const org = await api(server, 'POST', '/v1/admin/orgs', { name: `e2b-vol-${Date.now()}` });
    assert.equal(org.status, 201, JSON.stringify(org.body));
    const theirKey = (await api(server, 'POST', '/v1/admin/keys', { org: org.body.name, format: 'e2b' })).body.secret as string;
    assert.deepEqual(await Volume.list({ apiKey: theirKey }), []);
    await assert.rejects(Volume.getInfo(vol.volumeId, { apiKey: theirKey }), VolumeNotFoundError);
    assert.equal(await Volume.destroy(vol.volumeId, { apiKey: theirKey }), false);

    // Mounted: refused (our VOLUME_IN_USE), then free once its sandboxes are killed.
    await assert.rejects(Volume.destroy(vol.volumeId), (e: unknown) => e instanceof VolumeError && /409/.test(e.message));
    for (const sbx of [writer, reader]) assert.equal(await sbx.kill(), true);
    assert.equal(await Volume.destroy(vol.volumeId), true);
    assert.equal(await Volume.destroy(vol.volumeId), false, 'a destroyed volume is not found');
    assert.ok(!(await Volume.list()).some((v) => v.volumeId === vol.volumeId));
  } finally {
    await api(server, 'DELETE', `/v1/volumes/${vol.volumeId}?force=true`).catch(() => undefined);
  }
});

test('code interpreter: runCode with state, streaming, results, errors; javascript and bash', { timeout: 300_000 }, async () => {
  const sbx = await CodeSandbox.create({ timeoutMs: 600_000, envs: { FROM_CREATE: 'ci-env' } });
  made.push(sbx.sandboxId);
  assert.equal((await sbx.runCode('x = 40')).error, undefined);
  assert.equal((await sbx.runCode("import os\nos.environ.get('FROM_CREATE')")).text, "'ci-env'", "the create's envs reach a cell");
  assert.equal((await sbx.runCode('x + 2')).text, '42');

  const outs: Array<{ at: number; line: string }> = [];
  const errs: string[] = [];
  const results: Result[] = [];
  const t0 = Date.now();
  const streamed = await sbx.runCode("import sys, time\nprint('tick', flush=True)\ntime.sleep(1)\nprint('to err', file=sys.stderr)\nprint('tock')\nx", {
    onStdout: (o) => void outs.push({ at: Date.now() - t0, line: o.line }),
    onStderr: (o) => void errs.push(o.line),
    onResult: (r) => void results.push(r),
  });
  const done = Date.now() - t0;
  assert.deepEqual(outs.map((o) => o.line), ['tick\n', 'tock\n']);
  assert.ok(outs[0]!.at < done - 700, `the first line came at ${outs[0]!.at} ms, the cell ended at ${done} ms: not streamed`);
  assert.deepEqual(errs, ['to err\n']);
  assert.deepEqual(streamed.logs, { stdout: ['tick\n', 'tock\n'], stderr: ['to err\n'] });
  assert.equal(results.length, 1);
  assert.equal(results[0]!.text, '40');
  assert.equal(results[0]!.isMainResult, true);

  const failed = await sbx.runCode("def f():\n    raise ValueError('bad value')\nf()");
  assert.ok(failed.error, JSON.stringify(failed.toJSON()));
  assert.equal(failed.error.name, 'ValueError');
  assert.equal(failed.error.value, 'bad value');
  assert.match(failed.error.traceback, /Traceback[\s\S]*ValueError/);
  const onError: string[] = [];
  await sbx.runCode('undefined_name', { onError: (e) => void onError.push(e.name) });
  assert.deepEqual(onError, ['NameError']);

  const chart = await sbx.runCode("import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()");
  const fig = chart.results.find((r) => r.png);
  assert.ok(fig?.png, JSON.stringify(chart.toJSON()).slice(0, 400));
  assert.equal(Buffer.from(fig.png, 'base64').subarray(1, 4).toString(), 'PNG');
  // The chart object: the figure's data, on the same result as its png.
  const line = fig.chart as any;
  assert.equal(chart.results.filter((r) => r.png).length, 1, 'one result per figure');
  assert.equal(line?.type, 'line', JSON.stringify(line).slice(0, 400));
  assert.equal(line.title, 'squares');
  assert.deepEqual(line.elements.map((e: any) => e.points), [[[1, 1], [2, 4], [3, 9]]]);
  assert.equal(line.x_scale, 'linear');
  assert.ok(line.x_ticks.length > 0 && line.x_ticks.length === line.x_tick_labels.length, JSON.stringify(line));
  const labelled = await sbx.runCode(
    "import matplotlib.pyplot as plt\nplt.plot([0, 1, 2], [2, 3, 5], label='speed')\nplt.xlabel('time (s)')\nplt.ylabel('distance [m]')\nplt.yscale('log')\nplt.show()",
  );
  const lc = labelled.results.find((r) => r.png)?.chart as any;
  assert.deepEqual(
    { label: lc?.elements?.[0]?.label, x_label: lc?.x_label, y_label: lc?.y_label, x_unit: lc?.x_unit, y_unit: lc?.y_unit, y_scale: lc?.y_scale },
    { label: 'speed', x_label: 'time (s)', y_label: 'distance [m]', x_unit: 's', y_unit: 'm', y_scale: 'log' },
  );
  const bars = await sbx.runCode("import matplotlib.pyplot as plt\nplt.bar(['a', 'b', 'c'], [3, 5, 2], label='sales')\nplt.title('per shop')\nplt.xlabel('shop')\nplt.show()");
  const bc = bars.results.find((r) => r.png)?.chart as any;
  assert.equal(bc?.type, 'bar', JSON.stringify(bars.toJSON()).slice(0, 400));
  assert.equal(bc.title, 'per shop');
  assert.equal(bc.x_label, 'shop');
  assert.deepEqual(bc.elements, [
    { label: 'a', value: 3, group: 'sales' },
    { label: 'b', value: 5, group: 'sales' },
    { label: 'c', value: 2, group: 'sales' },
  ]);
  const pie = await sbx.runCode("import matplotlib.pyplot as plt\nplt.pie([1, 2, 3], labels=['x', 'y', 'z'])\nplt.title('shares')\nplt.show()");
  const pc = pie.results.find((r) => r.png)?.chart as any;
  assert.equal(pc?.type, 'pie', JSON.stringify(pie.toJSON()).slice(0, 400));
  assert.equal(pc.title, 'shares');
  assert.deepEqual(pc.elements.map((e: any) => [e.label, Math.round(e.angle), e.radius]), [['x', 60, 1], ['y', 120, 1], ['z', 180, 1]]);
  const two = await sbx.runCode(
    "import matplotlib.pyplot as plt\nfig, (a, b) = plt.subplots(1, 2)\na.boxplot([[1, 2, 3, 4, 5, 20]])\nb.scatter([1, 2], [3, 4])\nfig.suptitle('both')\nplt.show()",
  );
  const sc = two.results.find((r) => r.png)?.chart as any;
  assert.equal(sc?.type, 'superchart', JSON.stringify(two.toJSON()).slice(0, 400));
  assert.equal(sc.title, 'both');
  assert.deepEqual(sc.elements.map((e: any) => e.type), ['box_and_whisker', 'scatter']);
  assert.deepEqual(sc.elements[0].elements[0].outliers, [20]);
  assert.deepEqual(sc.elements[1].elements[0].points, [[1, 3], [2, 4]]);

  const df = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})");
  const main = df.results.find((r) => r.isMainResult)!;
  assert.match(main.html ?? '', /<table[\s\S]*<th>a<\/th>[\s\S]*<td>x<\/td>/);
  assert.match(main.text ?? '', /a\s+b\s*\n0\s+1\s+x/);

  const js = await sbx.runCode('const double = (n) => n * 2; [1, 2, 3].map(double)', { language: 'javascript' });
  assert.equal(js.error, undefined, JSON.stringify(js.error));
  assert.match(js.text ?? '', /2,\s*4,\s*6/);
  assert.match((await sbx.runCode('double(21)', { language: 'js' })).text ?? '', /^42$/);
  const jsErr = await sbx.runCode("throw new TypeError('js bad')", { language: 'js' });
  assert.equal(jsErr.error?.name, 'TypeError');
  assert.equal(jsErr.error?.value, 'js bad');

  const sh = await sbx.runCode('echo "from bash $((2+3))"; cd /tmp; pwd', { language: 'bash' });
  assert.equal(sh.error, undefined, JSON.stringify(sh.error));
  assert.equal(sh.logs.stdout.join(''), 'from bash 5\n/tmp\n');
  const shFail = await sbx.runCode('echo before; exit 4', { language: 'bash' });
  assert.ok(shFail.error, 'a failing bash cell reports an error');
  const unsupported = await sbx.runCode('1', { language: 'r' }).then(
    (e) => e.error?.name ?? 'no error',
    (e: unknown) => (e as Error).constructor.name,
  );
  assert.notEqual(unsupported, 'no error', 'r is not in the template: a clear refusal');
});

test('code interpreter contexts: create with cwd, list, restart, remove', { timeout: 300_000 }, async () => {
  const sbx = await CodeSandbox.create({ timeoutMs: 600_000 });
  made.push(sbx.sandboxId);
  await sbx.files.makeDir('/tmp/ctxdir');
  const ctx = await sbx.createCodeContext({ cwd: '/tmp/ctxdir', language: 'python' });
  assert.deepEqual([ctx.language, ctx.cwd], ['python', '/tmp/ctxdir']);
  assert.equal((await sbx.runCode('import os\nv = 7\nos.getcwd()', { context: ctx })).text, "'/tmp/ctxdir'");
  assert.equal((await sbx.runCode('v * 6', { context: ctx })).text, '42');
  assert.equal((await sbx.runCode("'v' in dir()")).text, 'False', 'the default context is another one');
  const listed = await sbx.listCodeContexts();
  assert.ok(listed.some((c) => c.id === ctx.id && c.cwd === '/tmp/ctxdir'), JSON.stringify(listed));
  await sbx.restartCodeContext(ctx);
  assert.equal((await sbx.runCode('v', { context: ctx })).error?.name, 'NameError');
  assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, "'/tmp/ctxdir'", 'cwd kept across restart');
  await sbx.removeCodeContext(ctx);
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
  await assert.rejects(sbx.runCode('1', { context: ctx }), CiNotFoundError);
});

test('credentials: a wrong access token is 401; another organization reaches nothing', { timeout: 180_000 }, async () => {
  const sbx = await baseSandbox();
  const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
  const call = (headers: Record<string, string>) =>
    fetch(`${sandboxUrl}/filesystem.Filesystem/Stat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'e2b-sandbox-id': sbx.sandboxId, 'e2b-sandbox-port': '49983', ...headers },
      body: JSON.stringify({ path: '/home/user' }),
      signal: AbortSignal.timeout(30_000),
    });
  const ok = await call({ 'x-access-token': token });
  assert.equal(ok.status, 200, await ok.clone().text());
  assert.equal(((await ok.json()) as { entry: { path: string } }).entry.path, '/home/user');
  for (const bad of [`${token.slice(0, -4)}AAAA`, 'e2b_not_a_token', '']) {
    const r = await call({ 'x-access-token': bad });
    assert.equal(r.status, 401, `token ${JSON.stringify(bad.slice(-8))}: ${await r.text()}`);
  }
  // The client itself with a wrong token (its public constructor, as connect builds it): AuthenticationError.
  const forged = new Sandbox({ sandboxId: sbx.sandboxId, envdVersion: '0.6.3', envdAccessToken: `${token.slice(0, -4)}AAAA` });
  await assert.rejects(forged.files.read('/etc/hostname'), AuthenticationError);
  await assert.rejects(forged.commands.run('true', { requestTimeoutMs: 20_000 }), (e: unknown) => /unauthenticated|401|auth/i.test(String(e)));

  // Another organization, with an e2b_ key and a sandbox of its own.
  const org = await api(server, 'POST', '/v1/admin/orgs', { name: `e2b-clients-${Date.now()}` });
  assert.equal(org.status, 201, JSON.stringify(org.body));
  const theirKey = (await api(server, 'POST', '/v1/admin/keys', { org: org.body.name, format: 'e2b' })).body.secret as string;
  const theirs = await Sandbox.create('base', { apiKey: theirKey, timeoutMs: 300_000 });
  made.push(theirs.sandboxId);
  assert.ok(!(await Sandbox.list({ apiKey: theirKey }).nextItems()).some((s) => s.sandboxId === sbx.sandboxId));
  await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: theirKey }), NotFoundError);
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey: theirKey }), NotFoundError);
  assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey: theirKey }), false);
  // Their sandbox's token and their key, aimed at our sandbox's data plane: 401.
  const theirToken = (theirs as unknown as { envdAccessToken: string }).envdAccessToken;
  assert.equal((await call({ 'x-access-token': theirToken })).status, 401);
  assert.equal((await call({ 'x-api-key': theirKey })).status, 401);
  // And ours untouched.
  assert.equal((await sbx.commands.run('echo still mine')).stdout, 'still mine\n');
  assert.equal((await theirs.commands.run('echo theirs')).stdout, 'theirs\n');
});
