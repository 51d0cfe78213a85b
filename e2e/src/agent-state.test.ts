import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { agent, api, createSandbox, exec, run, startAgentServer, stopServer, waitFor, type CreatedSandbox, type TestServer } from './agent-support.js';

// Background processes, the env set, metrics/health/info: real sandboxes, through the gateway.

let server: TestServer;
let sb: CreatedSandbox;

before(async () => {
  server = await startAgentServer();
  sb = await createSandbox(server, { template_name: 'code-interpreter', env_vars: { FROM_CREATE: 'c1', SHARED: 'create' } });
});
after(async () => {
  await stopServer(server);
});

const processes = async () => (await agent(sb, 'GET', '/execute/processes')).body.processes as any[];

describe('processes', () => {
  test('background execution and command: started at once, listed running, then finished with their output', async () => {
    const bg = await agent(sb, 'POST', '/execute/background', { code: 'import time\nprint("bg out", flush=True)\ntime.sleep(1.5)\nprint("bg done")', name: 'sleeper' });
    assert.equal(bg.status, 200);
    assert.equal(bg.body.status, 'running');
    assert.match(bg.body.process_id, /\S/);
    assert.equal(bg.body.execution_id, bg.body.process_id);
    assert.match(bg.body.started_at, /Z$/);
    const cmd = await agent(sb, 'POST', '/commands/background', { command: 'bash', args: ['-c', 'echo cmd out; exit 3'] });
    assert.equal(cmd.status, 200);
    assert.equal(cmd.body.status, 'running');

    const running = (await processes()).find((p) => p.process_id === bg.body.process_id);
    assert.ok(running, 'listed while running');
    assert.equal(running.status, 'running');
    assert.equal(running.name, 'sleeper');
    assert.equal(running.language, 'python');
    for (const k of ['process_id', 'execution_id', 'name', 'status', 'language', 'started_at', 'start_time', 'end_time', 'exit_code', 'pid']) assert.ok(k in running, k);

    const doneCmd = await waitFor('the command to finish', async () => (await processes()).find((p) => p.process_id === cmd.body.process_id && p.status !== 'running'));
    assert.equal(doneCmd.status, 'failed');
    assert.equal(doneCmd.exit_code, 3);
    assert.equal(doneCmd.stdout, 'cmd out\n');
    const done = await waitFor('the execution to finish', async () => (await processes()).find((p) => p.process_id === bg.body.process_id && p.status !== 'running'));
    assert.equal(done.status, 'completed');
    assert.equal(done.exit_code, 0);
    assert.equal(done.stdout, 'bg out\nbg done\n');
    assert.match(done.end_time, /Z$/);
    const one = await agent(sb, 'GET', `/execute/processes/${bg.body.process_id}`);
    assert.equal(one.body.status, 'completed');
  });

  test('/execute/async runs in the background and POSTs the signed result to callback_url; bad callbacks are 400', async () => {
    // The receiver runs in the sandbox: the callback goes out under the sandbox's own network policy.
    const receiver = [
      'import http.server, json',
      'class H(http.server.BaseHTTPRequestHandler):',
      '    def do_POST(self):',
      '        body = self.rfile.read(int(self.headers["content-length"]))',
      '        open("/tmp/hook.json.part", "w").write(json.dumps({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body.decode()}))',
      '        __import__("os").rename("/tmp/hook.json.part", "/tmp/hook.json")',
      '        self.send_response(204)',
      '        self.end_headers()',
      '    def log_message(self, *a): pass',
      'http.server.HTTPServer(("127.0.0.1", 8765), H).serve_forever()',
    ].join('\n');
    const rx = await agent(sb, 'POST', '/commands/background', { command: 'python3', args: ['-c', receiver], name: 'hook receiver' });
    await waitFor('the receiver', async () => (await run(sb, 'bash', ['-c', 'exec 3<>/dev/tcp/127.0.0.1/8765'])).exit_code === 0);
    try {
      const started = await agent(sb, 'POST', '/execute/async', {
        code: 'print(6 * 7)',
        language: 'python',
        callback_url: 'http://127.0.0.1:8765/hook',
        callback_headers: { 'X-Token': 'tkn' },
        callback_signature_secret: 'shh',
      });
      assert.equal(started.status, 202, JSON.stringify(started.body));
      assert.equal(started.body.status, 'running');
      assert.equal(started.body.callback_url, 'http://127.0.0.1:8765/hook');
      const id = started.body.execution_id;
      const hook = await waitFor('the callback', async () => {
        const r = await agent(sb, 'GET', `/files/read?path=${encodeURIComponent('/tmp/hook.json')}`);
        return r.status === 200 ? JSON.parse(r.body.content) : null;
      });
      const result = JSON.parse(hook.body);
      assert.equal(result.execution_id, id);
      assert.equal(result.stdout, '42\n');
      assert.equal(result.exit_code, 0);
      assert.equal(result.status, 'completed');
      assert.equal(result.success, true);
      assert.equal(hook.headers['x-token'], 'tkn');
      assert.equal(hook.headers['content-type'], 'application/json');
      assert.equal(hook.headers['x-sandboxd-signature'], `sha256=${createHmac('sha256', 'shh').update(hook.body).digest('hex')}`);
      const listed = await waitFor('delivered in the list', async () => (await processes()).find((p) => p.process_id === id && p.callback?.status === 'delivered'));
      assert.equal(listed.callback.attempts, 1);
      assert.equal(listed.callback.last_status_code, 204);
    } finally {
      await agent(sb, 'POST', `/execute/kill/${rx.body.process_id}`);
    }
    for (const body of [{ code: 'print(1)' }, { code: 'print(1)', callback_url: 'ftp://x/' }, { code: 'print(1)', callback_url: 'http://x/', callback_headers: { Host: 'y' } }]) {
      const bad = await agent(sb, 'POST', '/execute/async', body);
      assert.equal(bad.status, 400, JSON.stringify(body));
      assert.equal(bad.body.code, 'VALIDATION_ERROR');
    }
  });

  test('foreground executions are listed too, and the list keeps recently finished ones', async () => {
    const r = await exec(sb, 'print("fg")');
    const entry = (await processes()).find((p) => p.process_id === r.execution_id);
    assert.ok(entry);
    assert.equal(entry.status, 'completed');
    assert.equal(entry.background, false);
  });

  test('kill by id in both spellings ends the process and its children; unknown ids are 404', async () => {
    const a = await agent(sb, 'POST', '/execute/background', { code: 'import subprocess, time\nsubprocess.Popen(["sleep", "1001"])\ntime.sleep(1000)' });
    const b = await agent(sb, 'POST', '/commands/background', { command: 'sleep 1002' });
    await waitFor('the children to start', async () => /sleep 1001/.test((await run(sb, 'ps', ['-eo', 'args'])).stdout));
    const k1 = await agent(sb, 'POST', `/execute/kill/${a.body.process_id}`, undefined, { 'content-type': 'application/json' });
    assert.equal(k1.status, 200);
    assert.deepEqual({ id: k1.body.process_id, status: k1.body.status }, { id: a.body.process_id, status: 'killed' });
    assert.equal(typeof k1.body.message, 'string');
    const k2 = await agent(sb, 'DELETE', `/execute/kill?process_id=${b.body.process_id}`);
    assert.equal(k2.status, 200);
    assert.equal(k2.body.status, 'killed');
    await waitFor('both to end', async () => {
      const ps = await processes();
      return [a.body.process_id, b.body.process_id].every((id) => ps.find((p) => p.process_id === id)?.end_time);
    });
    const ps = await processes();
    assert.equal(ps.find((p) => p.process_id === a.body.process_id).status, 'killed');
    const left = (await run(sb, 'ps', ['-eo', 'args'])).stdout;
    assert.doesNotMatch(left, /sleep 100[12]/, 'children were killed with their parent');
    for (const [method, path] of [
      ['POST', '/execute/kill/proc_does_not_exist'],
      ['DELETE', '/execute/kill?process_id=proc_does_not_exist'],
    ]) {
      const r = await agent(sb, method!, path!);
      assert.equal(r.status, 404, path);
      assert.equal(r.body.code, 'PROCESS_NOT_FOUND');
      assert.doesNotMatch(r.body.message, /sandbox/i);
    }
  });

  test('a foreground execution can be killed from another request', async () => {
    const pending = exec(sb, 'import time\ntime.sleep(60)', { timeout: 120 });
    const entry = await waitFor('it to be listed', async () => (await processes()).find((p) => p.status === 'running' && !p.background && p.kind === 'execute'));
    await agent(sb, 'POST', `/execute/kill/${entry.process_id}`);
    const r = await pending;
    assert.equal(r.success, false);
    assert.equal(r.killed, true);
    assert.equal(r.timed_out, false);
  });
});

describe('env', () => {
  test('create-time env_vars are in effect from the first call and listed by GET /env', async () => {
    const env = await agent(sb, 'GET', '/env');
    assert.equal(env.status, 200);
    assert.equal(env.body.env_vars.FROM_CREATE, 'c1');
    assert.equal((await exec(sb, 'import os; print(os.environ["FROM_CREATE"])')).stdout, 'c1\n');
  });

  test('PUT replaces, PATCH merges, DELETE /env/{key} removes; each answers the full set; later runs see it', async () => {
    const put = await agent(sb, 'PUT', '/env', { env_vars: { A: '1', SHARED: 'put' } });
    assert.equal(put.status, 200);
    assert.deepEqual(put.body.env_vars, { A: '1', SHARED: 'put' });
    const patch = await agent(sb, 'PATCH', '/env', { env_vars: { B: '2' }, merge: true });
    assert.deepEqual(patch.body.env_vars, { A: '1', SHARED: 'put', B: '2' });
    const del = await agent(sb, 'DELETE', '/env/A');
    assert.equal(del.status, 200);
    assert.deepEqual(del.body.env_vars, { SHARED: 'put', B: '2' });
    assert.equal((await agent(sb, 'DELETE', '/env/NOT_SET')).status, 200, 'deleting an unset key is idempotent');
    assert.equal((await run(sb, 'sh', ['-c', 'echo "${A:-unset} $B $SHARED"'])).stdout, 'unset 2 put\n');
    assert.equal((await exec(sb, 'console.log(process.env.B)', { language: 'js' })).stdout, '2\n');
    const bad = await agent(sb, 'PATCH', '/env', { env_vars: { 'A=B': 'x' } });
    assert.equal(bad.status, 400);
    assert.equal((await agent(sb, 'PUT', '/env', { env_vars: 'x' })).status, 400);
  });

  test('the env set survives stop and start of the sandbox', async () => {
    await agent(sb, 'PUT', '/env', { env_vars: { PERSIST: 'yes', FROM_CREATE: 'c1' } });
    const stop = await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`);
    assert.equal(stop.status, 200, JSON.stringify(stop.body));
    const start = await api(server, 'POST', `/v1/sandboxes/${sb.id}/start`);
    assert.equal(start.status, 200, JSON.stringify(start.body));
    const info = (await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).body;
    sb = { ...sb, publicHost: info.public_host };
    const env = await waitFor('the agent to answer', async () => {
      const r = await agent(sb, 'GET', '/env').catch(() => undefined);
      return r?.status === 200 ? r : undefined;
    });
    assert.deepEqual(env.body.env_vars, { PERSIST: 'yes', FROM_CREATE: 'c1' });
    assert.equal((await exec(sb, 'import os; print(os.environ.get("PERSIST"))')).stdout, 'yes\n');
    const uptime = (await agent(sb, 'GET', '/health')).body.uptime_seconds;
    assert.ok(uptime < 60, 'a fresh agent answered');
  });
});

describe('health, info, metrics, cache', () => {
  test('/health and /info', async () => {
    const h = await agent(sb, 'GET', '/health');
    assert.equal(h.status, 200);
    assert.equal(h.body.status, 'healthy');
    for (const f of ['code_execution', 'file_operations']) assert.ok(h.body.features.includes(f), f);
    assert.deepEqual([...h.body.languages].sort(), ['bash', 'go', 'javascript', 'python']);
    assert.equal(typeof h.body.version, 'string');
    const i = await agent(sb, 'GET', '/info');
    assert.equal(i.body.agent, 'sandboxd-agent');
    assert.equal(i.body.sandbox_id, sb.id);
    assert.match(i.body.started_at, /Z$/);
  });

  test('/metrics/snapshot: the spec fields, executions, and the sandbox own cpu, memory and disk', async () => {
    await exec(sb, 'x = bytearray(50 * 1024 * 1024)\nimport time\nsum(range(3_000_000))\ntime.sleep(0.3)');
    const m = (await agent(sb, 'GET', '/metrics/snapshot')).body;
    assert.equal(typeof m.uptime_seconds, 'number');
    assert.ok(m.total_requests > 0);
    assert.equal(typeof m.total_errors, 'number');
    assert.ok(m.requests_total['/execute'] > 0);
    assert.ok(m.total_executions >= 1);
    assert.equal(typeof m.active_executions, 'number');
    assert.ok(m.system.cpu.usage_seconds > 0);
    assert.ok(m.system.cpu.cores >= 1);
    assert.ok(m.system.memory.used > 1024 * 1024, 'some memory in use');
    assert.ok(m.system.memory.used < 4 * 1024 * 1024 * 1024, "the sandbox's memory, not the host's");
    assert.ok(m.system.disk.total > 0 && m.system.disk.total <= 11 * 1024 * 1024 * 1024, `the sandbox disk (10 GB): ${m.system.disk.total}`);
    assert.ok(m.system.disk.used >= 0 && m.system.disk.free > 0);
    const before = m.system.disk.used;
    await run(sb, 'fallocate', ['-l', '100M', '/workspace/hundred']);
    const after = (await agent(sb, 'GET', '/metrics/snapshot')).body.system.disk.used;
    assert.ok(after - before >= 90 * 1024 * 1024, 'disk use follows the sandbox disk');
    await run(sb, 'rm', ['/workspace/hundred']);
  });
});
