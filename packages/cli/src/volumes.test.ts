import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { PassThrough } from 'node:stream';
import { runCli } from './cli.js';
import { parseVolumeMounts } from './commands/volumes.js';

// `sbx volume create|ls|get|rm` and `sbx create --volume`, against a stand-in for the API that records what it was sent.

const received: Array<{ method: string; path: string; query: Record<string, string>; body: unknown }> = [];
let server: Server;
let apiUrl: string;
const vol = { object: 'volume', id: 'vol-0123456789abcdef0123', name: 'data', organization_id: 'o', size_gb: 5, mounted_by: ['sb_1'], created_at: new Date().toISOString() };

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
      if (route === 'POST /v1/volumes') return send(201, { ...vol, mounted_by: [] });
      if (route === 'GET /v1/volumes') return send(200, { object: 'list', data: [vol], url: '/v1/volumes' });
      if (route === 'GET /v1/volumes/data') return send(200, { ...vol, used_bytes: 2048 });
      if (route === 'DELETE /v1/volumes/data') {
        return url.searchParams.get('force') === 'true' ? send(200, { id: vol.id, status: 'deleted' }) : send(409, { error: 'VOLUME_IN_USE', code: 'VOLUME_IN_USE', message: 'volume "data" is mounted by 1 sandbox(es)' });
      }
      if (route === 'POST /v1/sandboxes') {
        return send(201, { object: 'sandbox', id: 'sb_2', status: 'running', template_name: 'base', resources: { vcpu: 1, memory_mb: 512, disk_gb: 1 }, auth_token: 't', volumes: [{ volume_id: vol.id, name: 'data', path: '/data', read_only: false }] });
      }
      send(404, { error: 'ROUTE_NOT_FOUND', code: 'ROUTE_NOT_FOUND', message: route });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  apiUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
after(() => server.close());

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

test('sbx volume create|ls|get|rm and sbx create --volume', async () => {
  assert.deepEqual(parseVolumeMounts(['data:/data', 'cache:/root/.cache:ro']), [{ volume: 'data', path: '/data' }, { volume: 'cache', path: '/root/.cache', readOnly: true }]);
  for (const bad of ['data', 'data:rel', ':/x', 'a:/x:rx']) assert.throws(() => parseVolumeMounts([bad]), /--volume takes/);

  assert.deepEqual(await sbx('volume', 'create', 'data', '--size', '5'), { code: 0, out: `${vol.id}\n`, err: '' });
  assert.deepEqual(received.at(-1)!.body, { name: 'data', size_gb: 5 });
  assert.equal((await sbx('volume', 'create', 'data')).code, 2, '--size is required');
  const ls = await sbx('volume', 'ls');
  assert.match(ls.out, /^NAME\s+ID\s+SIZE\s+MOUNTED BY/);
  assert.match(ls.out, /data\s+vol-0123456789abcdef0123\s+5 GB\s+sb_1/);
  assert.match((await sbx('volume', 'get', 'data')).out, /used:\s+2(\.0)? KiB/);
  const busy = await sbx('volume', 'rm', 'data');
  assert.equal(busy.code, 1);
  assert.match(busy.err, /mounted by 1 sandbox/);
  assert.deepEqual(await sbx('volume', 'rm', 'data', '--force'), { code: 0, out: 'data deleted\n', err: '' });
  assert.equal(received.at(-1)!.query.force, 'true');

  const made = await sbx('create', '-t', 'base', '--volume', 'data:/data', '--volume', 'cache:/c:ro');
  assert.equal(made.code, 0, made.err);
  assert.deepEqual(received.at(-1)!.body, { template_name: 'base', volumes: [{ name: 'data', path: '/data' }, { name: 'cache', path: '/c', read_only: true }] });
  assert.match(made.out, /volumes:\s+data:\/data/);
});
