import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { shellJoin, shellQuote } from './shell.js';
import { SDK_VERSION } from './version.js';
import { resolveConfig, DEFAULT_API_URL } from './config.js';
import { toFileEntry, toProcessInfo, toSandboxInfo, toSandboxPage, toExecutionResult, toTemplateInfo } from './wire.js';

test('SDK_VERSION matches package.json', () => {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
  assert.equal(SDK_VERSION, pkg.version);
});

test('shellQuote round-trips through a real shell', () => {
  const args = ['plain', 'with space', "it's", '$HOME', '`x`', 'a"b', '', '*', 'new\nline', 'back\\slash'];
  const out = execFileSync('/bin/sh', ['-c', `printf '%s\\0' ${shellJoin(args)}`]).toString();
  assert.deepEqual(out.split('\0').slice(0, -1), args);
  assert.equal(shellQuote('a-b_c/d.e'), 'a-b_c/d.e');
});

test('config: options win over env, env over defaults; trailing slash and /v1 are dropped', () => {
  const saved = { url: process.env.SANDBOXD_API_URL, key: process.env.SANDBOXD_API_KEY };
  try {
    delete process.env.SANDBOXD_API_URL;
    delete process.env.SANDBOXD_API_KEY;
    assert.equal(resolveConfig().baseUrl, DEFAULT_API_URL);
    assert.equal(resolveConfig().apiKey, undefined);
    process.env.SANDBOXD_API_URL = 'http://env:9/v1/';
    process.env.SANDBOXD_API_KEY = 'envkey';
    assert.equal(resolveConfig().baseUrl, 'http://env:9');
    assert.equal(resolveConfig().apiKey, 'envkey');
    const c = resolveConfig({ baseUrl: 'http://opt:1/', apiKey: 'optkey' });
    assert.equal(c.baseUrl, 'http://opt:1');
    assert.equal(c.apiKey, 'optkey');
  } finally {
    if (saved.url === undefined) delete process.env.SANDBOXD_API_URL;
    else process.env.SANDBOXD_API_URL = saved.url;
    if (saved.key === undefined) delete process.env.SANDBOXD_API_KEY;
    else process.env.SANDBOXD_API_KEY = saved.key;
  }
});

test('wire mapping reads both spellings and tolerates missing fields', () => {
  assert.deepEqual(toFileEntry({ name: 'a', path: '/a', size: 3, is_directory: true, modified_time: 't', mode: '0755' }), {
    name: 'a', path: '/a', size: 3, isDir: true, permissions: '0755', modified: 't',
  });
  assert.equal(toFileEntry({ name: 'b', is_dir: false }).isDir, false);
  assert.equal(toProcessInfo({ process_id: 'p', status: 'completed', start_time: 's', exit_code: 0 }).startedAt, 's');
  const info = toSandboxInfo({ id: 'sb', status: 'running', public_host: 'http://127.0.0.1:1', resources: { vcpu: 1, memory_mb: 512, disk_gb: 1, disk_mb: 1024 }, timeout_seconds: null, expires_at: null });
  assert.equal(info.publicHost, 'http://127.0.0.1:1');
  assert.deepEqual(info.resources, { vcpu: 1, memoryMb: 512, diskGb: 1, diskMb: 1024 });
  assert.equal(info.timeoutSeconds, null);
  assert.equal(info.internetAccess, true);
  assert.deepEqual(toSandboxPage({ data: [{ id: 'x' }], has_more: false, next_cursor: null }).data.map((s) => s.id), ['x']);
  const r = toExecutionResult({ stdout: 'a', stderr: '', exit_code: 3, execution_time: 0.5, timed_out: false, rich_outputs: [{ type: 'image', path: '/p', mime: 'image/png' }] });
  assert.equal(r.success, false);
  assert.equal(r.exitCode, 3);
  assert.deepEqual(r.richOutputs, [{ type: 'image', path: '/p', mime: 'image/png' }]);
  assert.equal(toTemplateInfo({ name: 'python', status: 'active' }).isActive, true);
});
