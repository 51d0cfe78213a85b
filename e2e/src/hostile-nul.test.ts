import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { AgentSocket, agent, api, createSandbox, startAgentServer, stopServer, type CreatedSandbox, type TestServer } from './agent-support.js';

// Issue 8, item 9: a NUL byte in any string that reaches a spawn, a path or an environment used to
// make the agent throw (500). Every such field, sent for real through the gateway, must be a 400
// in the documented error shape, and the sandbox must keep working afterwards.

const NUL = 'a\u0000b';
let server: TestServer;
let sb: CreatedSandbox;

before(async () => {
  server = await startAgentServer({ templates: ['base'] });
  sb = await createSandbox(server);
});
after(async () => {
  await stopServer(server);
});

function assert400(res: { status: number; body: any }, what: string): void {
  assert.equal(res.status, 400, `${what}: ${res.status} ${JSON.stringify(res.body)}`);
  assert.equal(typeof res.body.error, 'string', what);
  assert.equal(res.body.message, res.body.error, what);
  assert.match(res.body.code, /^(VALIDATION_ERROR|INVALID_PATH)$/, what);
  assert.ok(res.body.request_id, what);
}

describe('NUL bytes in agent requests', () => {
  test('execute routes: code, language, name, working_dir, env names and values', async () => {
    const ok = { code: 'echo fine', language: 'bash' };
    const bodies: Array<[string, Record<string, unknown>]> = [
      ['code', { ...ok, code: `echo ${NUL}` }],
      ['language', { ...ok, language: `bash${NUL}` }],
      ['name', { ...ok, name: NUL }],
      ['working_dir', { ...ok, working_dir: `/tmp/${NUL}` }],
      ['workdir', { ...ok, workdir: `/tmp/${NUL}` }],
      ['env value', { ...ok, env: { X: NUL } }],
      ['env name', { ...ok, env: { [NUL]: 'x' } }],
    ];
    for (const path of ['/execute', '/execute/rich', '/execute/background', '/execute/ipython']) {
      for (const [what, body] of bodies) {
        if (path === '/execute/ipython' && what === 'language') continue;
        assert400(await agent(sb, 'POST', path, body), `${path} ${what}`);
      }
    }
    assert400(await agent(sb, 'POST', '/execute/async', { ...ok, code: `echo ${NUL}`, callback_url: 'http://example.com/cb' }), '/execute/async code');
    assert400(await agent(sb, 'POST', '/execute/async', { ...ok, callback_url: `http://example.com/${NUL}` }), '/execute/async callback_url');
  });

  test('command routes: command, args, working_dir, env, name', async () => {
    for (const path of ['/commands/run', '/commands/background']) {
      for (const [what, body] of [
        ['command (shell)', { command: `echo ${NUL}` }],
        ['command (argv)', { command: `ec${NUL}ho`, args: ['x'] }],
        ['args', { command: 'echo', args: ['x', NUL] }],
        ['working_dir', { command: 'pwd', working_dir: `/${NUL}` }],
        ['env', { command: 'env', env: { Y: NUL } }],
        ['name', { command: 'true', name: NUL }],
      ] as const) {
        assert400(await agent(sb, 'POST', path, body), `${path} ${what}`);
      }
    }
  });

  test('files routes: paths in bodies, queries and multipart fields', async () => {
    const q = encodeURIComponent(`/workspace/${NUL}`);
    assert400(await agent(sb, 'POST', '/files/write', { path: `/workspace/${NUL}`, content: 'x' }), 'write path');
    assert400(await agent(sb, 'POST', '/files/write', { path: '/workspace/x', content: 'x', encoding: `utf8${NUL}` }), 'write encoding');
    assert400(await agent(sb, 'POST', '/files/mkdir', { path: `/workspace/${NUL}` }), 'mkdir');
    assert400(await agent(sb, 'POST', '/files/remove', { path: `/workspace/${NUL}` }), 'remove (POST)');
    for (const [method, path] of [
      ['GET', `/files/read?path=${q}`],
      ['GET', `/files/list?path=${q}`],
      ['GET', `/files/exists?path=${q}`],
      ['GET', `/files/download?path=${q}`],
      ['DELETE', `/files/remove?path=${q}`],
    ] as const) {
      assert400(await agent(sb, method, path), `${method} ${path}`);
    }
    const form = new FormData();
    form.append('path', `/workspace/${NUL}`);
    form.append('file', new Blob([Buffer.from('payload')]), 'f.bin');
    const res = await fetch(`${sb.publicHost}/files/upload`, { method: 'POST', body: form, headers: { authorization: `Bearer ${sb.authToken}` } });
    assert400({ status: res.status, body: await res.json() }, 'multipart upload path');
    const raw = await fetch(`${sb.publicHost}/files/upload?path=${q}`, {
      method: 'POST',
      body: 'payload',
      headers: { authorization: `Bearer ${sb.authToken}`, 'content-type': 'application/octet-stream' },
    });
    assert400({ status: raw.status, body: await raw.json() }, 'raw upload ?path=');
  });

  test('env routes: names and values', async () => {
    for (const method of ['PUT', 'PATCH', 'POST'] as const) {
      assert400(await agent(sb, method, '/env', { env_vars: { GOOD: 'x', BAD: NUL } }), `${method} /env value`);
      assert400(await agent(sb, method, '/env', { env_vars: { [NUL]: 'x' } }), `${method} /env name`);
    }
    // Nothing of the refused requests was applied.
    const env = await agent(sb, 'GET', '/env');
    assert.equal(env.status, 200);
    assert.equal(env.body.env_vars.GOOD, undefined);
  });

  test('WebSocket frames: an error frame, and the socket keeps working', async () => {
    const s = await AgentSocket.open(sb, '/execute/stream');
    try {
      s.send({ type: 'execute', code: `echo ${NUL}`, language: 'bash' });
      const err = await s.next('error');
      assert.equal(err.code, 'VALIDATION_ERROR');
      assert.match(err.error, /NUL/);
      const done = await s.next('complete');
      assert.equal(done.success, false);
      const from = s.frames.length;
      s.send({ type: 'execute', code: 'echo still-here', language: 'bash', workdir: `/tmp/${NUL}` });
      assert.equal((await s.next('error', 30_000, from)).code, 'VALIDATION_ERROR');
      const from2 = s.frames.length;
      s.send({ type: 'execute', code: 'echo still-here', language: 'bash' });
      assert.equal((await s.next('stdout', 30_000, from2)).data, 'still-here\n');
    } finally {
      await s.close();
    }
    const w = await AgentSocket.open(sb, '/files/watch');
    try {
      w.send({ action: 'watch', path: `/workspace/${NUL}` });
      assert.match((await w.next('error')).code, /^(VALIDATION_ERROR|INVALID_PATH)$/);
    } finally {
      await w.close();
    }
  });

  test('lifecycle API: sandbox env_vars and template build steps with NUL are 400s', async () => {
    const create = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', env_vars: { X: NUL } });
    assert.equal(create.status, 400, JSON.stringify(create.body));
    for (const step of [
      { type: 'run', command: `echo ${NUL}` },
      { type: 'env', key: 'K', value: NUL },
      { type: 'workdir', path: `/${NUL}` },
    ]) {
      const res = await api(server, 'POST', '/v1/templates/build', { alias: 'nul', steps: [{ type: 'from', image: 'debian:11' }, step] });
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.equal(res.body.code, 'INVALID_TEMPLATE_DEFINITION');
      assert.match(res.body.message, /NUL byte/);
    }
  });

  test('afterwards the sandbox works, and NUL stays allowed where it is data (file content, stdin)', async () => {
    const write = await agent(sb, 'POST', '/files/write', { path: '/workspace/nul.bin', content: NUL });
    assert.equal(write.status, 200, JSON.stringify(write.body));
    const od = await agent(sb, 'POST', '/commands/run', { command: 'od', args: ['-An', '-c', '/workspace/nul.bin'] });
    assert.equal(od.status, 200);
    assert.match(od.body.stdout, /a\s+\\0\s+b/);
    const stdin = await agent(sb, 'POST', '/commands/run', { command: 'wc', args: ['-c'], stdin: NUL });
    assert.equal(stdin.body.stdout.trim(), '3');
    const exec = await agent(sb, 'POST', '/execute', { code: 'echo ok', language: 'bash' });
    assert.deepEqual([exec.status, exec.body.stdout], [200, 'ok\n']);
    assert.equal((await agent(sb, 'GET', '/health')).status, 200);
    assert.equal((await fetch(`${server.baseUrl}/health`)).status, 200, 'the daemon is up');
  });
});
