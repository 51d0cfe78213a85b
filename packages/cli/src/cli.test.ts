import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { COMMANDS, findCommand, parseCommandArgs, runCli } from './cli.js';
import { UsageError } from './args.js';
import { errorFromResponse, ConnectionError } from '@sandboxd/sdk';
import { hintFor, relativeTime, reportError, table, bytes } from './output.js';

function io(env: Record<string, string> = {}) {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d) => (out += d));
  stderr.on('data', (d) => (err += d));
  return { io: { stdout, stderr, stdin: new PassThrough(), env }, out: () => out, err: () => err };
}

const cmd = (name: string) => COMMANDS.find((c) => c.name === name)!;

test('finds commands, sub-commands and aliases', () => {
  assert.equal(findCommand(['ls']).command?.name, 'ls');
  assert.equal(findCommand(['list']).command?.name, 'ls');
  assert.equal(findCommand(['template', 'build', '-f', 'x']).command?.name, 'template build');
  assert.deepEqual(findCommand(['template', 'build', '-f', 'x']).rest, ['-f', 'x']);
  assert.equal(findCommand(['template', 'list']).command?.name, 'template ls');
  assert.equal(findCommand(['template']).command, undefined);
  assert.equal(findCommand(['nope']).command, undefined);
});

test('exec takes the command after --, options before it', () => {
  const p = parseCommandArgs(cmd('exec'), ['sb1', '--timeout', '10', '-e', 'A=1', '-e', 'B=2', '--', 'ls', '-la', '--json']);
  assert.deepEqual(p.positionals, ['sb1']);
  assert.deepEqual(p.rest, ['ls', '-la', '--json']);
  assert.equal(p.values.timeout, '10');
  assert.deepEqual(p.values.env, ['A=1', 'B=2']);
  assert.equal(p.values.json, undefined, 'flags after -- belong to the command');
  const noDash = parseCommandArgs(cmd('exec'), ['sb1', 'uname']);
  assert.deepEqual(noDash.rest, ['uname']);
  assert.throws(() => parseCommandArgs(cmd('exec'), ['sb1', 'ls', '-la']), (e: unknown) => e instanceof UsageError && /--/.test(e.message));
});

test('argument counts and unknown options are usage errors', () => {
  assert.throws(() => parseCommandArgs(cmd('get'), []), /missing ID/);
  assert.throws(() => parseCommandArgs(cmd('get'), ['a', 'b']), /unexpected argument "b"/);
  assert.throws(() => parseCommandArgs(cmd('create'), ['--nope']), UsageError);
  assert.deepEqual(parseCommandArgs(cmd('rm'), ['a', 'b', 'c']).positionals, ['a', 'b', 'c']);
  const c = parseCommandArgs(cmd('create'), ['--template', 'base', '--no-internet', '--env', 'X=1', '--timeout', '5m', '--json']);
  assert.equal(c.values.template, 'base');
  assert.equal(c.values['no-internet'], true);
  assert.equal(c.values.json, true);
});

test('help for every command names its usage and options; usage errors exit 2', async () => {
  for (const c of COMMANDS) {
    const t = io();
    assert.equal(await runCli([...c.name.split(' '), '--help'], t.io), 0, c.name);
    assert.match(t.out(), new RegExp(`^Usage: sbx ${c.name}`), c.name);
    for (const o of Object.keys(c.options)) assert.ok(t.out().includes(`--${o}`), `${c.name} --${o}`);
  }
  const top = io();
  assert.equal(await runCli(['--help'], top.io), 0);
  for (const c of COMMANDS) assert.ok(top.out().includes(c.name), c.name);
  const none = io();
  assert.equal(await runCli([], none.io), 2);
  const bad = io();
  assert.equal(await runCli(['frobnicate'], bad.io), 2);
  assert.match(bad.err(), /unknown command "frobnicate"/);
  const badJson = io();
  assert.equal(await runCli(['get', '--json'], badJson.io), 2);
  assert.equal(JSON.parse(badJson.err()).error.code, 'USAGE');
  const v = io();
  assert.equal(await runCli(['--version'], v.io), 0);
  assert.match(v.out(), /^sbx \d+\.\d+\.\d+/);
  const comp = io();
  assert.equal(await runCli(['completion', 'bash'], comp.io), 0);
  assert.match(comp.out(), /complete -F _sbx sbx/);
  assert.match(comp.out(), /"template build"\) opts="[^"]*--file -f/);
});

test('errors print message, code, status and request id, with a hint; JSON mode prints JSON', () => {
  const e = errorFromResponse({ status: 404, body: { error: 'Sandbox not found', message: 'Sandbox sb_x not found', code: 'NOT_FOUND', request_id: 'req_9' } });
  const t = io();
  assert.equal(reportError(t.io, e, { baseUrl: 'http://h', hasApiKey: true, json: false }), 1);
  assert.match(t.err(), /sbx: error: Sandbox sb_x not found \(NOT_FOUND, HTTP 404, request req_9\)/);
  assert.match(t.err(), /hint: List sandboxes with `sbx ls`/);
  const j = io();
  reportError(j.io, e, { baseUrl: 'http://h', hasApiKey: true, json: true });
  const parsed = JSON.parse(j.err());
  assert.equal(parsed.error.code, 'NOT_FOUND');
  assert.equal(parsed.error.status, 404);
  assert.equal(parsed.error.request_id, 'req_9');
  assert.match(hintFor(errorFromResponse({ status: 401, body: {} }), { baseUrl: '', hasApiKey: false })!, /SANDBOXD_API_KEY/);
  assert.match(hintFor(new ConnectionError('list sandboxes: cannot reach http://h:1 (ECONNREFUSED)', { code: 'CONNECTION_ERROR' }), { baseUrl: 'http://h:1', hasApiKey: true })!, /running at http:\/\/h:1/);
  assert.match(hintFor(new ConnectionError('terminal connection closed', { code: 'CONNECTION_ERROR' }), { baseUrl: 'http://h:1', hasApiKey: true })!, /connection to the sandbox was lost/);
  assert.match(hintFor(errorFromResponse({ status: 409, body: { code: 'SANDBOX_PAUSED' } }), { baseUrl: '', hasApiKey: true })!, /sbx resume/);
  assert.match(hintFor(errorFromResponse({ status: 429, body: { retry_after: 4 } }), { baseUrl: '', hasApiKey: true })!, /4 s/);
  assert.match(hintFor(errorFromResponse({ status: 409, body: { code: 'ORG_QUOTA_EXCEEDED', limit: 'max_sandboxes' } }), { baseUrl: '', hasApiKey: true })!, /stop or delete/);
  assert.match(hintFor(errorFromResponse({ status: 400, body: { code: 'LIMIT_EXCEEDED', limit: 'max_vcpu' } }), { baseUrl: '', hasApiKey: true })!, /smaller template/);
});

test('tables, relative times and sizes', () => {
  assert.equal(table(['A', 'BB'], [['xxx', 'y'], ['z', 'long']]), 'A    BB\nxxx  y\nz    long\n');
  const now = Date.parse('2030-01-01T00:00:00Z');
  assert.equal(relativeTime('2029-12-31T23:59:30Z', now), '30s ago');
  assert.equal(relativeTime('2030-01-01T02:00:00Z', now), 'in 2h');
  assert.equal(relativeTime(null, now), '-');
  assert.equal(bytes(512), '512 B');
  assert.equal(bytes(5 * 1024 * 1024), '5.0 MiB');
});
