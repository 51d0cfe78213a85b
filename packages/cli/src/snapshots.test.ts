import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { PassThrough } from 'node:stream';
import { COMMANDS, findCommand, parseCommandArgs, runCli } from './cli.js';

// `sbx snapshot ...`, `sbx fork`, `sbx restore` and `sbx create --snapshot`, against a stand-in for
// the API that records what it was sent.

interface Received {
  method: string;
  path: string;
  query: Record<string, string>;
  body: unknown;
}

const received: Received[] = [];
let server: Server;
let apiUrl: string;

const resources = { vcpu: 2, memory_mb: 2048, disk_gb: 10 };

function wireSnapshot(id: string, over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    object: 'snapshot',
    snapshot_id: id,
    id,
    name: null,
    sandbox_id: 'sb_1',
    organization_id: 'org_1',
    template_id: 'tpl_ci',
    template_name: 'code-interpreter',
    parent_snapshot_id: null,
    size: 3 * 1024 * 1024,
    created_at: new Date(Date.now() - 120_000).toISOString(),
    resources,
    ...over,
  };
}

function wireSandbox(id: string): Record<string, unknown> {
  return { object: 'sandbox', id, status: 'running', template_name: 'code-interpreter', template_id: 'tpl_ci', internet_access: true, resources, auth_token: `tok_${id}` };
}

const problem = (code: string, message: string, extra: Record<string, unknown> = {}) => ({ error: code, code, message, request_id: 'req_e', ...extra });

before(async () => {
  server = createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      const url = new URL(req.url!, 'http://x');
      const body = text ? (JSON.parse(text) as Record<string, unknown>) : undefined;
      received.push({ method: req.method!, path: url.pathname, query: Object.fromEntries(url.searchParams), body });
      const send = (status: number, value: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(value));
      };
      const route = `${req.method} ${url.pathname}`;
      if (route === 'POST /v1/sandboxes/sb_1/snapshots') return send(201, { ...wireSnapshot('snap_new', { name: body?.name ?? null }), request_id: 'req_s' });
      if (route === 'POST /v1/sandboxes/sb_full/snapshots') {
        return send(409, problem('ORG_QUOTA_EXCEEDED', 'snapshots would use 10300 MB of 10240', { limit: 'max_snapshot_storage_mb', max: 10240, used: 10200 }));
      }
      if (route === 'GET /v1/snapshots') {
        const all = [wireSnapshot('snap_3', { name: 'third' }), wireSnapshot('snap_2', { sandbox_id: 'sb_2' }), wireSnapshot('snap_1', { name: 'first' })];
        const mine = all.filter((s) => !url.searchParams.get('sandbox_id') || s.sandbox_id === url.searchParams.get('sandbox_id'));
        const start = Number(url.searchParams.get('cursor') ?? 0);
        const limit = Number(url.searchParams.get('limit') ?? 2);
        const data = mine.slice(start, start + Math.min(limit, 2));
        const more = start + data.length < mine.length;
        return send(200, { object: 'list', data, has_more: more, next_cursor: more ? String(start + data.length) : null, url: '/v1/snapshots' });
      }
      if (route === 'GET /v1/snapshots/snap_1') return send(200, wireSnapshot('snap_1', { name: 'first', parent_snapshot_id: 'snap_0' }));
      if (route === 'DELETE /v1/snapshots/snap_1' || route === 'DELETE /v1/snapshots/snap_2') return send(200, { id: url.pathname.split('/').pop(), status: 'deleted' });
      if (route === 'POST /v1/snapshots/snap_1/template') return send(201, { id: 'tpl_9', name: body?.alias, status: 'active', default_resources: resources });
      if (url.pathname.startsWith('/v1/snapshots/')) return send(404, problem('SNAPSHOT_NOT_FOUND', `snapshot ${url.pathname.split('/')[3]} not found`));
      if (route === 'POST /v1/sandboxes/sb_1/fork') {
        const n = (body?.count as number | undefined) ?? 1;
        return send(201, { object: 'list', data: Array.from({ length: n }, (_, i) => wireSandbox(`sb_f${i}`)), source_id: 'sb_1' });
      }
      if (route === 'POST /v1/sandboxes/sb_1/restore') {
        if (body?.snapshot_id === 'snap_other') return send(400, problem('VALIDATION_ERROR', 'snapshot snap_other is not of the lineage of sandbox sb_1'));
        return send(200, { ...wireSandbox('sb_1'), auth_token: undefined });
      }
      if (route === 'POST /v1/sandboxes') return send(201, wireSandbox('sb_new'));
      send(404, problem('NOT_FOUND', 'no such route'));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  apiUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
after(() => new Promise<void>((r) => server.close(() => r())));

async function sbx(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d) => (out += d));
  stderr.on('data', (d) => (err += d));
  const code = await runCli([...args, '--api-url', apiUrl, '--api-key', 'k'], { stdout, stderr, stdin: new PassThrough(), env: {} });
  return { code, out, err };
}

const cmd = (name: string) => COMMANDS.find((c) => c.name === name)!;

test('`sbx snapshot ID` is `sbx snapshot create ID`; sub-commands and their aliases win; alone it is the group help', async () => {
  assert.deepEqual(findCommand(['snapshot', 'sb_1', '--name', 'x']), { command: cmd('snapshot create'), group: 'snapshot', rest: ['sb_1', '--name', 'x'] });
  assert.equal(findCommand(['snapshot', 'create', 'sb_1']).command?.name, 'snapshot create');
  assert.deepEqual(findCommand(['snapshot', 'ls', '--sandbox', 'sb_1']).rest, ['--sandbox', 'sb_1']);
  assert.equal(findCommand(['snapshot', 'list']).command?.name, 'snapshot ls');
  assert.equal(findCommand(['snapshot', 'delete', 'snap_1']).command?.name, 'snapshot rm');
  assert.equal(findCommand(['snapshot', 'show', 'snap_1']).command?.name, 'snapshot get');
  assert.equal(findCommand(['snapshot', '--help']).command, undefined);
  assert.equal(findCommand(['template', 'delete', 'x']).command?.name, 'template rm', 'the aliases hold in every group');
  const stdout = new PassThrough();
  let help = '';
  stdout.on('data', (d) => (help += d));
  assert.equal(await runCli(['snapshot'], { stdout, stderr: new PassThrough(), stdin: new PassThrough(), env: {} }), 2);
  assert.match(help, /^Usage: sbx snapshot COMMAND/);
  assert.match(help, /`sbx snapshot ID` takes one/);
  for (const sub of ['create', 'ls', 'get', 'rm', 'promote']) assert.match(help, new RegExp(`^  snapshot ${sub} `, 'm'));
  const p = parseCommandArgs(cmd('fork'), ['sb_1', '-n', '3', '--timeout', '15m', '--allow-out', 'a.example', '--allow-out', 'b.example', '-e', 'A=1']);
  assert.deepEqual(p.positionals, ['sb_1']);
  assert.equal(p.values.count, '3');
  assert.deepEqual(p.values['allow-out'], ['a.example', 'b.example']);
});

test('snapshot create prints the id alone (the name sent only when given); --json the SDK object', async () => {
  const r = await sbx('snapshot', 'sb_1', '--name', 'before upgrade');
  assert.equal(r.code, 0, r.err);
  assert.equal(r.out, 'snap_new\n');
  assert.deepEqual(received.at(-1), { method: 'POST', path: '/v1/sandboxes/sb_1/snapshots', query: {}, body: { name: 'before upgrade' } });
  const j = await sbx('snapshot', 'create', 'sb_1', '--json');
  assert.equal(j.code, 0, j.err);
  assert.deepEqual(received.at(-1)!.body, {}, 'no name unless given');
  const snap = JSON.parse(j.out);
  assert.equal(snap.snapshotId, 'snap_new');
  assert.equal(snap.templateName, 'code-interpreter');
  assert.equal(snap.size, 3 * 1024 * 1024);
});

test('snapshot ls follows the pages, filters by --sandbox, and prints a table, ids (-q) or JSON', async () => {
  const r = await sbx('snapshot', 'ls');
  assert.equal(r.code, 0, r.err);
  const lines = r.out.trimEnd().split('\n');
  assert.match(lines[0]!, /^ID\s+NAME\s+SANDBOX\s+TEMPLATE\s+SIZE\s+CREATED$/);
  assert.match(lines[1]!, /^snap_3\s+third\s+sb_1\s+code-interpreter\s+3\.0 MiB\s+2m ago$/);
  assert.match(lines[2]!, /^snap_2\s+-\s+sb_2\s/);
  assert.equal(lines.length, 4, 'all three, over two pages');
  assert.deepEqual(
    received.slice(-2).map((x) => x.query),
    [{}, { cursor: '2' }],
  );
  const q = await sbx('snapshot', 'ls', '--sandbox', 'sb_1', '-q');
  assert.equal(q.out, 'snap_3\nsnap_1\n');
  assert.equal(received.at(-1)!.query.sandbox_id, 'sb_1');
  const n = await sbx('snapshot', 'list', '-n', '1', '--json');
  assert.deepEqual(
    JSON.parse(n.out).map((s: { snapshotId: string }) => s.snapshotId),
    ['snap_3'],
  );
  const none = await sbx('snapshot', 'ls', '--sandbox', 'sb_none');
  assert.equal(none.code, 0);
  assert.equal(none.out, '');
  assert.equal(none.err, 'no snapshots\n');
});

test('snapshot get shows one; an unknown one is SNAPSHOT_NOT_FOUND, exit 1, with a hint to list them', async () => {
  const r = await sbx('snapshot', 'get', 'snap_1');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /^id:\s+snap_1$/m);
  assert.match(r.out, /^name:\s+first$/m);
  assert.match(r.out, /^parent:\s+snap_0$/m);
  assert.match(r.out, /^size:\s+3\.0 MiB$/m);
  const missing = await sbx('snapshot', 'get', 'snap_x');
  assert.equal(missing.code, 1);
  assert.match(missing.err, /snapshot snap_x not found \(SNAPSHOT_NOT_FOUND, HTTP 404, request req_e\)/);
  assert.match(missing.err, /hint: List snapshots with `sbx snapshot ls`/);
});

test('snapshot rm deletes each; with several it goes on past a failure and exits 1', async () => {
  const one = await sbx('snapshot', 'rm', 'snap_1');
  assert.equal(one.code, 0, one.err);
  assert.equal(one.out, 'snap_1 deleted\n');
  assert.deepEqual(received.at(-1), { method: 'DELETE', path: '/v1/snapshots/snap_1', query: {}, body: undefined });
  const some = await sbx('snapshot', 'rm', 'snap_x', 'snap_2');
  assert.equal(some.code, 1);
  assert.equal(some.out, 'snap_2 deleted\n');
  assert.match(some.err, /sbx: snap_x: snapshot snap_x not found/);
  const j = await sbx('snapshot', 'rm', 'snap_1', 'snap_2', '--json');
  assert.deepEqual(JSON.parse(j.out), [
    { id: 'snap_1', status: 'deleted' },
    { id: 'snap_2', status: 'deleted' },
  ]);
});

test('snapshot promote sends the alias and prints the template', async () => {
  const r = await sbx('snapshot', 'promote', 'snap_1', 'my-app-v2');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(received.at(-1), { method: 'POST', path: '/v1/snapshots/snap_1/template', query: {}, body: { alias: 'my-app-v2' } });
  assert.equal(r.out, 'template my-app-v2 made of snap_1\n');
  const j = await sbx('snapshot', 'promote', 'snap_1', 'my-app-v3', '--json');
  assert.equal(JSON.parse(j.out).name, 'my-app-v3');
  const usage = await sbx('snapshot', 'promote', 'snap_1');
  assert.equal(usage.code, 2);
  assert.match(usage.err, /missing ALIAS/);
});

test('fork sends count and only the settings given, and prints one new id a line', async () => {
  const r = await sbx('fork', 'sb_1', '-n', '3', '--timeout', '15m', '--no-internet', '--env', 'A=1');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(received.at(-1), {
    method: 'POST',
    path: '/v1/sandboxes/sb_1/fork',
    query: {},
    body: { count: 3, timeout_seconds: 900, internet_access: false, env_vars: { A: '1' } },
  });
  assert.equal(r.out, 'sb_f0\nsb_f1\nsb_f2\n');
  const j = await sbx('fork', 'sb_1', '--json');
  assert.deepEqual(received.at(-1)!.body, { count: 1 });
  assert.deepEqual(
    JSON.parse(j.out).map((s: { id: string }) => s.id),
    ['sb_f0'],
  );
  const before = received.length;
  for (const bad of [['-n', '0'], ['-n', 'two'], ['--timeout', 'soon'], ['--on-timeout', 'explode']]) {
    const u = await sbx('fork', 'sb_1', ...bad);
    assert.equal(u.code, 2, bad.join(' '));
  }
  assert.equal(received.length, before, 'a usage error sends nothing');
});

test('restore sends the snapshot id; one of another lineage is the validation error, exit 1', async () => {
  const r = await sbx('restore', 'sb_1', 'snap_1');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(received.at(-1), { method: 'POST', path: '/v1/sandboxes/sb_1/restore', query: {}, body: { snapshot_id: 'snap_1' } });
  assert.equal(r.out, 'sb_1 restored to snap_1\n');
  const j = await sbx('restore', 'sb_1', 'snap_1', '--json');
  assert.equal(JSON.parse(j.out).id, 'sb_1');
  const bad = await sbx('restore', 'sb_1', 'snap_other');
  assert.equal(bad.code, 1);
  assert.match(bad.err, /not of the lineage of sandbox sb_1 \(VALIDATION_ERROR, HTTP 400, request req_e\)/);
});

test('create --snapshot sends snapshot_id and no template; with --template it is a usage error', async () => {
  const r = await sbx('create', '--snapshot', 'snap_1', '--timeout', '1h', '-q');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(received.at(-1)!.body, { snapshot_id: 'snap_1', timeout_seconds: 3600 });
  assert.equal(r.out, 'sb_new\n');
  const before = received.length;
  const both = await sbx('create', '--snapshot', 'snap_1', '--template', 'base');
  assert.equal(both.code, 2);
  assert.match(both.err, /--template and --snapshot exclude each other/);
  assert.equal(received.length, before);
  await sbx('create', '-q');
  assert.deepEqual(received.at(-1)!.body, { template_name: 'code-interpreter' }, 'without --snapshot, as before');
});

test("a full snapshot quota gets a hint about snapshots, not sandboxes", async () => {
  const r = await sbx('snapshot', 'sb_full');
  assert.equal(r.code, 1);
  assert.match(r.err, /\(ORG_QUOTA_EXCEEDED, HTTP 409, request req_e\)/);
  assert.match(r.err, /hint: The organization's snapshots fill its storage quota: delete some \(`sbx snapshot ls`, `sbx snapshot rm`\)/);
});

test('the completion script knows the snapshot sub-commands, fork, restore and their flags', async () => {
  const stdout = new PassThrough();
  let out = '';
  stdout.on('data', (d) => (out += d));
  assert.equal(await runCli(['completion', 'bash'], { stdout, stderr: new PassThrough(), stdin: new PassThrough(), env: {} }), 0);
  assert.match(out, /snapshot\) subs="create ls get rm promote"/);
  assert.match(out, /compgen -W "[^"]*\bsnapshot\b[^"]*\bfork\b|compgen -W "[^"]*\bfork\b[^"]*\bsnapshot\b/);
  assert.match(out, /"fork"\) opts="[^"]*--count -n[^"]*--timeout/);
  assert.match(out, /"snapshot create"\) opts="[^"]*--name/);
  assert.match(out, /"snapshot ls"\) opts="[^"]*--sandbox/);
  assert.match(out, /"create"\) opts="[^"]*--snapshot/);
  assert.match(out, /"restore"\) opts="/);
});
