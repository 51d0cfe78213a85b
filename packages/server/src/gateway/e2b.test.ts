// E2B's data plane through the gateway (e2b.ts): routing by E2B's headers under the base URL and by
// host name, what is stripped, streaming, credentials, and hostile input. The agent is a real HTTP
// server on a unix socket that says what it got.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Config } from '../config/index.js';
import { ConnectionLimits } from '../services/connections.js';
import { KeyService } from '../services/keys.js';
import { TokenService } from '../services/tokens.js';
import { SqliteStore } from '../store/sqlite.js';
import { unixDial } from '../testing/fake-node.js';
import { belowPrefix, e2bPath, e2bPort, e2bSandboxId } from './e2b.js';
import { Gateway } from './gateway.js';
import { RouteTable } from './routes.js';

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

function call(port: number, path: string, headers: Record<string, string>, opts: { method?: string; body?: string; host?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method: opts.method ?? 'GET', headers: { ...(opts.host ? { host: opts.host } : {}), ...headers }, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.setTimeout(10_000, () => req.destroy(new Error(`no answer to ${path}`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}

const json = (a: Answer) => JSON.parse(a.body.toString()) as Record<string, unknown>;

describe('gateway: E2B data plane', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-e2b-gw-'));
  const socketPath = join(dir, 'agent.sock');
  const store = SqliteStore.open(':memory:');
  const tokens = new TokenService(join(dir, 'jwt.pem'), 600);
  const routes = new RouteTable();
  let release: () => void = () => undefined;
  const agent: Server = createServer((req, res) => {
    if (req.url === '/e2b/envd/stream') {
      // A server stream: the first message must reach the client before the last is written.
      res.writeHead(200, { 'content-type': 'application/connect+json' });
      res.write('first\n');
      new Promise<void>((r) => (release = r)).then(() => res.end('last\n'), () => undefined);
      return;
    }
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      if (req.url === '/e2b/rt/fs/stat') {
        // envd's Connect calls are the gateway's: it asks the agent's plain routes; the user it
        // acts as comes in the body (here echoed back as the entry's owner).
        const asked = JSON.parse(body) as { authorization: string | null; path: string };
        const entry = { name: 'x', type: 'file', path: asked.path, size: 1, mode: 0o644, permissions: '-rw-r--r--', owner: String(asked.authorization), group: 'root', mtime_ms: 0 };
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ entry }));
        return;
      }
      const seen: Seen = { method: req.method!, url: req.url!, headers: req.headers, body };
      const text = JSON.stringify(seen);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
      res.end(text);
    });
  });
  const woken: string[] = [];
  const base: Config['gateway'] = {
    mode: 'port',
    bindHost: '127.0.0.1',
    publicHostname: '127.0.0.1',
    portMin: 47300,
    portMax: 47399,
    domain: '',
    hostModePort: 0,
    idleTimeoutMs: 5000,
    responseHeadersTimeoutMs: 5000,
  };
  const makeGateway = (config: Config['gateway']) =>
    new Gateway({
      config,
      routes,
      tokens,
      keys,
      portUsed: async () => false,
      connections: new ConnectionLimits({ perClient: 1000, perOrg: 1000, total: 1000 }),
      e2bToken: async (id) => (id === 'sbe2b' ? token : undefined),
      wake: async (id) => {
        woken.push(id);
        routes.setStatus(id, 'running');
      },
      log: () => undefined,
    });
  const keys = new KeyService(store);
  let gateway: Gateway;
  let hostGateway: Gateway;
  let api: Server;
  let apiPort: number;
  let hostPort: number;
  let token: string;
  let otherToken: string;
  let otherOrgKey: string;
  let ownKey: string;

  before(async () => {
    await new Promise<void>((r) => agent.listen(socketPath, () => r()));
    gateway = makeGateway(base);
    // The API port's mount, as buildApp's raw server hands it on.
    api = createServer((req, res) => {
      const rest = belowPrefix(req.url);
      if (rest === undefined) {
        res.writeHead(418).end();
        return;
      }
      gateway.serveE2b(req, res, rest);
    });
    await new Promise<void>((r) => api.listen(0, '127.0.0.1', () => r()));
    apiPort = (api.address() as { port: number }).port;
    hostPort = 47400 + (process.pid % 50);
    hostGateway = makeGateway({ ...base, mode: 'host', domain: 'e2b.test', hostModePort: hostPort });
    await hostGateway.listenHostMode();
    const orgA = await keys.ensureOrg('a');
    const orgB = await keys.ensureOrg('b');
    ownKey = (await keys.createKey(orgA.id, { name: 'a', scopes: ['sandboxes:read', 'sandboxes:write'] })).secret;
    otherOrgKey = (await keys.createKey(orgB.id, { name: 'b', scopes: ['sandboxes:read', 'sandboxes:write'] })).secret;
    routes.set({ sandboxId: 'sbe2b', orgId: orgA.id, status: 'running', dial: unixDial(socketPath), port: null });
    routes.set({ sandboxId: 'sbother', orgId: orgB.id, status: 'running', dial: unixDial(socketPath), port: null });
    token = (await tokens.issue('sbe2b', orgA.id)).token;
    otherToken = (await tokens.issue('sbother', orgB.id)).token;
  });

  after(async () => {
    release();
    await gateway?.closeAll();
    await hostGateway?.closeAll();
    await new Promise((r) => api?.close(r));
    await new Promise((r) => agent.close(r));
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const e2b = (port: number | string, extra: Record<string, string> = {}, id = 'sbe2b') => ({
    'e2b-sandbox-id': id,
    'e2b-sandbox-port': String(port),
    'x-access-token': token,
    ...extra,
  });

  test('49999 reaches the agent under /e2b/ci, the body relayed, E2B headers and credentials stripped', async () => {
    const r = await call(apiPort, '/e2b/sandbox/execute', { ...e2b(49999), 'content-type': 'application/json', 'x-mine': 'kept', 'e2b-traffic-access-token': token }, { method: 'POST', body: '{"code":"1+1"}' });
    assert.equal(r.status, 200, r.body.toString());
    const seen = json(r) as unknown as Seen;
    assert.equal(seen.method, 'POST');
    assert.equal(seen.url, '/e2b/ci/execute');
    assert.equal(seen.body, '{"code":"1+1"}');
    assert.equal(seen.headers['x-mine'], 'kept');
    for (const h of ['x-access-token', 'e2b-traffic-access-token', 'e2b-sandbox-id', 'e2b-sandbox-port', 'authorization', 'x-api-key']) assert.equal(seen.headers[h], undefined, h);
  });

  test('49983 reaches the agent under /e2b/envd, the query kept; the traffic token alone is enough', async () => {
    const r = await call(apiPort, '/e2b/sandbox/files?path=%2Ftmp%2Fa.txt&username=user', e2b(49983));
    assert.equal((json(r) as unknown as Seen).url, '/e2b/envd/files?path=%2Ftmp%2Fa.txt&username=user');
    const h = await call(apiPort, '/e2b/sandbox/health', { 'e2b-sandbox-id': 'sbe2b', 'e2b-sandbox-port': '49983', 'e2b-traffic-access-token': token });
    assert.equal((json(h) as unknown as Seen).url, '/e2b/envd/health');
    const c = await call(apiPort, '/e2b/sandbox/contexts', { 'e2b-sandbox-id': 'SBE2B', 'e2b-sandbox-port': '49999', 'e2b-traffic-access-token': token });
    assert.equal((json(c) as unknown as Seen).url, '/e2b/ci/contexts');
  });

  test("E2B's user (Authorization: Basic) reaches the envd routes only; a Bearer never reaches the agent", async () => {
    const basic = `Basic ${Buffer.from('root:').toString('base64')}`;
    const envd = await call(apiPort, '/e2b/sandbox/filesystem.Filesystem/Stat', { ...e2b(49983), authorization: basic, 'connect-protocol-version': '1', 'content-type': 'application/json' }, { method: 'POST', body: '{"path":"/x"}' });
    assert.equal(envd.status, 200, envd.body.toString());
    assert.deepEqual((json(envd) as { entry: { owner: string; path: string } }).entry.owner, basic);
    const own = await call(hostPort, '/e2b/envd/filesystem.Filesystem/Stat', { authorization: `Bearer ${token}`, 'connect-protocol-version': '1', 'content-type': 'application/json' }, { method: 'POST', body: '{"path":"/x"}', host: 'sbe2b.e2b.test' });
    assert.equal((json(own) as { entry: { owner: string } }).entry.owner, 'null', "the sandbox's own route: the default user");
    // The agent's plain routes are the gateway's wire: no client reaches them, however spelled.
    for (const path of ['/e2b/rt/fs/stat', '/x/../e2b/rt/fs/stat']) {
      const wire = await call(hostPort, path, { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, { method: 'POST', body: '{"path":"/x"}', host: 'sbe2b.e2b.test' });
      assert.equal(wire.status, 404, path);
    }
    assert.equal((json(await call(apiPort, '/e2b/sandbox/contexts', { ...e2b(49999), authorization: basic })) as unknown as Seen).headers.authorization, undefined);
    assert.equal((json(await call(apiPort, '/e2b/sandbox/health', { ...e2b(49983), authorization: 'Basic not base64!' })) as unknown as Seen).headers.authorization, undefined);
    const bearer = await call(apiPort, '/e2b/sandbox/health', { 'e2b-sandbox-id': 'sbe2b', 'e2b-sandbox-port': '49983', authorization: `Bearer ${token}` });
    assert.equal((json(bearer) as unknown as Seen).headers.authorization, undefined);
    // A user's name alone is no credential.
    assert.equal((await call(apiPort, '/e2b/sandbox/health', { 'e2b-sandbox-id': 'sbe2b', 'e2b-sandbox-port': '49983', authorization: basic })).status, 401);
  });

  test('an API key of the owning organization works too; of another organization it is a 401', async () => {
    const own = await call(apiPort, '/e2b/sandbox/health', { 'e2b-sandbox-id': 'sbe2b', 'e2b-sandbox-port': '49983', 'x-api-key': ownKey });
    assert.equal(own.status, 200);
    const other = await call(apiPort, '/e2b/sandbox/health', { 'e2b-sandbox-id': 'sbe2b', 'e2b-sandbox-port': '49983', 'x-api-key': otherOrgKey });
    assert.equal(other.status, 401, other.body.toString());
  });

  test('a server stream flows: its first message arrives before the agent ends it', async () => {
    const got = await new Promise<string>((resolve, reject) => {
      const req = httpRequest(
        { host: '127.0.0.1', port: apiPort, path: '/e2b/sandbox/stream', method: 'POST', headers: { ...e2b(49983), 'content-type': 'application/connect+json' }, agent: false },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => {
            text += c.toString();
            if (text === 'first\n') release();
          });
          res.on('end', () => resolve(text));
        },
      );
      req.on('error', reject);
      req.end();
    });
    assert.equal(got, 'first\nlast\n');
  });

  test('credentials: none, garbage, another sandbox\'s token, an expired one, a revoked key\'s: 401', async () => {
    const no = await call(apiPort, '/e2b/sandbox/health', { 'e2b-sandbox-id': 'sbe2b', 'e2b-sandbox-port': '49983' });
    assert.equal(no.status, 401);
    assert.match(String(json(no).message), /X-Access-Token/);
    assert.equal((await call(apiPort, '/e2b/sandbox/health', e2b(49983, { 'x-access-token': 'garbage' }))).status, 401);
    assert.equal((await call(apiPort, '/e2b/sandbox/health', e2b(49983, { 'x-access-token': otherToken }))).status, 401);
    assert.equal((await call(apiPort, '/e2b/sandbox/health', e2b(49983, { 'x-access-token': token }, 'sbother'))).status, 401);
    const shortLived = new TokenService(join(dir, 'jwt.pem'), 1);
    const expiring = (await shortLived.issue('sbe2b', 'org')).token;
    await new Promise((r) => setTimeout(r, 2100));
    const expired = await call(apiPort, '/e2b/sandbox/health', e2b(49983, { 'x-access-token': expiring }));
    assert.equal(expired.status, 401);
    assert.equal(json(expired).code, 'TOKEN_EXPIRED');
    const keyed = (await tokens.issue('sbe2b', 'org', 'key_revoked_test')).token;
    assert.equal((await call(apiPort, '/e2b/sandbox/health', e2b(49983, { 'x-access-token': keyed }))).status, 200);
    tokens.keysRevoked(['key_revoked_test']);
    assert.equal((await call(apiPort, '/e2b/sandbox/health', e2b(49983, { 'x-access-token': keyed }))).status, 401);
  });

  test('a sandbox that is not there or not running is a 502 (E2B clients: not running); a paused one that wakes is served', async () => {
    const gone = (await tokens.issue('sbgone', 'org')).token;
    const r = await call(apiPort, '/e2b/sandbox/health', e2b(49983, { 'x-access-token': gone }, 'sbgone'));
    assert.equal(r.status, 502);
    assert.equal(json(r).code, 'NOT_FOUND');
    routes.setStatus('sbe2b', 'paused');
    const paused = await call(apiPort, '/e2b/sandbox/health', e2b(49983));
    assert.equal(paused.status, 502);
    assert.equal(json(paused).code, 'SANDBOX_PAUSED');
    const entry = routes.get('sbe2b')!;
    routes.set({ ...entry, status: 'paused', autoResume: true });
    const woke = await call(apiPort, '/e2b/sandbox/health', e2b(49983));
    assert.equal(woke.status, 200);
    assert.deepEqual(woken, ['sbe2b']);
    routes.set({ ...entry, status: 'running', autoResume: false });
  });

  test('Connect RPCs get Connect errors: a unary JSON body, a stream end message with the code', async () => {
    const unary = await call(apiPort, '/e2b/sandbox/process.Process/List', { ...e2b(49983, { 'x-access-token': 'nope' }), 'content-type': 'application/json', 'connect-protocol-version': '1' }, { method: 'POST', body: '{}' });
    assert.equal(unary.status, 401);
    assert.equal(json(unary).code, 'unauthenticated');
    const gone = (await tokens.issue('sbgone', 'org')).token;
    const stream = await call(apiPort, '/e2b/sandbox/process.Process/Start', { ...e2b(49983, { 'x-access-token': gone }, 'sbgone'), 'content-type': 'application/connect+json', 'connect-protocol-version': '1' }, { method: 'POST', body: '' });
    assert.equal(stream.status, 200);
    assert.equal(stream.headers['content-type'], 'application/connect+json');
    assert.equal(stream.body[0], 2, 'an end-of-stream message');
    assert.equal(stream.body.readUInt32BE(1), stream.body.length - 5);
    assert.equal((JSON.parse(stream.body.subarray(5).toString()) as { error: { code: string } }).error.code, 'unavailable');
  });

  test('bad input: missing, garbled or doubled headers, hostile ports and paths are a 400 naming the field', async () => {
    const bad = async (headers: Record<string, string>, path = '/e2b/sandbox/health', field?: string) => {
      const r = await call(apiPort, path, headers);
      assert.equal(r.status, 400, `${JSON.stringify(headers)} ${path}: ${r.status} ${r.body.toString()}`);
      const b = json(r);
      assert.equal(b.code, 'VALIDATION_ERROR');
      if (field) assert.equal(b.field, field);
      assert.ok(!r.body.toString().includes('<script>'));
    };
    await bad({ 'e2b-sandbox-port': '49983', 'x-access-token': token }, undefined, 'e2b-sandbox-id');
    for (const id of ['../sbe2b', 'a b', 'x'.repeat(65), '<script>', 'sbe2b,sbother', '-sb']) await bad(e2b(49983, {}, id), undefined, 'e2b-sandbox-id');
    await bad({ 'e2b-sandbox-id': 'sbe2b', 'x-access-token': token }, undefined, 'e2b-sandbox-port');
    for (const p of ['0', '65536', '-1', '49983abc', '1e3', '0x50', '4998.3', '99999999999', ' ']) await bad(e2b(p), undefined, 'e2b-sandbox-port');
    for (const path of ['/e2b/sandbox/../v1/sandboxes', '/e2b/sandbox/%2e%2e/health', '/e2b/sandbox/a%2fb', '/e2b/sandbox//x', '/e2b/sandbox/a\\b']) await bad(e2b(49999), path);
    // Doubled routing headers (raw, as a client can send them) are not guessed between.
    const doubled = await new Promise<number>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: apiPort, path: '/e2b/sandbox/health', agent: false, headers: [['e2b-sandbox-id', 'sbe2b'], ['e2b-sandbox-id', 'sbother'], ['e2b-sandbox-port', '49983'], ['x-access-token', token]].flat() as unknown as Record<string, string> }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal(doubled, 400);
  });

  test('an app port is a preview: private by default, so no token is a 401', async () => {
    const r = await call(apiPort, '/e2b/sandbox/', { 'e2b-sandbox-id': 'sbe2b', 'e2b-sandbox-port': '3000' });
    assert.equal(r.status, 401);
  });

  test('host mode: 49983-<id> and 49999-<id> reach the agent\'s E2B routes; <id> is the agent as before; the prefix routes by header on any host', async () => {
    const envd = await call(hostPort, '/health', { 'x-access-token': token }, { host: `49983-sbe2b.e2b.test:${hostPort}` });
    assert.equal((json(envd) as unknown as Seen).url, '/e2b/envd/health');
    const ci = await call(hostPort, '/contexts', { 'e2b-traffic-access-token': token, 'e2b-sandbox-id': 'sbe2b', 'e2b-sandbox-port': '49999' }, { host: `49999-sbe2b.e2b.test` });
    assert.equal((json(ci) as unknown as Seen).url, '/e2b/ci/contexts');
    const plain = await call(hostPort, '/health', { authorization: `Bearer ${token}` }, { host: 'sbe2b.e2b.test' });
    assert.equal((json(plain) as unknown as Seen).url, '/health');
    const byHeader = await call(hostPort, '/e2b/sandbox/execute', e2b(49999), { host: 'e2b.test', method: 'POST', body: '{}' });
    assert.equal((json(byHeader) as unknown as Seen).url, '/e2b/ci/execute');
    const noToken = await call(hostPort, '/health', {}, { host: `49983-sbe2b.e2b.test` });
    assert.equal(noToken.status, 401);
    const traversal = await call(hostPort, '/../health', { 'x-access-token': token }, { host: `49983-sbe2b.e2b.test` });
    assert.equal(traversal.status, 400);
  });

  /** What E2B's client puts in uploadUrl()/downloadUrl() (sandbox/signature.ts of the client, re-done here). */
  const sign = (path: string, op: 'read' | 'write', user: string, tok: string, exp?: number) =>
    `v1_${createHash('sha256').update(`${path}:${op}:${user}:${tok}${exp === undefined ? '' : `:${exp}`}`).digest('base64').replace(/=+$/, '')}`;

  test('signed file URLs: checked against the sandbox\'s kept token, the signature stripped; tampered, expired, wrong verb: 401', async () => {
    const q = (params: Record<string, string>) => `/files?${new URLSearchParams(params).toString()}`;
    const route = { 'e2b-sandbox-id': 'sbe2b', 'e2b-sandbox-port': '49983' };
    const get = await call(apiPort, `/e2b/sandbox${q({ path: '/tmp/a.txt', signature: sign('/tmp/a.txt', 'read', '', token) })}`, route);
    assert.equal(get.status, 200, get.body.toString());
    assert.equal((json(get) as unknown as Seen).url, '/e2b/envd/files?path=%2Ftmp%2Fa.txt');
    const exp = Math.floor(Date.now() / 1000) + 60;
    const up = await call(apiPort, `/e2b/sandbox${q({ username: 'root', path: 'b.txt', signature: sign('b.txt', 'write', 'root', token, exp), signature_expiration: String(exp) })}`, route, { method: 'POST', body: 'x' });
    assert.equal((json(up) as unknown as Seen).url, '/e2b/envd/files?username=root&path=b.txt');
    // By host name, as a browser opens it (no header at all).
    const host = await call(hostPort, q({ path: '/tmp/a.txt', signature: sign('/tmp/a.txt', 'read', '', token) }), {}, { host: '49983-sbe2b.e2b.test' });
    assert.equal((json(host) as unknown as Seen).url, '/e2b/envd/files?path=%2Ftmp%2Fa.txt');
    const refused = async (path: string, method = 'GET', id = 'sbe2b') => {
      const r = await call(apiPort, `/e2b/sandbox${path}`, { ...route, 'e2b-sandbox-id': id }, { method });
      assert.equal(r.status, 401, `${method} ${path}: ${r.status} ${r.body.toString()}`);
    };
    await refused(q({ path: '/etc/shadow', signature: sign('/tmp/a.txt', 'read', '', token) }));
    await refused(q({ path: 'b.txt', signature: sign('b.txt', 'read', '', token) }), 'POST');
    await refused(q({ path: 'b.txt', signature: sign('b.txt', 'read', '', token) }), 'DELETE');
    await refused(q({ path: 'a', username: 'root', signature: sign('a', 'read', '', token) }));
    const past = Math.floor(Date.now() / 1000) - 1;
    await refused(q({ path: 'a', signature: sign('a', 'read', '', token, past), signature_expiration: String(past) }));
    await refused(q({ path: 'a', signature: sign('a', 'read', '', token, exp) }), 'GET');
    await refused(q({ path: 'a', signature: sign('a', 'read', '', token, exp), signature_expiration: `${exp}x` }));
    await refused(`${q({ path: 'a', signature: sign('a', 'read', '', token) })}&signature=v1_x`);
    await refused(q({ path: 'a', signature: sign('a', 'read', '', otherToken) }));
    await refused(q({ path: 'a', signature: sign('a', 'read', '', otherToken) }), 'GET', 'sbother');
    await refused(q({ path: 'a', signature: '' }));
  });

  test('helpers: ids, ports, paths and the prefix', () => {
    assert.equal(e2bSandboxId(' SBabc '), 'sbabc');
    assert.equal(e2bPort('49983'), 49983);
    assert.deepEqual(e2bPath(49983, ''), { path: '/e2b/envd/', app: false });
    assert.deepEqual(e2bPath(8080, '/a?b=1'), { path: '/a?b=1', app: true });
    assert.equal(belowPrefix('/e2b/sandbox'), '');
    assert.equal(belowPrefix('/e2b/sandbox?x=1'), '/?x=1');
    assert.equal(belowPrefix('/e2b/sandboxes'), undefined);
    assert.equal(belowPrefix('/v1/sandboxes'), undefined);
  });
});
