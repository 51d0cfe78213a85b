import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { PassThrough } from 'node:stream';
import { COMMANDS, parseCommandArgs, runCli } from './cli.js';

// `sbx network` and the egress flags of `sbx create`, against a stand-in for the API that records
// what it was sent (the real server is exercised in e2e/src/sdk-network.test.ts).

interface Received {
  method: string;
  path: string;
  body: unknown;
}

const received: Received[] = [];
let policy = { internet_access: true, allow_out: ['example.com'], deny_out: [] as string[] };
let server: Server;
let apiUrl: string;

before(async () => {
  server = createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      const body = text ? (JSON.parse(text) as Record<string, unknown>) : undefined;
      received.push({ method: req.method!, path: req.url!, body });
      const send = (status: number, value: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(value));
      };
      if (req.url === '/v1/sandboxes/sb_1/network' && req.method === 'GET') return send(200, { ...policy, request_id: 'req_g' });
      if (req.url === '/v1/sandboxes/sb_1/network' && req.method === 'PUT') {
        const bad = [...((body?.allow_out as string[]) ?? []), ...((body?.deny_out as string[]) ?? [])].find((e) => e.includes(' '));
        if (bad) return send(400, { error: 'Validation error', code: 'VALIDATION_ERROR', message: `"${bad}" is not an IPv4 address, CIDR or domain`, request_id: 'req_v' });
        policy = { internet_access: (body?.internet_access as boolean | undefined) ?? true, allow_out: (body?.allow_out as string[]) ?? [], deny_out: (body?.deny_out as string[]) ?? [] };
        return send(200, { ...policy, request_id: 'req_p' });
      }
      if (req.url === '/v1/sandboxes' && req.method === 'POST') {
        const network = { internet_access: true, allow_out: body?.allow_out ?? [], deny_out: body?.deny_out ?? [] };
        return send(201, { id: 'sb_2', status: 'running', internet_access: true, network, resources: { vcpu: 1, memory_mb: 512, disk_gb: 1 } });
      }
      send(404, { error: 'Not found', code: 'NOT_FOUND', message: 'no such route' });
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

test('--allow-out and --deny-out repeat, on create and on network', () => {
  const c = parseCommandArgs(cmd('create'), ['--allow-out', 'example.com', '--allow-out', '10.0.0.0/8', '--deny-out', '*.ads.example']);
  assert.deepEqual(c.values['allow-out'], ['example.com', '10.0.0.0/8']);
  assert.deepEqual(c.values['deny-out'], ['*.ads.example']);
  const n = parseCommandArgs(cmd('network'), ['sb_1', '--no-internet', '--deny-out', '1.2.3.4', '--deny-out', '5.6.7.8']);
  assert.deepEqual(n.positionals, ['sb_1']);
  assert.deepEqual(n.values['deny-out'], ['1.2.3.4', '5.6.7.8']);
  assert.equal(n.values['no-internet'], true);
});

test('create sends the lists and prints them', async () => {
  const r = await sbx('create', '--allow-out', 'example.com', '--allow-out', '10.0.0.0/8', '--deny-out', '10.1.0.0/16');
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(received.at(-1)!.body, { template_name: 'code-interpreter', allow_out: ['example.com', '10.0.0.0/8'], deny_out: ['10.1.0.0/16'] });
  assert.match(r.out, /^allow out:\s+example\.com, 10\.0\.0\.0\/8$/m);
  assert.match(r.out, /^deny out:\s+10\.1\.0\.0\/16$/m);
  const j = await sbx('create', '--json');
  assert.deepEqual(received.at(-1)!.body, { template_name: 'code-interpreter' }, 'no list unless asked for');
  assert.deepEqual(JSON.parse(j.out).network, { internetAccess: true, allowOut: [], denyOut: [] });
});

test('network ID prints the policy; with lists it PUTs them (a list not given is emptied); --json prints the SDK object', async () => {
  const shown = await sbx('network', 'sb_1');
  assert.equal(shown.code, 0, shown.err);
  assert.equal(shown.out, 'internet:  yes\nallow out: example.com\ndeny out:  -\n');
  assert.equal(received.at(-1)!.method, 'GET');

  const set = await sbx('network', 'sb_1', '--deny-out', '1.2.3.4', '--deny-out', '*.example.org', '--json');
  assert.equal(set.code, 0, set.err);
  assert.deepEqual(received.at(-1), { method: 'PUT', path: '/v1/sandboxes/sb_1/network', body: { allow_out: [], deny_out: ['1.2.3.4', '*.example.org'] } });
  assert.deepEqual(JSON.parse(set.out), { internetAccess: true, allowOut: [], denyOut: ['1.2.3.4', '*.example.org'] });

  const off = await sbx('network', 'sb_1', '--no-internet', '--clear');
  assert.equal(off.code, 0, off.err);
  assert.deepEqual(received.at(-1)!.body, { internet_access: false, allow_out: [], deny_out: [] });
  assert.match(off.out, /^internet:\s+no$/m);
  await sbx('network', 'sb_1', '--internet', '--allow-out', 'example.com');
  assert.deepEqual(received.at(-1)!.body, { internet_access: true, allow_out: ['example.com'], deny_out: [] });
});

test('network refuses to empty the lists unless --clear says so, and contradictory flags, before any request', async () => {
  const before = received.length;
  for (const args of [['--internet'], ['--no-internet'], ['--internet', '--no-internet', '--clear'], ['--clear', '--allow-out', 'example.com']]) {
    const r = await sbx('network', 'sb_1', ...args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.match(r.err, /--clear|exclude/, args.join(' '));
  }
  const j = await sbx('network', 'sb_1', '--no-internet', '--json');
  assert.equal(JSON.parse(j.err).error.code, 'USAGE');
  assert.equal(received.length, before, 'nothing was sent');
});

test("a bad entry is the service's VALIDATION_ERROR, exit 1, naming the entry", async () => {
  const r = await sbx('network', 'sb_1', '--allow-out', 'not a host');
  assert.equal(r.code, 1);
  assert.match(r.err, /"not a host" is not an IPv4 address, CIDR or domain \(VALIDATION_ERROR, HTTP 400, request req_v\)/);
});

test('the completion script offers the egress flags', async () => {
  const stdout = new PassThrough();
  let out = '';
  stdout.on('data', (d) => (out += d));
  assert.equal(await runCli(['completion', 'bash'], { stdout, stderr: new PassThrough(), stdin: new PassThrough(), env: {} }), 0);
  assert.match(out, /"network"\) opts="[^"]*--allow-out[^"]*--deny-out[^"]*--clear[^"]*--no-internet/);
  assert.match(out, /"create"\) opts="[^"]*--allow-out[^"]*--deny-out/);
});
