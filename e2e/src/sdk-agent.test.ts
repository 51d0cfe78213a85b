import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { AbortError, NotFoundError, Sandbox, TimeoutError, ValidationError } from '@sandboxd/sdk';
import { startServer, type TestServer } from './harness.js';
import { clientFor, SandboxPool } from './sdk-support.js';

let server: TestServer;
let pool: SandboxPool;
let sb: Sandbox;
let tmp: string;

before(async () => {
  server = await startServer();
  pool = new SandboxPool(clientFor(server));
  sb = await pool.create({ template: 'code-interpreter' });
  tmp = await mkdtemp(join(tmpdir(), 'sdk-e2e-'));
});
after(async () => {
  await pool?.cleanup();
  await server?.stop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const c of createReadStream(path)) h.update(c as Buffer);
  return h.digest('hex');
}

describe('SDK: runCode', () => {
  test('runs python (default), javascript, bash and go', async () => {
    const py = await sb.runCode('print(6 * 7)');
    assert.equal(py.stdout, '42\n');
    assert.equal(py.exitCode, 0);
    assert.equal(py.success, true);
    assert.equal(py.timedOut, false);
    assert.ok(py.executionTime > 0);
    assert.equal((await sb.runCode('console.log([1,2,3].join("-"))', { language: 'javascript' })).stdout, '1-2-3\n');
    assert.equal((await sb.runCode('echo "$((2 ** 10))"', { language: 'bash' })).stdout, '1024\n');
    const go = await sb.runCode('package main\nimport "fmt"\nfunc main() { fmt.Println("from go") }\n', { language: 'go', timeout: 120 });
    assert.equal(go.stdout, 'from go\n', go.stderr);
  });

  test('a failing program is a result with its exit code and stderr, not an exception', async () => {
    const r = await sb.runCode('import sys\nprint("partial")\nsys.stderr.write("bad thing\\n")\nsys.exit(3)');
    assert.equal(r.exitCode, 3);
    assert.equal(r.success, false);
    assert.equal(r.stdout, 'partial\n');
    assert.match(r.stderr, /bad thing/);
    const exc = await sb.runCode('raise ValueError("boom")');
    assert.notEqual(exc.exitCode, 0);
    assert.match(exc.stderr, /ValueError: boom/);
  });

  test('the service-side timeout ends the code and reports timedOut', async () => {
    const started = Date.now();
    const r = await sb.runCode('import time\nprint("start", flush=True)\ntime.sleep(30)', { timeout: 1 });
    assert.equal(r.timedOut, true);
    assert.equal(r.success, false);
    assert.ok(Date.now() - started < 15_000);
  });

  test('env and workingDir apply to one execution', async () => {
    const r = await sb.runCode('import os; print(os.environ["ONLY_HERE"], os.getcwd())', { env: { ONLY_HERE: 'yes' }, workingDir: '/tmp' });
    assert.equal(r.stdout, 'yes /tmp\n');
    assert.equal((await sb.runCode('import os; print(os.environ.get("ONLY_HERE"), os.getcwd())')).stdout, 'None /workspace\n');
  });

  test('an unknown language is ValidationError', async () => {
    await assert.rejects(sb.runCode('x', { language: 'cobol' }), (e: unknown) => e instanceof ValidationError && e.status === 400);
    await assert.rejects(sb.runCode('x', { language: 'cobol', onStdout: () => {} }), ValidationError, 'also over the stream');
  });

  test('rich output: a matplotlib figure comes back as a file to download', async () => {
    const r = await sb.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()', { rich: true, timeout: 120 });
    assert.equal(r.exitCode, 0, r.stderr);
    const img = r.richOutputs?.find((o) => o.type === 'image');
    assert.ok(img, JSON.stringify(r.richOutputs));
    const png = await sb.files.download(img.path);
    assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  });

  test('with callbacks, output streams while the code runs', async () => {
    const started = Date.now();
    const chunks: Array<{ at: number; data: string; stream: string }> = [];
    const r = await sb.runCode('import sys, time\nprint("first", flush=True)\ntime.sleep(1.5)\nprint("err line", file=sys.stderr, flush=True)\nprint("second", flush=True)\nsys.exit(2)', {
      onStdout: (data) => chunks.push({ at: Date.now() - started, data, stream: 'out' }),
      onStderr: (data) => chunks.push({ at: Date.now() - started, data, stream: 'err' }),
    });
    const finished = Date.now() - started;
    assert.equal(r.exitCode, 2);
    assert.equal(r.stdout, 'first\nsecond\n');
    assert.equal(r.stderr, 'err line\n');
    const first = chunks.find((c) => c.data.includes('first'));
    assert.ok(first, JSON.stringify(chunks));
    assert.ok(finished - first.at >= 1000, `first chunk at ${first.at} ms, finished at ${finished} ms: not streamed`);
    assert.ok(chunks.some((c) => c.stream === 'err' && c.data.includes('err line')));
  });

  test('state lives between runCode calls; code contexts: create, run in, list, restart, delete; kernels listed', async () => {
    await sb.runCode('sdk_state = 20');
    const r = await sb.runCode('sdk_state * 2 + 2');
    assert.equal(r.result, '42');
    assert.match(r.contextId ?? '', /^ctx_/);
    const c = await sb.createCodeContext({ env: { IN_CTX: 'yes' } });
    assert.equal(c.language, 'python');
    const inCtx = await sb.runCode('import os\nprint("sdk_state" in dir(), os.environ["IN_CTX"])', { context: c });
    assert.equal(inCtx.stdout, 'False yes\n');
    assert.equal(inCtx.contextId, c.id);
    const streamed = await sb.runCode('v = 5\nprint(v)\nv + 1', { context: c.id, onStdout: () => {} });
    assert.deepEqual([streamed.stdout, streamed.result, streamed.contextId], ['5\n', '6', c.id]);
    assert.ok((await sb.listCodeContexts()).some((x) => x.id === c.id && x.state === 'idle'));
    assert.ok((await sb.kernels()).some((k) => k.contextId === c.id && k.alive && k.executionState === 'idle'));
    await sb.restartCodeContext(c);
    assert.match((await sb.runCode('print(v)', { context: c })).stderr, /NameError/);
    await sb.deleteCodeContext(c);
    await assert.rejects(sb.runCode('1', { context: c }), NotFoundError);
    assert.equal((await sb.runCode('print("sdk_state" in dir())', { isolated: true })).stdout, 'False\n');
  });

  test('abort and client deadlines end a call promptly with AbortError / TimeoutError', async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    let t = Date.now();
    await assert.rejects(sb.runCode('import time; time.sleep(30)', { signal: ac.signal }), AbortError);
    assert.ok(Date.now() - t < 5000);
    t = Date.now();
    await assert.rejects(sb.runCode('import time; time.sleep(30)', { signal: AbortSignal.timeout(300), onStdout: () => {} }), TimeoutError);
    assert.ok(Date.now() - t < 5000);
    await assert.rejects(sb.commands.run('sleep 30', { requestTimeoutMs: 300 }), TimeoutError);
    // The sandbox is still usable afterwards, and the abandoned code does not hold its context.
    assert.equal((await sb.commands.run('echo ok')).stdout, 'ok\n');
    t = Date.now();
    assert.equal((await sb.runCode('print("next")')).stdout, 'next\n');
    assert.ok(Date.now() - t < 5000, 'the abandoned cell was interrupted');
  });
});

describe('SDK: commands and processes', () => {
  test('run a shell line, an exact argument list, with env and working dir', async () => {
    assert.equal((await sb.commands.run('echo one two | wc -w')).stdout.trim(), '2');
    const exact = await sb.commands.run('printf', { args: ['%s|', 'a b', '$HOME', '*'] });
    assert.equal(exact.stdout, 'a b|$HOME|*|');
    const r = await sb.commands.run('echo "$X" && pwd && exit 5', { env: { X: 'ex' }, workingDir: '/tmp' });
    assert.equal(r.stdout, 'ex\n/tmp\n');
    assert.equal(r.exitCode, 5);
  });

  test('streamed command output arrives in order with the exit code', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const r = await sb.commands.run('for i in 1 2 3; do echo "n$i"; sleep 0.1; done; echo warn >&2; exit 9', {
      onStdout: (d) => out.push(d),
      onStderr: (d) => err.push(d),
    });
    assert.equal(out.join(''), 'n1\nn2\nn3\n');
    assert.equal(err.join(''), 'warn\n');
    assert.equal(r.exitCode, 9);
    const withArgs = await sb.commands.run('echo', { args: ["it's", '$x'], onStdout: () => {} });
    assert.equal(withArgs.stdout, "it's $x\n");
  });

  test('stdin for commands and code, plain and streamed, text and bytes', async () => {
    assert.equal((await sb.commands.run('tr a-z A-Z', { stdin: 'abc\n' })).stdout, 'ABC\n');
    assert.equal((await sb.commands.run('od -An -tx1', { stdin: new Uint8Array([0, 255]) })).stdout.trim(), '00 ff');
    const chunks: string[] = [];
    const streamed = await sb.commands.run('cat; echo done', { stdin: 'in\n', onStdout: (d) => chunks.push(d) });
    assert.equal(streamed.stdout, 'in\ndone\n');
    assert.equal(chunks.join(''), 'in\ndone\n');
    const code = await sb.runCode('import sys\nprint(sys.stdin.read()[::-1])', { stdin: 'olleh', onStdout: () => undefined });
    assert.equal(code.stdout, 'hello\n');
  });

  test('background commands and code are listed, awaited and killed', async () => {
    const quick = await sb.commands.background('echo bg-out; exit 4');
    assert.match(quick.processId, /\S/);
    const done = await sb.processes.wait(quick.processId, { requestTimeoutMs: 30_000 });
    assert.equal(done.exitCode, 4);
    assert.notEqual(done.status, 'running');
    assert.match(done.stdout ?? '', /bg-out/);

    const code = await sb.runCodeBackground('import time; time.sleep(0.5); print("py-bg")');
    const codeDone = await sb.processes.wait(code.processId, { requestTimeoutMs: 30_000 });
    assert.equal(codeDone.status, 'completed');
    assert.equal(codeDone.exitCode, 0);

    const slow = await sb.commands.background('sleep 600', { name: 'sleeper' });
    const listed = await sb.processes.list();
    const entry = listed.find((p) => p.processId === slow.processId);
    assert.equal(entry?.status, 'running');
    await sb.processes.kill(slow.processId);
    const killed = await sb.processes.wait(slow.processId, { requestTimeoutMs: 10_000 });
    assert.equal(killed.status, 'killed');
    await assert.rejects(sb.processes.kill('p_nope'), (e: unknown) => e instanceof NotFoundError && e.code === 'PROCESS_NOT_FOUND');
    await assert.rejects(sb.processes.get('p_nope'), NotFoundError);
  });

  test('runCodeAsync: the result goes to the callback URL, and the delivery shows on the process', async () => {
    const rx = await sb.runCodeBackground(
      'import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n    def do_POST(self):\n        open("/tmp/sdk-hook.json", "wb").write(self.rfile.read(int(self.headers["content-length"])))\n        self.send_response(200)\n        self.end_headers()\n    def log_message(self, *a): pass\nhttp.server.HTTPServer(("127.0.0.1", 8767), H).serve_forever()',
      { timeout: 120 },
    );
    try {
      for (let i = 0; (await sb.commands.run(`bash -c 'exec 3<>/dev/tcp/127.0.0.1/8767'`)).exitCode !== 0; i++) {
        assert.ok(i < 100, 'the receiver listens');
        await new Promise((r) => setTimeout(r, 100));
      }
      const job = await sb.runCodeAsync('print(2 ** 10)', { callbackUrl: 'http://127.0.0.1:8767/', signatureSecret: 'k' });
      let info = await sb.processes.get(job.processId);
      for (let i = 0; info.callback?.status !== 'delivered'; i++) {
        assert.ok(i < 100 && info.callback?.status !== 'failed', JSON.stringify(info.callback));
        await new Promise((r) => setTimeout(r, 100));
        info = await sb.processes.get(job.processId);
      }
      assert.equal(info.callback.attempts, 1);
      assert.equal(JSON.parse(await sb.files.read('/tmp/sdk-hook.json')).stdout, '1024\n');
      await assert.rejects(sb.runCodeAsync('1', { callbackUrl: 'nope' }), ValidationError);
    } finally {
      await sb.processes.kill(rx.processId);
    }
  });
});

describe('SDK: files', () => {
  test('write, read, list, exists, mkdir, remove', async () => {
    const w = await sb.files.write('/workspace/f/deep/er/a.txt', 'alpha\n', { mode: '0600' });
    assert.equal(w.size, 6);
    assert.equal(await sb.files.read('/workspace/f/deep/er/a.txt'), 'alpha\n');
    await sb.files.write('/workspace/f/b.bin', new Uint8Array([0, 255, 10, 13]));
    assert.deepEqual([...(await sb.files.download('/workspace/f/b.bin'))], [0, 255, 10, 13]);
    const list = await sb.files.list('/workspace/f');
    const names = list.map((e) => e.name).sort();
    assert.deepEqual(names, ['b.bin', 'deep']);
    assert.equal(list.find((e) => e.name === 'deep')?.isDir, true);
    assert.equal(list.find((e) => e.name === 'b.bin')?.size, 4);
    assert.equal(await sb.files.exists('/workspace/f/b.bin'), true);
    assert.equal(await sb.files.exists('/workspace/f/nope'), false);
    assert.deepEqual(
      [await sb.files.isDirectory('/workspace/f'), await sb.files.isDirectory('/workspace/f/b.bin'), await sb.files.isDirectory('/workspace/f/nope')],
      [true, false, false],
    );
    await sb.files.mkdir('/workspace/m/n/o');
    assert.equal(await sb.files.exists('/workspace/m/n/o'), true);
    await sb.files.remove('/workspace/f');
    assert.equal(await sb.files.exists('/workspace/f/deep/er/a.txt'), false);
  });

  test('watch: resolves once watching, yields changes in order, ends on break; a missing directory is NotFoundError', async () => {
    await sb.files.mkdir('/workspace/sdk-watch');
    const watcher = await sb.files.watch('sdk-watch');
    assert.equal(watcher.path, '/workspace/sdk-watch');
    await sb.commands.run('cd /workspace/sdk-watch && mkdir d && echo 1 > d/a && mv d/a d/b && rm d/b');
    const seen: string[] = [];
    for await (const c of watcher) {
      seen.push(`${c.event} ${c.path}${c.oldPath ? ` <- ${c.oldPath}` : ''}`);
      if (c.event === 'deleted') break;
    }
    assert.deepEqual(
      seen.filter((x) => !x.startsWith('modified')),
      ['created /workspace/sdk-watch/d', 'created /workspace/sdk-watch/d/a', 'renamed /workspace/sdk-watch/d/b <- /workspace/sdk-watch/d/a', 'deleted /workspace/sdk-watch/d/b'],
    );
    assert.equal(watcher.closed || (await new Promise((r) => setTimeout(r, 200)), watcher.closed), true, 'break closed the watch');
    await assert.rejects(sb.files.watch('/workspace/no-such-dir'), (err: unknown) => err instanceof NotFoundError && (err as NotFoundError).code === 'FILE_NOT_FOUND');
  });

  test('uploadDirectory / downloadDirectory: a tree both ways, merged into what exists; errors typed', async () => {
    const src = join(tmp, 'tree');
    await mkdir(join(src, 'a/b'), { recursive: true });
    await writeFile(join(src, 'a/b/exact512.bin'), randomBytes(512));
    await writeFile(join(src, 'empty.txt'), '');
    await writeFile(join(src, 'a/note.md'), '# note\n');
    const up = await sb.files.uploadDirectory(src, '/workspace/tree');
    assert.equal(up.path, '/workspace/tree');
    await sb.files.write('/workspace/tree/only-remote.txt', 'r');
    const names = (await sb.commands.run('cd /workspace/tree && find . -type f | sort')).stdout;
    assert.equal(names, './a/b/exact512.bin\n./a/note.md\n./empty.txt\n./only-remote.txt\n');
    const back = join(tmp, 'tree-back');
    const down = await sb.files.downloadDirectory('/workspace/tree', back);
    assert.equal(down.files, 4);
    assert.deepEqual(await readFile(join(back, 'a/b/exact512.bin')), await readFile(join(src, 'a/b/exact512.bin')));
    assert.equal(await readFile(join(back, 'only-remote.txt'), 'utf8'), 'r');
    await assert.rejects(sb.files.downloadDirectory('/workspace/no-such', join(tmp, 'x')), (e: unknown) => e instanceof NotFoundError && e.code === 'FILE_NOT_FOUND');
    await assert.rejects(sb.files.downloadDirectory('/workspace/tree/empty.txt', join(tmp, 'x')), (e: unknown) => e instanceof ValidationError && e.code === 'NOT_A_DIRECTORY');
    await assert.rejects(sb.files.uploadDirectory(join(src, 'empty.txt'), '/workspace/x'), ValidationError);
  });

  test('a missing file is NotFoundError FILE_NOT_FOUND naming the path', async () => {
    await assert.rejects(sb.files.read('/workspace/missing.txt'), (e: unknown) => {
      assert.ok(e instanceof NotFoundError);
      assert.equal(e.code, 'FILE_NOT_FOUND');
      assert.equal(e.path, '/workspace/missing.txt');
      return true;
    });
    await assert.rejects(sb.files.download('/workspace/missing.bin'), NotFoundError);
    await assert.rejects(sb.files.downloadFile('/workspace/missing.bin', join(tmp, 'never')), NotFoundError);
    await assert.rejects(stat(join(tmp, 'never')), /ENOENT/, 'no partial file is left behind');
  });

  test('upload from bytes, strings and streams; download as a stream', async () => {
    await sb.files.upload('/workspace/u/str.txt', 'from a string\n');
    assert.equal(await sb.files.read('/workspace/u/str.txt'), 'from a string\n');
    await sb.files.upload('/workspace/u/stream.txt', Readable.from(['part1 ', 'part2 ', 'part3\n']));
    assert.equal(await sb.files.read('/workspace/u/stream.txt'), 'part1 part2 part3\n');
    const stream = await sb.files.downloadStream('/workspace/u/stream.txt');
    let text = '';
    for await (const c of stream) text += (c as Buffer).toString();
    assert.equal(text, 'part1 part2 part3\n');
  });

  test('a 100 MB file goes up and down streamed, byte for byte, with progress', async () => {
    const local = join(tmp, 'big.bin');
    const block = randomBytes(1024 * 1024);
    await writeFile(local, Buffer.concat(Array.from({ length: 100 }, (_, i) => (i % 7 === 0 ? randomBytes(1024 * 1024) : block))));
    const want = await sha256File(local);
    let upProgress = 0;
    const up = await sb.files.uploadFile(local, '/workspace/big.bin', { onProgress: (n) => (upProgress = n) });
    assert.equal(up.size, 100 * 1024 * 1024);
    assert.equal(upProgress, 100 * 1024 * 1024);
    const inside = await sb.commands.run('sha256sum /workspace/big.bin');
    assert.equal(inside.stdout.split(' ')[0], want);
    let downProgress = 0;
    const back = join(tmp, 'big.back');
    const down = await sb.files.downloadFile('/workspace/big.bin', back, { onProgress: (n) => (downProgress = n) });
    assert.equal(down.size, 100 * 1024 * 1024);
    assert.equal(downProgress, down.size);
    assert.equal(await sha256File(back), want);
  });
});

describe('SDK: env, metrics, health, cache', () => {
  test('env vars apply to later runs below per-call env; changes return the whole set', async () => {
    const fresh = await pool.create({ template: 'base' });
    const afterSet = await fresh.env.set('A', '1');
    assert.equal(afterSet.A, '1');
    assert.deepEqual(afterSet, await fresh.env.getAll());
    const after = await fresh.env.update({ B: '2', C: 'three' });
    assert.equal(after.A, '1');
    assert.equal(after.C, 'three');
    assert.equal(await fresh.env.get('B'), '2');
    const del = await fresh.env.delete('B');
    assert.equal(del.B, undefined);
    assert.equal((await fresh.commands.run('echo "$A $C ${B:-none}"')).stdout, '1 three none\n');
    assert.equal((await fresh.commands.run('echo "$A"', { env: { A: 'override' } })).stdout, 'override\n');
    assert.equal((await fresh.runCode('echo "$C"', { language: 'bash' })).stdout, 'three\n');
    const replaced = await fresh.env.replace({ ONLY: 'me' });
    assert.equal(replaced.ONLY, 'me');
    assert.equal(replaced.A, undefined);
  });

  test('metrics, health, agent info and cache', async () => {
    await sb.runCode('print(1)');
    const m = await sb.metrics();
    assert.ok(m.totalRequests > 0);
    assert.ok(m.uptimeSeconds >= 0);
    assert.ok(Object.keys(m.requestsTotal).some((p) => p.startsWith('/execute')), JSON.stringify(m.requestsTotal));
    const res = await sb.resources();
    assert.equal(res.sandboxId, sb.id);
    assert.ok(res.memory.usedBytes > 0 && res.memory.limitBytes >= res.memory.usedBytes, JSON.stringify(res));
    assert.ok(res.cpu.usageSeconds > 0 && res.disk.totalBytes > 0 && res.pids >= 2, JSON.stringify(res));
    const h = await sb.health();
    assert.equal(h.status, 'healthy');
    assert.ok(h.features.includes('code_execution'));
    const info = await sb.agentInfo();
    assert.equal(info.sandboxId, sb.id);
    const stats = await sb.cache.stats();
    assert.equal(typeof stats.size, 'number');
    assert.equal(typeof (await sb.cache.clear()), 'number');
  });
});

describe('SDK: terminal', () => {
  test('an interactive shell: input, output, resize and exit status', async () => {
    const term = await sb.terminal({ cols: 90, rows: 20 });
    try {
      term.write('stty size; echo "term-$((20 + 22))"\r');
      const text = await term.waitFor('term-42', 15_000);
      assert.match(text, /20 90/);
      term.resize(132, 43);
      term.write('stty size\r');
      await term.waitFor('43 132', 15_000);
      term.write('exit 6\r');
      assert.equal(await term.exited, 6);
    } finally {
      term.close();
    }
  });
});
