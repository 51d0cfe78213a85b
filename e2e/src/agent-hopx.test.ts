import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox } from '@hopx-ai/sdk';
import { api, startAgentServer, stopServer, type TestServer } from './agent-support.js';

// The official, unmodified HOPX TypeScript SDK (npm @hopx-ai/sdk) against our server: only its
// baseURL option points it here (real-client-notes.md).

let server: TestServer;
let sandbox: Sandbox;
let tmp: string;

before(async () => {
  server = await startAgentServer();
  tmp = await mkdtemp(join(tmpdir(), 'hopx-'));
  sandbox = await Sandbox.create({ template: 'code-interpreter', apiKey: server.apiKey, baseURL: server.baseUrl, envVars: { HOPX_VAR: 'from-create' }, timeoutSeconds: 3600 });
});
after(async () => {
  await sandbox?.kill().catch(() => undefined);
  await stopServer(server);
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

describe('@hopx-ai/sdk drives a sandbox unmodified', () => {
  test('runCode in python, javascript and bash; env, working dir, errors', async () => {
    const py = await sandbox.runCode('print(6 * 7)');
    assert.equal(py.stdout, '42\n');
    assert.equal(py.exit_code, 0);
    assert.ok(py.execution_time !== undefined);
    assert.equal((await sandbox.runCode('console.log("js")', { language: 'javascript' })).stdout, 'js\n');
    assert.equal((await sandbox.runCode('echo "$HOPX_VAR"', { language: 'bash' })).stdout, 'from-create\n');
    const env = await sandbox.runCode('import os; print(os.environ["ONE"], os.getcwd())', { env: { ONE: 'once' }, workingDir: '/tmp' });
    assert.equal(env.stdout, 'once /tmp\n');
    const err = await sandbox.runCode('raise RuntimeError("bad")');
    assert.match(err.stderr ?? '', /RuntimeError: bad/);
    assert.equal(err.success, false);
  });

  test('rich output: a matplotlib figure arrives as an image/png rich output', async () => {
    const r = await sandbox.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()', { timeout: 120 });
    const png = (r.richOutputs ?? []).find((o: any) => o.type === 'image/png');
    assert.ok(png, JSON.stringify(r.richOutputs));
    assert.equal(Buffer.from((png as any).data['image/png'], 'base64').subarray(1, 4).toString(), 'PNG');
  });

  test('runIpython returns the value of the last expression', async () => {
    const r = await sandbox.runIpython('5 + 10');
    assert.equal(r.result, '15');
  });

  test('runCode keeps variables between calls, and getJupyterSessions lists the kernel', async () => {
    await sandbox.runCode('counter = 41\nimport math');
    const r = await sandbox.runCode('print(counter + 1, math.floor(2.5))');
    assert.equal(r.stdout, '42 2\n');
    assert.equal((await sandbox.runIpython('counter * 2')).result, '82', 'runIpython is the same kernel');
    const sessions = await sandbox.getJupyterSessions();
    assert.ok(Array.isArray(sessions) && sessions.length >= 1, JSON.stringify(sessions));
    assert.equal((sessions[0] as any).language, 'python');
    assert.match((sessions[0] as any).kernel_id, /^kernel_/);
  });

  test('commands.run: bash -c with args, exit codes as results, working dir', async () => {
    const r = await sandbox.commands.run('echo $HOPX_VAR | tr a-z A-Z');
    assert.equal(r.stdout, 'FROM-CREATE\n');
    assert.equal(r.exit_code, 0);
    const fail = await sandbox.commands.run('exit 9');
    assert.equal(fail.exit_code, 9);
    assert.equal((await sandbox.commands.run('pwd', { workingDir: '/etc' })).stdout, '/etc\n');
  });

  test('files: write, read, list, exists, mkdir, remove, bytes, upload, download', async () => {
    await sandbox.files.write('/workspace/hopx/hello.txt', 'hi hopx');
    assert.equal(await sandbox.files.read('/workspace/hopx/hello.txt'), 'hi hopx');
    const list = await sandbox.files.list('/workspace/hopx');
    assert.equal(list.length, 1);
    assert.equal(list[0]!.name, 'hello.txt');
    assert.equal(list[0]!.isFile, true);
    assert.equal(list[0]!.size, 7);
    await sandbox.files.mkdir('/workspace/hopx/a/b');
    assert.equal(await sandbox.files.exists('/workspace/hopx/a/b'), true);
    assert.equal((await sandbox.files.list('/workspace/hopx')).find((f) => f.name === 'a')!.is_dir, true);
    await sandbox.files.remove('/workspace/hopx/a');
    assert.equal(await sandbox.files.exists('/workspace/hopx/a'), false);
    const bytes = randomBytes(70_000);
    await sandbox.files.writeBytes('/workspace/hopx/b.bin', bytes);
    assert.deepEqual(Buffer.from(await sandbox.files.readBytes('/workspace/hopx/b.bin')), bytes);
    const local = join(tmp, 'up load.bin');
    const data = randomBytes(3 * 1024 * 1024);
    await writeFile(local, data);
    await sandbox.files.upload(local, '/workspace/hopx/up load.bin');
    assert.deepEqual(Buffer.from(await sandbox.files.download('/workspace/hopx/up load.bin')), data);
    await assert.rejects(sandbox.files.read('/workspace/hopx/missing.txt'), (e: any) => e.constructor.name === 'FileNotFoundError');
  });

  test('env: getAll, get, set, update, setAll, delete', async () => {
    assert.equal((await sandbox.env.getAll()).HOPX_VAR, 'from-create');
    await sandbox.env.set('K1', 'v1');
    assert.equal(await sandbox.env.get('K1'), 'v1');
    const merged = await sandbox.env.update({ K2: 'v2' });
    assert.equal(merged.K1, 'v1');
    assert.equal(merged.K2, 'v2');
    await sandbox.env.delete('K1');
    assert.equal(await sandbox.env.get('K1'), undefined);
    assert.equal((await sandbox.commands.run('echo "${K1:-none} $K2"')).stdout, 'none v2\n');
    await sandbox.env.setAll({ ONLY: 'x' });
    assert.deepEqual(await sandbox.env.getAll(), { ONLY: 'x' });
  });

  test('metrics, health, info, cache', async () => {
    const m = await sandbox.getMetricsSnapshot();
    assert.ok((m as any).total_executions >= 1);
    assert.equal((await sandbox.getHealth()).status, 'healthy');
    assert.ok((await sandbox.getAgentInfo()).agent);
    const stats = await sandbox.cache.stats();
    assert.ok(stats.cache);
    const cleared = await sandbox.cache.clear();
    assert.equal(typeof cleared.message, 'string');
  });

  test('background code and commands, process list, kill', async () => {
    const bg = await sandbox.runCodeBackground('import time\ntime.sleep(300)');
    assert.ok(bg.execution_id);
    const cmd = await sandbox.commands.runBackground('sleep 301');
    assert.ok(cmd.process_id);
    const procs = await sandbox.listProcesses();
    assert.ok(procs.some((p) => p.process_id === bg.process_id && p.status === 'running'));
    await sandbox.killProcess(bg.process_id);
    await sandbox.killProcess(cmd.process_id);
    const after = await sandbox.listProcesses();
    for (const id of [bg.process_id, cmd.process_id]) assert.notEqual(after.find((p) => p.process_id === id)!.status, 'running');
  });

  test('runCodeAsync starts the code and the result is POSTed to the callback URL', async () => {
    const receiver = 'import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n    def do_POST(self):\n        open("/tmp/hopx-hook.json", "wb").write(self.rfile.read(int(self.headers["content-length"])))\n        self.send_response(200)\n        self.end_headers()\n    def log_message(self, *a): pass\nhttp.server.HTTPServer(("127.0.0.1", 8766), H).serve_forever()';
    const rx = await sandbox.runCodeBackground(receiver, { timeout: 120 });
    for (let i = 0; (await sandbox.commands.run('exec 3<>/dev/tcp/127.0.0.1/8766')).exit_code !== 0; i++) {
      assert.ok(i < 100, 'the receiver listens');
      await new Promise((r) => setTimeout(r, 100));
    }
    try {
      const started = await sandbox.runCodeAsync('print("async ok")', { callbackUrl: 'http://127.0.0.1:8766/done', callbackHeaders: { 'X-Job': '7' } });
      assert.ok(started.execution_id);
      assert.equal(started.callback_url, 'http://127.0.0.1:8766/done');
      let body = '';
      for (let i = 0; !body; i++) {
        assert.ok(i < 100, 'the callback arrived');
        await new Promise((r) => setTimeout(r, 100));
        body = (await sandbox.files.exists('/tmp/hopx-hook.json')) ? await sandbox.files.read('/tmp/hopx-hook.json') : '';
      }
      const result = JSON.parse(body);
      assert.equal(result.execution_id, started.execution_id);
      assert.equal(result.stdout, 'async ok\n');
    } finally {
      await sandbox.killProcess(rx.process_id);
    }
  });

  test('runCodeStream yields output as it happens and ends', async () => {
    const seen: string[] = [];
    for await (const msg of sandbox.runCodeStream('import time\nfor i in range(3):\n    print(f"step {i}", flush=True)\n    time.sleep(0.2)')) {
      if ((msg as any).type === 'stdout') seen.push((msg as any).data);
    }
    const text = seen.join('');
    assert.match(text, /step 0/);
    assert.match(text, /step 2/);
  });

  test('terminal: connect, input, output until exit', async () => {
    const ws = await sandbox.terminal.connect();
    // Every frame as the socket delivers it, beside the client's iterator: that one arms a listener
    // for one message at a time and loses a message that comes in the same read as the one before
    // (real-client-notes §1.11); the agent sends frames apart, but a client busy long enough reads
    // two at once, and a lost exit would leave the iterator waiting for ever.
    const frames: Array<{ type?: string; data?: string; code?: number }> = [];
    let sawExit: () => void = () => undefined;
    const exitFrame = new Promise<void>((resolve) => (sawExit = resolve));
    ws.on('message', (d: Buffer) => {
      const f = JSON.parse(String(d)) as (typeof frames)[number];
      frames.push(f);
      if (f.type === 'exit') sawExit();
    });
    sandbox.terminal.resize(ws, 100, 30);
    sandbox.terminal.sendInput(ws, 'echo "hello $((1+1)) terminal"; exit\r');
    let out = '';
    let iterated = false;
    const iterate = (async () => {
      for await (const msg of sandbox.terminal.output(ws)) {
        if (msg.type === 'output') out += (msg as any).data;
        if (msg.type === 'exit') break;
      }
      iterated = true;
    })();
    const deadline = new Promise<void>((_, reject) => setTimeout(() => reject(new Error(`no exit frame in 60 s; frames: ${JSON.stringify(frames).slice(-2000)}`)), 60_000).unref());
    await Promise.race([iterate, exitFrame.then(() => Promise.race([iterate, new Promise((r) => setTimeout(r, 5000))])), deadline]);
    ws.close();
    assert.match(frames.filter((f) => f.type === 'output').map((f) => f.data).join(''), /hello 2 terminal/);
    assert.deepEqual(frames.filter((f) => f.type === 'exit').map((f) => f.code), [0]);
    if (iterated) assert.match(out, /hello 2 terminal/, "the client's iterator saw the output");
    else console.log("# the client's iterator lost a frame that came in one read with the one before; the socket had them all");
  });

  test('watchFiles yields a change for a file written while watching', async () => {
    // The SDK cannot tell when the watch is on: keep writing until a change arrives.
    let n = 0;
    const poke = setInterval(() => void sandbox.files.write(`/workspace/watched-by-hopx-${n++}.txt`, 'hi').catch(() => undefined), 200);
    let change: any = null;
    try {
      for await (const msg of sandbox.watchFiles('/workspace')) {
        assert.equal(msg.type, 'change');
        if (msg.path.startsWith('/workspace/watched-by-hopx-')) {
          change = msg;
          break;
        }
      }
    } finally {
      clearInterval(poke);
    }
    // files.write writes a temp file beside the target and renames it over (atomic replace).
    assert.ok(['created', 'modified', 'renamed'].includes(change.event), JSON.stringify(change));
    assert.match(change.timestamp, /Z$/);
  });

  test('pause and resume keep the sandbox; kill deletes it', async () => {
    await sandbox.runCode('open("/tmp/state.txt", "w").write("kept")');
    await sandbox.pause();
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sandbox.sandboxId}`)).body.status, 'paused');
    await sandbox.resume();
    assert.equal((await sandbox.runCode('print(open("/tmp/state.txt").read())')).stdout, 'kept\n');
    await sandbox.kill();
    const gone = await api(server, 'GET', `/v1/sandboxes/${sandbox.sandboxId}`);
    assert.ok(gone.status === 404 || gone.status === 410 || gone.body.status === 'deleted', JSON.stringify(gone.body));
  });
});
