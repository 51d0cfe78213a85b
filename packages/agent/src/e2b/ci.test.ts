import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { createAgent } from '../app.js';
import { loadConfig } from '../config.js';
import { AgentStats } from '../metrics/stats.js';
import { createAgentServer } from '../server.js';
import { collectRichOutputs } from '../exec/rich.js';
import type { ExecuteResult } from '../proto.js';
import { cellError, cellResults, ciRoutes } from './ci.js';

// E2B's code interpreter on a real agent (its HTTP server, real Python and Node kernels) on a
// loopback port, spoken as @e2b/code-interpreter speaks it: NDJSON lines read as they come.
const agentDir = join(dirname(fileURLToPath(import.meta.url)), '../../bundle');
const dir = mkdtempSync(join(tmpdir(), 'e2b-ci-test-'));
const config = loadConfig(
  { SANDBOXD_AGENT_STATE_DIR: join(dir, 'state'), SANDBOXD_AGENT_WORKSPACE: join(dir, 'ws'), SANDBOXD_AGENT_PY_ZYGOTE: '0', PATH: process.env.PATH },
  agentDir,
);
const { agent, server } = createAgent(config);
let base = '';

before(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/e2b/ci`;
});

after(async () => {
  agent.executor.contexts.stopAll();
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

type Msg = Record<string, unknown> & { type: string };

/** Runs a cell as runCode does; every message with the time it arrived (ms since the request). */
async function run(body: Record<string, unknown>): Promise<{ status: number; msgs: Msg[]; at: number[] }> {
  const t0 = Date.now();
  const res = await fetch(`${base}/execute`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!res.ok) return { status: res.status, msgs: [(await res.json()) as Msg], at: [] };
  assert.equal(res.headers.get('content-type'), 'application/x-ndjson');
  const msgs: Msg[] = [];
  const at: number[] = [];
  let buf = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      msgs.push(JSON.parse(buf.slice(0, nl)) as Msg);
      at.push(Date.now() - t0);
      buf = buf.slice(nl + 1);
    }
  }
  assert.equal(buf, '', 'every message ends with a newline');
  return { status: res.status, msgs, at };
}

const of = (msgs: Msg[], type: string) => msgs.filter((m) => m.type === type);
const text = (msgs: Msg[], type: 'stdout' | 'stderr') => of(msgs, type).map((m) => m.text).join('');
const main = (msgs: Msg[]) => of(msgs, 'result').find((m) => m.is_main_result === true);

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${base}${path}`, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

describe('E2B code interpreter (/e2b/ci)', { timeout: 120_000 }, () => {
  test('1+1: its main result, the execution count, then the end; state lives on between cells', async () => {
    const r = await run({ code: '1+1' });
    assert.equal(r.status, 200);
    assert.deepEqual(main(r.msgs), { type: 'result', text: '2', is_main_result: true });
    assert.equal(r.msgs.at(-1)!.type, 'end_of_execution');
    const n1 = of(r.msgs, 'number_of_executions')[0]!.execution_count as number;
    await run({ code: 'x = 21' });
    const r2 = await run({ code: 'x * 2' });
    assert.equal(main(r2.msgs)!.text, '42');
    assert.equal(of(r2.msgs, 'number_of_executions')[0]!.execution_count, n1 + 2);
    assert.equal(of(r2.msgs, 'error').length, 0);
  });

  test('stdout and stderr stream while the cell runs, not at its end', async () => {
    const r = await run({ code: "import sys, time\nprint('first', flush=True)\nprint('oops', file=sys.stderr, flush=True)\ntime.sleep(1.5)\nprint('last')" });
    assert.equal(text(r.msgs, 'stdout'), 'first\nlast\n');
    assert.equal(text(r.msgs, 'stderr'), 'oops\n');
    const first = r.msgs.findIndex((m) => m.type === 'stdout');
    const end = r.msgs.findIndex((m) => m.type === 'end_of_execution');
    assert.ok(r.at[end]! - r.at[first]! >= 1000, `first output at ${r.at[first]} ms, end at ${r.at[end]} ms`);
    assert.equal(typeof r.msgs[first]!.timestamp, 'string');
  });

  test('an exception is an error message with name, value and traceback; a syntax error too', async () => {
    const r = await run({ code: 'def f():\n    return 1/0\nf()' });
    const [err] = of(r.msgs, 'error');
    assert.equal(err!.name, 'ZeroDivisionError');
    assert.equal(err!.value, 'division by zero');
    assert.match(String(err!.traceback), /^Traceback \(most recent call last\):[\s\S]*return 1\/0[\s\S]*ZeroDivisionError: division by zero$/);
    assert.equal(r.msgs.at(-1)!.type, 'end_of_execution');
    const s = await run({ code: 'x = (' });
    assert.equal(of(s.msgs, 'error')[0]!.name, 'SyntaxError');
    // The context lives on after an error.
    assert.equal(main((await run({ code: 'x' })).msgs)!.text, '21');
  });

  test('rich results: a displayed object is its own result, the last expression the main one with its HTML', async () => {
    const code = [
      'class Table:',
      "    def _repr_html_(self): return '<table><tr><td>1</td></tr></table>'",
      "    def __repr__(self): return 'Table(1)'",
      'class Doc:',
      "    def _repr_markdown_(self): return '# title'",
      'display(Doc())',
      'Table()',
    ].join('\n');
    const r = await run({ code });
    const results = of(r.msgs, 'result');
    assert.equal(results.length, 2, JSON.stringify(results));
    assert.deepEqual(results[0], { type: 'result', markdown: '# title', is_main_result: false });
    assert.deepEqual(results[1], { type: 'result', text: 'Table(1)', html: '<table><tr><td>1</td></tr></table>', is_main_result: true });
  });

  test('env_vars reach the cell; JavaScript (js) keeps its own state; bash runs too', async () => {
    assert.equal(main((await run({ code: "import os\nos.environ['GREETING']", env_vars: { GREETING: 'hello' } })).msgs)!.text, "'hello'");
    await run({ code: 'globalThis.n = 40', language: 'js' });
    const js = await run({ code: 'n + 2', language: 'javascript' });
    assert.equal(main(js.msgs)!.text, '42');
    const jsErr = await run({ code: "throw new TypeError('bad input')", language: 'js' });
    assert.deepEqual([of(jsErr.msgs, 'error')[0]!.name, of(jsErr.msgs, 'error')[0]!.value], ['TypeError', 'bad input']);
    const sh = await run({ code: 'echo hi; echo no >&2; exit 3', language: 'bash' });
    assert.equal(text(sh.msgs, 'stdout'), 'hi\n');
    assert.equal(of(sh.msgs, 'error')[0]!.value, 'exit code 3');
  });

  test('contexts: create with a cwd, run in it, list, restart (state gone), remove (then 404)', async () => {
    const cwd = join(dir, 'ws', 'project');
    mkdirSync(cwd, { recursive: true });
    const created = await call('POST', '/contexts', { language: 'python', cwd });
    assert.equal(created.status, 200);
    const ctx = created.body as { id: string; language: string; cwd: string };
    assert.deepEqual({ language: ctx.language, cwd: ctx.cwd }, { language: 'python', cwd });
    assert.equal(main((await run({ code: 'import os\ny = 7\nos.getcwd()', context_id: ctx.id })).msgs)!.text, `'${cwd}'`);
    assert.equal(main((await run({ code: 'x = 1' })).msgs), undefined, 'the default context is another');
    const inOwn = await run({ code: 'y', context_id: ctx.id });
    assert.equal(main(inOwn.msgs)!.text, '7');
    assert.equal(of(inOwn.msgs, 'number_of_executions')[0]!.execution_count, 2);
    const list = (await call('GET', '/contexts')).body as Array<{ id: string }>;
    assert.ok(Array.isArray(list) && list.some((c) => c.id === ctx.id));
    assert.equal((await call('POST', `/contexts/${ctx.id}/restart`)).status, 200);
    const after = await run({ code: 'y', context_id: ctx.id });
    assert.equal(of(after.msgs, 'error')[0]!.name, 'NameError');
    assert.equal(of(after.msgs, 'number_of_executions')[0]!.execution_count, 1);
    assert.equal((await call('DELETE', `/contexts/${ctx.id}`)).status, 200);
    const gone = await run({ code: '1', context_id: ctx.id });
    assert.equal(gone.status, 404);
    assert.equal(gone.msgs[0]!.code, 'CONTEXT_NOT_FOUND');
    assert.equal((await call('DELETE', `/contexts/${ctx.id}`)).status, 404);
    assert.equal((await call('POST', '/contexts/nope/restart')).status, 404);
    assert.equal((await call('POST', '/contexts/../x/restart')).status, 404);
    const js = (await call('POST', '/contexts', { language: 'js' })).body as { language: string; cwd: string };
    assert.deepEqual([js.language, js.cwd], ['javascript', config.workspaceDir]);
  });

  test('a silent cell still sends keepalive lines (the gateway cuts a response idle for its timeout); the client skips them', async () => {
    const quick = createAgentServer(new AgentStats(), ciRoutes(agent, { keepaliveMs: 200 }));
    await new Promise<void>((r) => quick.listen(0, '127.0.0.1', r));
    const saved = base;
    base = `http://127.0.0.1:${(quick.address() as AddressInfo).port}/e2b/ci`;
    try {
      const r = await run({ code: 'import time\ntime.sleep(1)\n3' });
      const beats = r.msgs.filter((m) => m.type === 'keepalive');
      assert.ok(beats.length >= 3, JSON.stringify(r.msgs));
      assert.ok(r.msgs.indexOf(beats[0]!) < r.msgs.findIndex((m) => m.type === 'result'), 'while the cell runs');
      assert.equal(main(r.msgs)!.text, '3');
    } finally {
      base = saved;
      quick.closeAllConnections();
      await new Promise<void>((r) => quick.close(() => r()));
    }
  });

  test('bad input is a 4xx before any stream: unknown language, R, bash contexts, missing code, wrong types, missing cwd, a context of another language', async () => {
    const bad = async (r: { status: number; body: unknown }, status: number, code: string) => {
      assert.equal(r.status, status, JSON.stringify(r.body));
      assert.equal((r.body as { code: string }).code, code);
    };
    await bad(await call('POST', '/execute', { code: '1', language: 'r' }), 400, 'INVALID_LANGUAGE');
    await bad(await call('POST', '/execute', { code: '1', language: 'cobol' }), 400, 'INVALID_LANGUAGE');
    await bad(await call('POST', '/execute', {}), 400, 'VALIDATION_ERROR');
    await bad(await call('POST', '/execute', { code: 1 }), 400, 'VALIDATION_ERROR');
    await bad(await call('POST', '/execute', { code: '1', env_vars: ['A=1'] }), 400, 'VALIDATION_ERROR');
    await bad(await call('POST', '/execute', { code: '1', context_id: 'ctx_missing' }), 404, 'CONTEXT_NOT_FOUND');
    await bad(await call('POST', '/contexts', { language: 'bash' }), 400, 'INVALID_LANGUAGE');
    await bad(await call('POST', '/contexts', { language: 'python', cwd: join(dir, 'missing') }), 400, 'INVALID_PATH');
    const py = (await call('POST', '/contexts', { language: 'python' })).body as { id: string };
    await bad(await call('POST', '/execute', { code: '1', context_id: py.id, language: 'js' }), 400, 'VALIDATION_ERROR');
    const res = await fetch(`${base}/execute`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{not json' });
    assert.equal(res.status, 400);
  });
});

test('cellError: Python tracebacks, syntax errors without frames, SystemExit, JavaScript stacks', () => {
  const tb = 'before\nTraceback (most recent call last):\n  File "<cell-1>", line 1, in <module>\nKeyError: \'k\'\n';
  assert.deepEqual(cellError('python', tb, 1), { name: 'KeyError', value: "'k'", traceback: tb.slice(7).trimEnd() });
  const syn = '  File "<cell-2>", line 1\n    x = (\n        ^\nSyntaxError: \'(\' was never closed\n';
  assert.deepEqual(cellError('python', syn, 1), { name: 'SyntaxError', value: "'(' was never closed", traceback: syn.trimEnd() });
  assert.deepEqual(cellError('python', '', 2), { name: 'SystemExit', value: '2', traceback: '' });
  assert.deepEqual(cellError('python', 'KeyboardInterrupt\n', 130).name, 'KeyboardInterrupt');
  const js = "ReferenceError: y is not defined\n    at <cell-3>:1:1\n";
  assert.deepEqual(cellError('javascript', js, 1), { name: 'ReferenceError', value: 'y is not defined', traceback: js.trimEnd() });
  assert.deepEqual(cellError('javascript', "Uncaught 'x'\n", 1).value, "'x'");
  assert.equal(cellError('javascript', 'garbage', 1).name, 'Error');
  assert.equal(cellError('bash', 'x: not found\n', 127).value, 'exit code 127');
  assert.ok(cellError('python', `Traceback (most recent call last):\n${'x'.repeat(200_000)}\nValueError: v`, 1).traceback.length <= 64 * 1024);
});

test('cellResults: a figure carries its chart; a broken chart file is left out', async () => {
  const out = mkdtempSync(join(tmpdir(), 'e2b-ci-rich-'));
  try {
    const png = Buffer.from('\x89PNG\r\n\x1a\nfake');
    const chart = { type: 'line', title: 'squares', elements: [{ label: 'Line 0', points: [[1, 1], [2, 4]] }] };
    writeFileSync(join(out, '001-figure.png'), png);
    writeFileSync(join(out, '001-figure.chart'), JSON.stringify(chart));
    writeFileSync(join(out, '002-figure.png'), png);
    writeFileSync(join(out, '002-figure.chart'), '{"type": "line", "title"');
    writeFileSync(join(out, '003-output.html'), '<b>x</b>');
    writeFileSync(join(out, '004-main.html'), '<i>m</i>');
    const rich = await collectRichOutputs(out);
    assert.deepEqual(
      rich.rich_outputs.map((o) => basename(o.path)),
      ['001-figure.png', '002-figure.png', '003-output.html', '004-main.html'],
      "a chart is not one of /execute's rich outputs",
    );
    const done: ExecuteResult = {
      success: true, stdout: '', stderr: '', exit_code: 0, execution_time: 0, timed_out: false, language: 'python', timestamp: '', result: "'m'", rich_outputs: rich.rich_outputs,
    };
    const results = await cellResults(done);
    assert.deepEqual(results, [
      { type: 'result', chart, png: png.toString('base64'), is_main_result: false },
      { type: 'result', png: png.toString('base64'), is_main_result: false },
      { type: 'result', html: '<b>x</b>', is_main_result: false },
      { type: 'result', text: "'m'", html: '<i>m</i>', is_main_result: true },
    ]);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
