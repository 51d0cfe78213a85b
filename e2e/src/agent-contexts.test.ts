import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { agent, api, createSandbox, exec, run, startAgentServer, stopServer, type CreatedSandbox, type TestServer } from './agent-support.js';

// Code contexts: Python executions run in a persistent kernel per context, in real sandboxes,
// through the gateway.

let server: TestServer;
let sb: CreatedSandbox; // code-interpreter: python + numpy/pandas/matplotlib

before(async () => {
  server = await startAgentServer();
  sb = await createSandbox(server, { template_name: 'code-interpreter' });
});
after(async () => {
  await stopServer(server);
});

async function newContext(body: Record<string, unknown> = {}): Promise<any> {
  const r = await agent(sb, 'POST', '/contexts', { language: 'python', ...body });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

describe('python keeps its state between executions', () => {
  test('nothing runs before the first execution; then variables, imports, functions and the working directory live on', async () => {
    const fresh = await agent(sb, 'GET', '/jupyter/sessions');
    assert.deepEqual(fresh.body, { sessions: [] }, 'an idle sandbox has no kernel');
    const health = await agent(sb, 'GET', '/health');
    assert.ok(health.body.features.includes('contexts'));

    const a = await exec(sb, 'x = 41\nimport json\ndef twice(v):\n    return 2 * v', { workdir: '/workspace' });
    assert.equal(a.exit_code, 0, JSON.stringify(a));
    assert.match(a.context_id, /^ctx_/);
    const b = await exec(sb, 'print(x + 1, json.dumps([twice(2)]))', { workdir: '/workspace' });
    assert.equal(b.stdout, '42 [4]\n');
    assert.equal(b.context_id, a.context_id, 'the default context');
    assert.equal((await exec(sb, 'x')).result, '41', 'the last expression comes back as result');
    // The official client sends workdir /workspace with every call: a cell's chdir still lives on.
    await exec(sb, 'import os\nos.chdir("/tmp")', { workdir: '/workspace' });
    assert.equal((await exec(sb, 'print(os.getcwd())', { workdir: '/workspace' })).stdout, '/tmp\n');
    assert.equal((await exec(sb, 'print(os.getcwd())', { workdir: '/etc' })).stdout, '/etc\n', 'another directory asked for is honoured');
    assert.equal((await exec(sb, 'print(os.getcwd())', { workdir: '/workspace' })).stdout, '/workspace\n');
    // /execute/ipython is the same kernel.
    const ip = await agent(sb, 'POST', '/execute/ipython', { code: 'x + 1' });
    assert.equal(ip.body.result, '42');
    const missing = await agent(sb, 'POST', '/execute', { code: 'print(1)', working_dir: '/no/such/dir' });
    assert.equal(missing.status, 400);
    assert.equal(missing.body.code, 'INVALID_PATH');
    const sessions = (await agent(sb, 'GET', '/jupyter/sessions')).body.sessions;
    assert.equal(sessions.length, 1);
    assert.equal(sessions[0].context_id, a.context_id);
    assert.equal(sessions[0].language, 'python');
    assert.equal(sessions[0].execution_state, 'idle');
    assert.match(sessions[0].kernel_id, /^kernel_/);
    assert.ok(!Number.isNaN(Date.parse(sessions[0].last_activity)));
  });

  test('each cell gets exactly its own output: no newline at the end, stdin, both streams, env changes', async () => {
    const a = await exec(sb, 'import sys\nprint("a", end="")\nsys.stderr.write("e")');
    assert.deepEqual([a.stdout, a.stderr], ['a', 'e']);
    assert.equal((await exec(sb, 'print("b")')).stdout, 'b\n');
    assert.equal((await exec(sb, 'print(input().upper())', { stdin: 'hello\n' })).stdout, 'HELLO\n');
    assert.equal((await exec(sb, 'import os; print(os.environ.get("PER_CALL"))', { env: { PER_CALL: '1' } })).stdout, '1\n');
    assert.equal((await exec(sb, 'print(os.environ.get("PER_CALL"))')).stdout, 'None\n', 'a request env is for that request');
    assert.equal((await agent(sb, 'PATCH', '/env', { env_vars: { SET_LATER: 'yes' } })).status, 200);
    assert.equal((await exec(sb, 'print(os.environ.get("SET_LATER"))')).stdout, 'yes\n', '/env reaches a running kernel');
    const big = await exec(sb, 'print("y" * 300000)');
    assert.equal(big.stdout.length, 300001);
  });

  test('isolated: true runs a fresh process that sees none of it', async () => {
    await exec(sb, 'only_in_kernel = 1');
    const r = await exec(sb, 'print(only_in_kernel)', { isolated: true });
    assert.equal(r.exit_code, 1);
    assert.match(r.stderr, /NameError/);
    assert.equal(r.context_id, undefined);
    const both = await agent(sb, 'POST', '/execute', { code: '1', isolated: true, context_id: r.execution_id });
    assert.equal(both.status, 404, 'an unknown context');
  });
});

describe('rich output in a kernel', () => {
  test('display() gives rich forms in the order they come; figures still open come back at the end of the cell, which closes them', async () => {
    const code = [
      'import pandas as pd',
      'display(pd.DataFrame({"a": [1, 2]}))',
      'class M:',
      '    def _repr_markdown_(self):',
      '        return "**m**"',
      'display(M())',
      'display(42)',
      'import matplotlib.pyplot as plt',
      'plt.plot([1, 2])',
    ].join('\n');
    const r = (await agent(sb, 'POST', '/execute/rich', { code, timeout: 120 })).body;
    assert.equal(r.exit_code, 0, r.stderr);
    assert.equal(r.stdout, '42\n', 'what has no rich form is printed');
    assert.deepEqual(r.rich_outputs.map((o: any) => o.mime), ['text/html', 'text/markdown', 'image/png']);
    assert.match(r.html, /<table/);
    assert.equal(r.markdown, '**m**');
    assert.ok(r.png);
    assert.equal((await exec(sb, 'plt.get_fignums()')).result, '[]', 'the cell closed its figures');
  });
});

describe('contexts', () => {
  test('create with cwd and env, list, independent state, restart, delete; bad input is 4xx', async () => {
    await run(sb, 'mkdir', ['-p', '/workspace/proj']);
    const c = await newContext({ cwd: 'proj', env: { CTX_VAR: 'c1' } });
    assert.match(c.id, /^ctx_/);
    assert.equal(c.language, 'python');
    assert.equal(c.cwd, '/workspace/proj');
    const first = await agent(sb, 'POST', '/execute', { code: 'import os\ny = 7\nprint(os.getcwd(), os.environ["CTX_VAR"])', context_id: c.id });
    assert.equal(first.body.stdout, '/workspace/proj c1\n', JSON.stringify(first.body));
    assert.equal(first.body.context_id, c.id);
    const other = await exec(sb, 'print("y" in dir())');
    assert.equal(other.stdout, 'False\n', 'the default context does not see it');
    assert.equal((await agent(sb, 'POST', '/execute', { code: 'y * 6', context_id: c.id })).body.result, '42');
    const list = (await agent(sb, 'GET', '/contexts')).body.contexts;
    assert.ok(list.some((x: any) => x.id === c.id && x.state === 'idle' && x.env_vars.CTX_VAR === 'c1'));
    assert.equal((await agent(sb, 'GET', `/contexts/${c.id}`)).body.id, c.id);

    const restarted = await agent(sb, 'POST', `/contexts/${c.id}/restart`);
    assert.equal(restarted.status, 200);
    const after = await agent(sb, 'POST', '/execute', { code: 'print(y)', context_id: c.id });
    assert.match(after.body.stderr, /NameError/);
    assert.equal(after.body.kernel_restarted, undefined, 'a restart asked for is not a lost state');

    assert.equal((await agent(sb, 'DELETE', `/contexts/${c.id}`)).status, 200);
    const gone = await agent(sb, 'POST', '/execute', { code: '1', context_id: c.id });
    assert.equal(gone.status, 404);
    assert.equal(gone.body.code, 'CONTEXT_NOT_FOUND');
    assert.equal((await agent(sb, 'DELETE', `/contexts/${c.id}`)).status, 404);
    assert.equal((await agent(sb, 'POST', '/contexts', { language: 'cobol' })).status, 400);
    assert.equal((await agent(sb, 'POST', '/contexts', { language: 'python', env: 'x' })).status, 400);
    const py = await newContext();
    const wrong = await agent(sb, 'POST', '/execute', { code: 'echo', language: 'bash', context_id: py.id });
    assert.equal(wrong.status, 400);
    assert.equal((await agent(sb, 'POST', `/contexts/${py.id}/bogus`)).status, 404);
  });

  test('one context runs in arrival order; different contexts run in parallel', async () => {
    const c = await newContext();
    const slow = agent(sb, 'POST', '/execute', { code: 'import time\ntime.sleep(0.5)\nz = 1', context_id: c.id });
    await new Promise((r) => setTimeout(r, 50));
    const next = agent(sb, 'POST', '/execute', { code: 'print(z)', context_id: c.id });
    assert.equal((await next).body.stdout, '1\n', 'the second waited for the first');
    await slow;

    const d = await newContext();
    const started = Date.now();
    const both = await Promise.all([c, d].map((x) => agent(sb, 'POST', '/execute', { code: 'import time\ntime.sleep(1)\nprint("slept")', context_id: x.id })));
    const took = Date.now() - started;
    assert.deepEqual(both.map((r) => r.body.stdout), ['slept\n', 'slept\n']);
    assert.ok(took < 1800, `ran side by side (${took} ms)`);
  });
});

describe('a kernel that misbehaves', () => {
  test('a timeout interrupts the cell and keeps the state; code that ignores the interrupt costs the state', async () => {
    const c = await newContext();
    const on = (code: string, extra: Record<string, unknown> = {}) => agent(sb, 'POST', '/execute', { code, context_id: c.id, ...extra }).then((r) => r.body);
    await on('keep = 5');
    const t = await on('print("start")\nwhile True:\n    pass', { timeout: 1 });
    assert.equal(t.timed_out, true);
    assert.equal(t.exit_code, 124);
    assert.equal(t.stdout, 'start\n');
    assert.match(t.stderr, /KeyboardInterrupt/);
    assert.equal(t.kernel_restarted, undefined);
    assert.equal((await on('print(keep)')).stdout, '5\n', 'state kept');

    const stubborn = await on('import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass', { timeout: 1 });
    assert.equal(stubborn.timed_out, true);
    assert.equal(stubborn.kernel_restarted, true);
    assert.match(stubborn.stderr, /kernel was restarted/);
    const lost = await on('print(keep)');
    assert.match(lost.stderr, /NameError/);
  });

  test('a crash (os._exit, a segfault) answers kernel_restarted and the next call gets a fresh kernel', async () => {
    const c = await newContext();
    const on = (code: string) => agent(sb, 'POST', '/execute', { code, context_id: c.id }).then((r) => r.body);
    await on('v = 1');
    const exited = await on('import os\nprint("bye", flush=True)\nos._exit(3)');
    assert.equal(exited.exit_code, 3);
    assert.equal(exited.stdout, 'bye\n');
    assert.equal(exited.kernel_restarted, true);
    assert.match(exited.stderr, /kernel was restarted: it exited \(code 3\)/);
    assert.equal((await on('print("fresh", "v" in dir())')).stdout, 'fresh False\n');
    const segv = await on('import ctypes\nctypes.string_at(0)');
    assert.equal(segv.exit_code, 139);
    assert.equal(segv.kernel_restarted, true);
    assert.equal((await on('print(1 + 1)')).stdout, '2\n');
  });

  test('a background execution in a context is listed and killable; the kill interrupts it, ends what it started and keeps the state', async () => {
    const c = await newContext();
    await agent(sb, 'POST', '/execute', { code: 'import subprocess\nkept = "yes"\nearlier = subprocess.Popen(["sleep", "1004"])', context_id: c.id });
    const bg = await agent(sb, 'POST', '/execute/background', { code: 'import time\nsubprocess.Popen(["sleep", "1003"])\nwhile True:\n    time.sleep(0.05)', context_id: c.id });
    assert.equal(bg.status, 200, JSON.stringify(bg.body));
    const id = bg.body.process_id;
    await new Promise((r) => setTimeout(r, 300));
    const listed = (await agent(sb, 'GET', '/execute/processes')).body.processes.find((p: any) => p.process_id === id);
    assert.equal(listed?.status, 'running');
    const sessions = (await agent(sb, 'GET', '/jupyter/sessions')).body.sessions.find((s: any) => s.context_id === c.id);
    assert.equal(sessions.execution_state, 'busy');
    assert.equal((await agent(sb, 'POST', `/execute/kill/${id}`)).status, 200);
    for (let i = 0; (await agent(sb, 'GET', `/execute/processes/${id}`)).body.status === 'running'; i++) {
      assert.ok(i < 50, 'the kill ends it');
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal((await agent(sb, 'POST', '/execute', { code: 'print(kept)', context_id: c.id })).body.stdout, 'yes\n');
    const ps = (await run(sb, 'ps', ['-eo', 'args'])).stdout;
    assert.doesNotMatch(ps, /sleep 1003/, 'what the killed cell started is gone');
    assert.match(ps, /sleep 1004/, 'what an earlier cell started stays');
    await agent(sb, 'POST', '/execute', { code: 'earlier.kill()', context_id: c.id });
  });

  test('background and async executions without a context run in a fresh process: a long one holds no context', async () => {
    const bg = await agent(sb, 'POST', '/execute/background', { code: 'import time\ntime.sleep(30)' });
    assert.equal(bg.status, 200);
    const r = await exec(sb, 'print("not queued")', { timeout: 5 });
    assert.equal(r.stdout, 'not queued\n');
    await agent(sb, 'POST', `/execute/kill/${bg.body.process_id}`);
  });
});

describe('javascript keeps its state too', () => {
  test('declarations, functions, classes and imports live on; top-level await; the last value is result; a cell runs again', async () => {
    const c = await newContext({ language: 'javascript' });
    assert.equal(c.language, 'javascript');
    const on = (code: string, extra: Record<string, unknown> = {}) => agent(sb, 'POST', '/execute', { code, context_id: c.id, ...extra }).then((r) => r.body);
    let r = await on('const a = 40\nlet b = 2\nfunction add(x, y) { return x + y }\nclass K { v() { return 7 } }\nimport path from "node:path"');
    assert.equal(r.exit_code, 0, JSON.stringify(r));
    assert.equal(r.language, 'javascript');
    r = await on('console.log(add(a, b), new K().v(), path.basename("/x/y.txt"))');
    assert.equal(r.stdout, '42 7 y.txt\n', JSON.stringify(r));
    assert.equal((await on('const a = 1\na')).result, '1', 'a cell that declares a name again runs');
    assert.equal((await on('const v = await new Promise((res) => setTimeout(() => res(5), 50))\nv * 2')).result, '10');
    assert.equal((await on('const { x, y: [z] } = { x: 3, y: [4] }\nx + z')).result, '7');
    assert.equal((await on('({ k: [1, 2] })')).result, '{ k: [ 1, 2 ] }');
    const err = await on('\nnotDefinedAnywhere()');
    assert.equal(err.exit_code, 1);
    assert.match(err.stderr, /ReferenceError: notDefinedAnywhere is not defined/);
    assert.match(err.stderr, /<cell-\d+>:2/, 'the line of the cell');
    assert.doesNotMatch(err.stderr, /sbx_kernel/);

    const busy = await on('while (true) {}', { timeout: 1 });
    assert.equal(busy.timed_out, true);
    assert.equal(busy.kernel_restarted, undefined, 'a busy loop is interrupted, the kernel kept');
    const waiting = await on('await new Promise(() => {})', { timeout: 1 });
    assert.equal(waiting.timed_out, true);
    assert.equal((await on('a + 1')).result, '2', 'state kept');
    const exited = await on('process.exit(4)');
    assert.equal(exited.exit_code, 4);
    assert.equal(exited.kernel_restarted, true);
    assert.match((await on('typeof add')).result, /undefined/);
  });

  test('without a context, javascript runs in its default context (the image node, or the agent runtime)', async () => {
    await exec(sb, 'globalThis.fromDefault = 21', { language: 'javascript' });
    const r = await exec(sb, 'fromDefault * 2', { language: 'js' });
    assert.equal(r.result, '42', JSON.stringify(r));
    assert.match((await exec(sb, 'process.version', { language: 'javascript' })).result, /^'v18\./);
  });
});

describe('kernels and the sandbox lifecycle', () => {
  test('pause and resume keep the kernels and their state; stop and start give fresh ones', async () => {
    const other = await createSandbox(server, { template_name: 'code-interpreter' });
    try {
      await exec(other, 'kept = 42');
      await exec(other, 'const jsKept = 7', { language: 'javascript' });
      assert.equal((await api(server, 'POST', `/v1/sandboxes/${other.id}/pause`)).status, 200);
      assert.equal((await api(server, 'POST', `/v1/sandboxes/${other.id}/resume`)).status, 200);
      assert.equal((await exec(other, 'kept')).result, '42');
      assert.equal((await exec(other, 'jsKept', { language: 'javascript' })).result, '7');
      assert.equal((await api(server, 'POST', `/v1/sandboxes/${other.id}/stop`)).status, 200);
      assert.equal((await api(server, 'POST', `/v1/sandboxes/${other.id}/start`)).status, 200);
      assert.deepEqual((await agent(other, 'GET', '/jupyter/sessions')).body, { sessions: [] }, 'no kernel after a start');
      const after = await exec(other, 'print("kept" in dir())');
      assert.equal(after.stdout, 'False\n');
      assert.equal(after.kernel_restarted, undefined, 'a new sandbox run is not a lost kernel');
    } finally {
      await api(server, 'DELETE', `/v1/sandboxes/${other.id}`);
    }
  });
});

describe('a cell against its own kernel and agent', () => {
  const kernels = async () => (await run(sb, 'ps', ['-eo', 'args'])).stdout.split('\n').filter((l: string) => /sbx_kernel/.test(l)).length;

  test('a cell waiting behind a long one still times out on time; a deleted context ends its queue and leaves no kernel', async () => {
    const c = await newContext();
    const long = agent(sb, 'POST', '/execute', { code: 'import time\ntime.sleep(30)', context_id: c.id, timeout: 60 });
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    const queued = (await agent(sb, 'POST', '/execute', { code: 'print("never")', context_id: c.id, timeout: 1 })).body;
    assert.equal(queued.timed_out, true);
    assert.equal(queued.stdout, '', 'it never ran');
    assert.ok(Date.now() - started < 5000, `timed out on time (${Date.now() - started} ms)`);
    const before = await kernels();
    const waiting = agent(sb, 'POST', '/execute', { code: 'print("never either")', context_id: c.id, timeout: 60 });
    await new Promise((r) => setTimeout(r, 200));
    assert.equal((await agent(sb, 'DELETE', `/contexts/${c.id}`)).status, 200);
    const [l, w] = await Promise.all([long, waiting]);
    assert.equal(l.body.kernel_restarted, true);
    assert.match(l.body.stderr, /its context was deleted/);
    assert.doesNotMatch(w.body.stdout, /never either/);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await kernels(), before - 1, 'its kernel is gone and no new one started');
  });

  test('junk and floods on the control socket, forks, bad env values and a missing cwd do not wedge the kernel or the agent', async () => {
    const c = await newContext();
    const on = (code: string, extra: Record<string, unknown> = {}) => agent(sb, 'POST', '/execute', { code, context_id: c.id, ...extra }).then((r) => r.body);
    await on('kept = 1');
    const junk = await on('import os\nos.write(3, b\'null\\n[1]\\n{"cell": "zzz", "exit_code": 9}\\n{"ready": true}\\n\')\nprint("fine")');
    assert.deepEqual([junk.stdout, junk.exit_code, junk.kernel_restarted], ['fine\n', 0, undefined], JSON.stringify(junk));
    const fork = await on('import os, sys\nif os.fork() == 0:\n    print("child", flush=True)\n    sys.exit(0)\nos.wait()\nprint("parent")');
    assert.equal(fork.stdout, 'child\nparent\n');
    for (let i = 0; i < 5; i++) assert.equal((await on(`print(kept + ${i})`)).stdout, `${1 + i}\n`, 'the fork did not become a second kernel');
    const bad = await on('import os\nprint(os.environ.get("GOOD"))', { env: { BAD: '\ud800', GOOD: 'yes' } });
    assert.equal(bad.stdout, 'yes\n', JSON.stringify(bad));
    assert.match(bad.stderr, /BAD not set/);
    const flood = await on('import os\nwhile True:\n    os.write(3, b"x" * 65536)', { timeout: 30 });
    assert.equal(flood.kernel_restarted, true, JSON.stringify({ ...flood, stdout: flood.stdout.slice(0, 100) }));
    assert.equal((await on('print("after")')).stdout, 'after\n');
    assert.equal((await agent(sb, 'GET', '/health')).status, 200);
    assert.equal((await agent(sb, 'POST', '/contexts', { language: 'python', cwd: '/no/such/dir' })).status, 400);
  });

  test('javascript: a cell that declares process, or throws something that cannot be shown, breaks only itself', async () => {
    const c = await newContext({ language: 'javascript' });
    const on = (code: string) => agent(sb, 'POST', '/execute', { code, context_id: c.id }).then((r) => r.body);
    await on('const keep = 5');
    assert.equal((await on('function process(x) { return x }\nprocess(3)')).result, '3');
    assert.equal((await on('keep')).result, '5', 'the kernel still works');
    const weird = await on('throw new Proxy(new Error("x"), { get() { throw 0 } })');
    assert.equal(weird.exit_code, 1);
    assert.equal((await on('keep + 1')).result, '6');
    assert.equal((await on('Promise.resolve(1)')).result, 'Promise { 1 }', 'a promise as the last value is shown, not awaited');
  });
});
