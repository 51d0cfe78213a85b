import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { agent, api, createSandbox, exec, run, startAgentServer, stopServer, waitFor, type CreatedSandbox, type TestServer } from './agent-support.js';

// /execute and /commands/run in real sandboxes, through the gateway.

let server: TestServer;
let sb: CreatedSandbox; // code-interpreter: python + numpy/pandas/matplotlib, node 18, go, bash

before(async () => {
  server = await startAgentServer();
  sb = await createSandbox(server, { template_name: 'code-interpreter', env_vars: { CREATED_WITH: 'create', OVERRIDDEN: 'create' } });
});
after(async () => {
  await stopServer(server);
});

describe('execute: languages and result shape', () => {
  test('python, javascript, bash and go, with every accepted alias', async () => {
    const cases: Array<[string, string, string]> = [
      ['python', 'print(6 * 7)', '42\n'],
      ['python3', 'print("py3")', 'py3\n'],
      ['javascript', 'console.log([1, 2, 3].join("-"))', '1-2-3\n'],
      ['js', 'console.log(typeof require)', 'function\n'],
      ['node', 'console.log("node")', 'node\n'],
      ['nodejs', 'import { sep } from "node:path"; console.log(sep)', '/\n'],
      ['bash', 'echo "$((2 ** 10))"; [[ -n "$BASH_VERSION" ]] && echo bash', '1024\nbash\n'],
      ['sh', 'echo sh', 'sh\n'],
      ['shell', 'echo shell', 'shell\n'],
      ['go', 'package main\nimport "fmt"\nfunc main() { fmt.Println("from go") }\n', 'from go\n'],
    ];
    for (const [language, code, stdout] of cases) {
      const r = await exec(sb, code, { language, timeout: 120 });
      assert.equal(r.stdout, stdout, `${language}: ${JSON.stringify(r)}`);
      assert.equal(r.exit_code, 0);
    }
    const def = await exec(sb, 'import sys; print(sys.version_info[0])');
    assert.equal(def.language, 'python', 'python is the default');
  });

  test('the result carries the documented fields, and every response an X-Request-ID', async () => {
    const r = await agent(sb, 'POST', '/execute', { code: 'print("hi")' }, { 'x-request-id': 'req-abc-123' });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-request-id'), 'req-abc-123');
    for (const k of ['success', 'stdout', 'stderr', 'exit_code', 'execution_time', 'timed_out', 'language', 'timestamp']) assert.ok(k in r.body, k);
    assert.equal(r.body.success, true);
    assert.equal(r.body.timed_out, false);
    assert.equal(typeof r.body.execution_time, 'number');
    assert.match(r.body.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    const e = await agent(sb, 'POST', '/execute', {});
    assert.equal(e.status, 400);
    assert.ok(e.headers.get('x-request-id'));
    assert.equal(e.body.request_id, e.headers.get('x-request-id'));
  });

  test('a failing program is a 200 result with its exit code and a clean traceback', async () => {
    const r = await exec(sb, 'import sys\nprint("partial")\ndef f():\n    raise ValueError("boom")\nf()');
    assert.equal(r.success, false);
    assert.equal(r.exit_code, 1);
    assert.equal(r.stdout, 'partial\n');
    // Python runs in the sandbox's default context: its cells are numbered, like a notebook's.
    assert.match(r.stderr, /Traceback[\s\S]*File "<cell-\d+>", line 5[\s\S]*ValueError: boom/);
    assert.match((await exec(sb, 'raise ValueError("boom")', { isolated: true })).stderr, /File "<string>", line 1/, 'a fresh process is python3 -c');
    assert.doesNotMatch(r.stderr, /sbx_run|\.sb\/agent/, 'no agent frames in the traceback');
    assert.equal((await exec(sb, 'import sys; sys.exit(7)')).exit_code, 7);
    const syntax = await exec(sb, 'def (:');
    assert.equal(syntax.exit_code, 1);
    assert.match(syntax.stderr, /SyntaxError/);
    assert.equal((await exec(sb, 'process.exit(3)', { language: 'javascript' })).exit_code, 3);
    assert.equal((await exec(sb, 'exit 4', { language: 'bash' })).exit_code, 4);
    const go = await exec(sb, 'package main\nfunc main() { undefined_thing() }', { language: 'go', timeout: 120 });
    assert.notEqual(go.exit_code, 0);
    assert.match(go.stderr, /main\.go.*undefined/);
  });

  test('python: the value of a last-line expression comes back as result', async () => {
    assert.equal((await exec(sb, 'x = 20\nx * 2 + 2')).result, '42');
    assert.equal((await exec(sb, 'print("only output")')).result, undefined);
  });

  test('invalid requests are 400 with a message naming the field', async () => {
    const bad: Array<[unknown, string, RegExp]> = [
      [{}, 'VALIDATION_ERROR', /code/],
      [{ code: 1 }, 'VALIDATION_ERROR', /code/],
      [{ code: 'x', language: 'cobol' }, 'INVALID_LANGUAGE', /cobol/],
      [{ code: 'x', timeout: 'soon' }, 'VALIDATION_ERROR', /timeout/],
      [{ code: 'x', timeout: -1 }, 'VALIDATION_ERROR', /timeout/],
      [{ code: 'x', env: 'A=1' }, 'VALIDATION_ERROR', /env/],
      [{ code: 'x', env: { A: 1, B: { c: 1 } } }, 'VALIDATION_ERROR', /env\.B/],
      [{ code: 'x', working_dir: '/no/such/dir' }, 'INVALID_PATH', /no\/such\/dir/],
    ];
    for (const [body, code, message] of bad) {
      const r = await agent(sb, 'POST', '/execute', body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.body.code, code, JSON.stringify(r.body));
      assert.match(r.body.message, message);
      assert.equal(r.body.error, r.body.message);
    }
    const notJson = await agent(sb, 'POST', '/execute', '{"code": ');
    assert.equal(notJson.status, 400);
    const unknown = await agent(sb, 'GET', '/no/such/route');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.code, 'ROUTE_NOT_FOUND');
  });
});

describe('execute: timeouts, floods, concurrency', () => {
  test('a timeout kills a busy loop and reports timed_out', async () => {
    const started = Date.now();
    const r = await exec(sb, 'print("start", flush=True)\nwhile True:\n    pass', { timeout: 2 });
    assert.equal(r.timed_out, true);
    assert.equal(r.success, false);
    assert.equal(r.exit_code, 124);
    assert.equal(r.stdout, 'start\n');
    assert.match(r.stderr, /timed out after 2 seconds/);
    assert.ok(Date.now() - started < 10_000);
    const ps = await run(sb, 'ps', ['-eo', 'pid,args']);
    assert.doesNotMatch(ps.stdout, /while True/);
  });

  test('a timeout also kills a grandchild that left the process group (setsid + double fork), in a fresh process', async () => {
    const code = [
      'import os, time',
      'if os.fork() == 0:',
      '    os.setsid()',
      '    if os.fork() == 0:',
      '        open("/tmp/escapee.pid", "w").write(str(os.getpid()))',
      '        while True: time.sleep(0.1)',
      '    os._exit(0)',
      'while True: time.sleep(0.1)',
    ].join('\n');
    const r = await exec(sb, code, { timeout: 2, isolated: true });
    assert.equal(r.timed_out, true);
    const pid = (await run(sb, 'cat', ['/tmp/escapee.pid'])).stdout.trim();
    assert.match(pid, /^\d+$/);
    const alive = await run(sb, 'sh', ['-c', `kill -0 ${pid} 2>/dev/null && echo alive || echo gone`]);
    assert.equal(alive.stdout, 'gone\n', 'the escaped grandchild was killed too');
  });

  test('a command timeout works the same way and a killed shell pipeline leaves nothing', async () => {
    const t = await agent(sb, 'POST', '/commands/run', { command: 'sleep 300 & sleep 300; echo never', timeout: 1 });
    assert.equal(t.status, 200);
    assert.equal(t.body.timed_out, true);
    assert.doesNotMatch(t.body.stdout, /never/);
    const ps = await run(sb, 'ps', ['-eo', 'args']);
    assert.doesNotMatch(ps.stdout, /sleep 300/);
  });

  test('output floods are capped per stream; the agent stays healthy', async () => {
    const flood = 'import sys\nchunk = "x" * (1 << 20)\nfor _ in range(300):\n    sys.stdout.write(chunk)\nsys.stderr.write("e" * 100)\n';
    const r = await exec(sb, flood, { timeout: 120 });
    assert.equal(r.exit_code, 0);
    assert.equal(r.truncated, true);
    assert.equal(r.stdout.length, 10 * 1024 * 1024, '10 MiB cap');
    assert.equal(r.stderr, 'e'.repeat(100));
    const cmd = await run(sb, 'head', ['-c', String(400 * 1024 * 1024), '/dev/zero'], { timeout: 120 });
    assert.equal(cmd.truncated, true);
    assert.equal(Buffer.byteLength(cmd.stdout), 10 * 1024 * 1024);
    const health = await agent(sb, 'GET', '/health');
    assert.equal(health.status, 200);
    assert.equal((await exec(sb, 'print("still fine")')).stdout, 'still fine\n');
  });

  test('concurrent isolated executions run in parallel and never mix their output', async () => {
    const n = 8;
    const started = Date.now();
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        exec(sb, `import time, sys\nfor k in range(200):\n    print("job${i}", k)\n    sys.stderr.write("err${i}\\n")\n    if k % 50 == 0: time.sleep(0.25)`, { isolated: true }),
      ),
    );
    assert.ok(Date.now() - started < n * 1000 * 0.9, 'they overlapped');
    results.forEach((r, i) => {
      const lines = r.stdout.trim().split('\n');
      assert.equal(lines.length, 200);
      assert.ok(lines.every((l: string) => l.startsWith(`job${i} `)), `job ${i} got only its own stdout`);
      assert.ok(r.stderr.trim().split('\n').every((l: string) => l === `err${i}`));
    });
  });
});

describe('execute: env, working directory, languages runtimes', () => {
  test('precedence: process env < env set (incl. create-time env_vars) < per-request env; no SANDBOXD_* leaks', async () => {
    const set = await agent(sb, 'PATCH', '/env', { env_vars: { OVERRIDDEN: 'set', FROM_SET: 'set', BOTH: 'set' } });
    assert.equal(set.status, 200);
    const show = 'import os\nfor k in ["CREATED_WITH", "OVERRIDDEN", "FROM_SET", "BOTH", "HOME", "SANDBOX_ID"]:\n    print(k, os.environ.get(k))';
    const r = await exec(sb, show, { env: { BOTH: 'request' } });
    assert.equal(
      r.stdout,
      `CREATED_WITH create\nOVERRIDDEN set\nFROM_SET set\nBOTH request\nHOME /root\nSANDBOX_ID ${sb.id}\n`,
    );
    const cmd = await run(sb, 'sh', ['-c', 'echo "$BOTH $FROM_SET"; env | grep -c "^SANDBOXD_" || true'], { env: { BOTH: 'cmd' } });
    assert.equal(cmd.stdout, 'cmd set\n0\n');
    assert.equal((await exec(sb, 'echo "$BOTH"', { language: 'bash' })).stdout, 'set\n', 'request env applied once only');
  });

  test('working_dir, workdir and relative directories; /workspace is the default', async () => {
    assert.equal((await exec(sb, 'import os; print(os.getcwd())')).stdout, '/workspace\n');
    assert.equal((await exec(sb, 'import os; print(os.getcwd())', { working_dir: '/tmp' })).stdout, '/tmp\n');
    assert.equal((await exec(sb, 'pwd', { language: 'bash', workdir: '/etc' })).stdout, '/etc\n');
    await run(sb, 'mkdir', ['-p', '/workspace/sub dir']);
    assert.equal((await run(sb, 'pwd', undefined, { working_dir: 'sub dir' })).stdout, '/workspace/sub dir\n');
    const missing = await agent(sb, 'POST', '/commands/run', { command: 'pwd', workdir: '/nope' });
    assert.equal(missing.status, 400);
    assert.equal(missing.body.code, 'INVALID_PATH');
  });

  test('go compiles through a cache: the same source is not compiled again', async () => {
    const src = `package main\nimport "fmt"\nfunc main() { fmt.Println("cached ${Date.now()}") }\n`;
    const before = (await agent(sb, 'GET', '/cache/stats')).body;
    const first = await exec(sb, src, { language: 'go', timeout: 120 });
    const mid = (await agent(sb, 'GET', '/cache/stats')).body;
    const second = await exec(sb, src, { language: 'go', timeout: 120 });
    const end = (await agent(sb, 'GET', '/cache/stats')).body;
    assert.equal(first.stdout, second.stdout);
    assert.equal(mid.programs.misses, before.programs.misses + 1, 'first run compiled');
    assert.equal(end.programs.hits, mid.programs.hits + 1, 'second run came from the cache');
    assert.equal(end.programs.misses, mid.programs.misses);
    assert.ok(second.execution_time < first.execution_time, `${second.execution_time} < ${first.execution_time}`);
    const snippet = await exec(sb, 'import "fmt"\nfunc main() { fmt.Println("no package clause") }', { language: 'go', timeout: 120 });
    assert.equal(snippet.stdout, 'no package clause\n');
  });

  test('javascript uses the image node when there is one, else the agent runtime (base image)', async () => {
    assert.match((await exec(sb, 'console.log(process.version)', { language: 'js' })).stdout, /^v18\./);
    const base = await createSandbox(server, { template_name: 'base' });
    try {
      assert.equal((await run(base, 'sh', ['-c', 'command -v node || echo none'])).stdout, 'none\n');
      const r = await exec(base, 'console.log(process.version, 6 * 7)', { language: 'javascript' });
      assert.match(r.stdout, /^v\d+\.\d+\.\d+ 42\n$/, JSON.stringify(r));
      const py = await exec(base, 'print(1)');
      assert.equal(py.exit_code, 127, 'no python in the base image: a normal result, not an error');
      assert.match(py.stderr, /python3: command not found/);
    } finally {
      await api(server, 'DELETE', `/v1/sandboxes/${base.id}`);
    }
  });

  test('opt-in result cache: the second identical request is served from it', async () => {
    const code = `import random; print(random.random())  # ${Date.now()}`;
    const a = await exec(sb, code, { cache: true });
    const b = await exec(sb, code, { cache: true });
    const c = await exec(sb, code);
    assert.equal(b.cached, true);
    assert.equal(a.stdout, b.stdout);
    assert.notEqual(c.stdout, a.stdout, 'without cache: true the code runs again');
    const stats = (await agent(sb, 'GET', '/cache/stats')).body;
    assert.ok(stats.cache.size >= 1 && stats.cache.hits >= 1);
    for (const k of ['size', 'hits', 'misses', 'max_size', 'total_hits']) assert.equal(typeof stats.cache[k], 'number', k);
    const cleared = await agent(sb, 'POST', '/cache/clear', undefined, { 'content-type': 'application/json' });
    assert.equal(cleared.status, 200);
    assert.ok(cleared.body.entries_removed >= 1);
    assert.equal(typeof cleared.body.message, 'string');
    assert.equal((await agent(sb, 'GET', '/cache/stats')).body.cache.size, 0);
    assert.notEqual((await exec(sb, code, { cache: true })).cached, true);
  });
});

// `isolated`: a fresh process per run, as before contexts (the default context keeps state).
describe('execute: warm python (forked from a resident interpreter), isolated runs', () => {
  test('runs are forked from the warm interpreter and behave like a fresh python3 -c', async () => {
    await exec(sb, 'pass', { isolated: true }); // starts the warm interpreter if needed
    const parent = await waitFor('a warm run', async () => {
      const r = await exec(sb, 'import os\nprint(open(f"/proc/{os.getppid()}/cmdline").read().replace("\\0", " "))', { isolated: true });
      return /sbx_zygote/.test(r.stdout) ? r : undefined;
    });
    assert.match(parent.stdout, /sbx_zygote\.py/);
    const shape = await exec(sb, 'import sys, os\nprint(__name__, sys.argv, sys.path[0] == "", os.getcwd())', { isolated: true, working_dir: '/tmp' });
    assert.equal(shape.stdout, "__main__ ['-c'] True /tmp\n");
  });

  test('each run gets exactly its own env; start-up env (PYTHONPATH) is honoured', async () => {
    assert.equal((await exec(sb, 'import os; print(os.environ.get("ONLY_FIRST"))', { isolated: true, env: { ONLY_FIRST: '1' } })).stdout, '1\n');
    assert.equal((await exec(sb, 'import os; print(os.environ.get("ONLY_FIRST"))', { isolated: true })).stdout, 'None\n', 'nothing leaks into the next run');
    await run(sb, 'sh', ['-c', 'mkdir -p /tmp/pp && echo "VALUE = 42" > /tmp/pp/ppmod.py']);
    assert.equal((await exec(sb, 'import ppmod; print(ppmod.VALUE)', { isolated: true, env: { PYTHONPATH: '/tmp/pp' } })).stdout, '42\n');
    assert.equal((await exec(sb, 'import os; print(os.environ["HOME"])', { isolated: true, env: { HOME: '/tmp' } })).stdout, '/tmp\n');
  });

  test('exit behaves: files left open are flushed, atexit runs, threads are joined, exit codes and signals', async () => {
    const r = await exec(sb, 'import atexit, threading, time\nf = open("/tmp/unflushed.txt", "w")\nf.write("kept")\natexit.register(lambda: print("atexit"))\nthreading.Thread(target=lambda: (time.sleep(0.3), print("thread"))).start()', { isolated: true });
    assert.equal(r.stdout, 'thread\natexit\n');
    assert.equal((await run(sb, 'cat', ['/tmp/unflushed.txt'])).stdout, 'kept');
    assert.equal((await exec(sb, 'import os; os._exit(5)', { isolated: true })).exit_code, 5);
    assert.equal((await exec(sb, 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)', { isolated: true })).exit_code, 137);
    const exit = await exec(sb, 'import sys; sys.exit("bye")', { isolated: true });
    assert.equal(exit.exit_code, 1);
    assert.equal(exit.stderr, 'bye\n');
    assert.equal((await exec(sb, 'import random; print(random.random())', { isolated: true })).stdout === (await exec(sb, 'import random; print(random.random())', { isolated: true })).stdout, false, 'fresh randomness per run');
  });
});

describe('execute: rich outputs', () => {
  test('matplotlib figures (plt.show and still open at exit) come back without any configuration', async () => {
    const code = [
      'import matplotlib.pyplot as plt',
      'plt.plot([1, 2, 3], [1, 4, 9])',
      'plt.title("shown")',
      'plt.show()',
      'plt.figure()',
      'plt.bar(["a", "b"], [3, 5])',
      'print("drawn")',
    ].join('\n');
    const rich = (await agent(sb, 'POST', '/execute/rich', { code, timeout: 120 })).body;
    assert.equal(rich.stdout, 'drawn\n', rich.stderr);
    assert.equal(rich.rich_outputs.length, 2);
    for (const o of rich.rich_outputs) {
      assert.equal(o.type, 'image');
      assert.equal(o.mime, 'image/png');
      const dl = await fetch(new URL(`/files/download?path=${encodeURIComponent(o.path)}`, sb.publicHost), { headers: { authorization: `Bearer ${sb.authToken}` } });
      assert.equal(dl.status, 200);
      assert.equal(dl.headers.get('content-type'), 'image/png');
      const bytes = Buffer.from(await dl.arrayBuffer());
      assert.equal(bytes.subarray(1, 4).toString(), 'PNG');
      assert.equal(Number(dl.headers.get('content-length')), bytes.length);
    }
    assert.equal(Buffer.from(rich.png, 'base64').subarray(1, 4).toString(), 'PNG');
    const plain = await exec(sb, code, { timeout: 120 });
    assert.equal(Buffer.from(plain.png, 'base64').subarray(1, 4).toString(), 'PNG', '/execute has the top-level png too');
    assert.equal(plain.rich_outputs, undefined);
  });

  test('a pandas DataFrame left as the last expression comes back as HTML', async () => {
    const r = (await agent(sb, 'POST', '/execute/rich', { code: 'import pandas as pd\npd.DataFrame({"city": ["Oslo", "Lima"], "n": [1, 2]})', timeout: 120 })).body;
    assert.match(r.html, /<table[\s\S]*Oslo[\s\S]*Lima/);
    assert.ok(r.rich_outputs.some((o: any) => o.type === 'html' && o.mime === 'text/html'));
    assert.match(r.result, /city/);
  });
});

describe('commands', () => {
  test('with and without args, shell features, non-zero exit is a normal result', async () => {
    const plain = await run(sb, 'echo hello');
    assert.equal(plain.stdout, 'hello\n');
    assert.equal(plain.exit_code, 0);
    assert.equal(plain.success, true);
    assert.equal((await run(sb, 'echo $HOME | tr a-z A-Z')).stdout, '/ROOT\n');
    assert.equal((await run(sb, 'printf', ['%s|', 'a b', '$HOME'])).stdout, 'a b|$HOME|', 'args are not shell-expanded');
    assert.equal((await run(sb, 'bash', ['-c', 'echo from bash; exit 5'])).exit_code, 5);
    const fail = await run(sb, 'ls /definitely-missing');
    assert.equal(fail.success, false);
    assert.notEqual(fail.exit_code, 0);
    assert.match(fail.stderr, /definitely-missing/);
    const notFound = await run(sb, 'no-such-program-xyz');
    assert.equal(notFound.exit_code, 127);
    assert.equal((await run(sb, 'cd /etc && pwd')).stdout, '/etc\n');
    for (const k of ['success', 'stdout', 'stderr', 'exit_code', 'execution_time', 'timed_out', 'command', 'timestamp']) assert.ok(k in plain, k);
    const bad = await agent(sb, 'POST', '/commands/run', { args: ['x'] });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, 'VALIDATION_ERROR');
    const huge = await agent(sb, 'POST', '/commands/run', { command: 'echo', args: ['x'.repeat(200_000)] });
    assert.equal(huge.status, 400, 'one argument past the kernel limit is the request, not the server');
    assert.match(huge.body.message, /E2BIG/);
  });

  test('stdin: text or base64 bytes for commands and code (warm python too); absent, programs read EOF', async () => {
    assert.equal((await run(sb, 'tr a-z A-Z', undefined, { stdin: 'héllo\nworld\n' })).stdout, 'HéLLO\nWORLD\n');
    const bytes = Buffer.from([0, 1, 2, 255, 10]);
    const hex = await run(sb, 'od', ['-An', '-tx1'], { stdin: bytes.toString('base64'), stdin_encoding: 'base64' });
    assert.equal(hex.stdout.trim(), '00 01 02 ff 0a');
    assert.equal((await run(sb, 'cat')).stdout, '', 'no stdin: EOF at once, no hang');
    const big = 'x'.repeat(3 * 1024 * 1024);
    assert.equal((await run(sb, 'wc', ['-c'], { stdin: big })).stdout.trim(), String(big.length), 'more than a pipe buffer');
    assert.equal((await run(sb, 'head', ['-c', '1'], { stdin: big })).stdout, 'x', 'a program that stops reading early is fine');
    const py = await exec(sb, 'import sys\ndata = sys.stdin.read()\nprint(len(data), data.split()[-1])', { stdin: 'a b c\n' });
    assert.equal(py.stdout, '6 c\n');
    assert.equal((await exec(sb, 'read x; echo "got $x"', { language: 'bash', stdin: 'line\n' })).stdout, 'got line\n');
    assert.equal((await exec(sb, 'process.stdin.on("data", (d) => process.stdout.write(String(d).toUpperCase()))', { language: 'javascript', stdin: 'js\n' })).stdout, 'JS\n');
    for (const body of [
      { command: 'cat', stdin: 5 },
      { command: 'cat', stdin: 'x', stdin_encoding: 'hex' },
      { command: 'cat', stdin: '!!!', stdin_encoding: 'base64' },
    ]) {
      const r = await agent(sb, 'POST', '/commands/run', body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.body.code, 'VALIDATION_ERROR');
    }
  });
});
