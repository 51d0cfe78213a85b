// The node API against hostile callers, without containers: tokens control never signs, hostile CONNECTs and
// bodies of the wrong shape, against the node API in front of a FakeRuntime (or a bare agent
// socket of our own), over real HTTP on loopback.
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KeyObject } from 'node:crypto';
import { SignJWT } from 'jose';
import type { FastifyInstance } from 'fastify';
import { signingKeyFromPem } from '../runtime/cluster-auth.js';
import type { Runtime } from '../runtime/types.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { nodeOver } from '../testing/fake-node.js';
import { nodeApi } from './node-api.js';

/** Control's key pair: the node under attack holds the public key only, as every node does. */
const { signer, verifier, signingPem, verifyPem } = testClusterKeys();
const key = signingKeyFromPem(signingPem);
const now = () => Math.floor(Date.now() / 1000);

/** Raw bytes to the server; what it answers until it closes, or `waitMs` passes. */
function raw(port: number, bytes: string, waitMs = 2000): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    let text = '';
    s.setEncoding('latin1');
    s.on('data', (c: string) => (text += c));
    s.on('error', () => undefined);
    const t = setTimeout(() => {
      s.destroy();
      resolve({ text, closed: false });
    }, waitMs);
    s.on('close', () => {
      clearTimeout(t);
      resolve({ text, closed: true });
    });
    s.write(bytes);
  });
}

const statusOf = (text: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);

describe('node API against hostile callers: auth, relay, bodies', { timeout: 120_000 }, () => {
  let dir: string;
  let fake: FakeRuntime;
  let app: FastifyInstance;
  let port: number;
  const logged: string[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-node-red-'));
    fake = new FakeRuntime({ socketDir: join(dir, 's') });
    await fake.setupHost();
    app = nodeApi({ node: nodeOver(fake, 'node-r'), byReference: false, auth: verifier, log: (m) => logged.push(m), exportsDir: join(dir, 'exports') });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });

  after(async () => {
    await app?.close();
    await fake?.dispose();
    await rm(dir, { recursive: true, force: true });
  });

  const get = async (headers: Record<string, string>, path = '/node/v1/sandboxes') => (await fetch(`http://127.0.0.1:${port}${path}`, { headers })).status;
  const sign = (over: (j: SignJWT) => SignJWT, alg = 'EdDSA', k: KeyObject | Uint8Array = key) => over(new SignJWT({}).setProtectedHeader({ alg })).sign(k);
  /** The public key's PEM as an HMAC secret: what any node (or anyone who read its config) has. */
  const publicPem = new TextEncoder().encode(verifyPem);

  test('tokens control never signs are refused; the lifetime is the verifier\'s, not the token\'s', async () => {
    const good = (j: SignJWT) => j.setIssuer('sandboxd-control').setAudience('sandboxd-node:node-r').setIssuedAt().setExpirationTime('60s');
    assert.equal(await get({ authorization: `Bearer ${await sign(good)}` }), 200, 'the control case');
    const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const none = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ iss: 'sandboxd-control', aud: 'sandboxd-node:node-r', iat: now(), exp: now() + 60 })}.`;
    const cases: Array<[string, string]> = [
      ['alg none', none],
      ['HS256 with the public key as the secret (algorithm confusion)', await sign(good, 'HS256', publicPem)],
      ['HS512 with the public key as the secret', await sign(good, 'HS512', publicPem)],
      ['another issuer', await sign((j) => good(j).setIssuer('sandboxd-node'))],
      ['an audience list with ours missing', await sign((j) => good(j).setAudience(['sandboxd-node:node-x']))],
      ['the audience prefix only', await sign((j) => good(j).setAudience('sandboxd-node:'))],
      ['no expiry at all', await sign((j) => j.setIssuer('sandboxd-control').setAudience('sandboxd-node:node-r').setIssuedAt())],
      ['no iat, a year of life', await sign((j) => j.setIssuer('sandboxd-control').setAudience('sandboxd-node:node-r').setExpirationTime('365d'))],
      ['iat two minutes ago, a year of life', await sign((j) => good(j).setIssuedAt(now() - 120).setExpirationTime('365d'))],
      ['iat in the future', await sign((j) => good(j).setIssuedAt(now() + 3600).setExpirationTime(now() + 3660))],
      ['a signature of another key pair', await sign(good, 'EdDSA', signingKeyFromPem(testClusterKeys().signingPem))],
      ['the signature cut', (await sign(good)).slice(0, -4)],
    ];
    for (const [what, token] of cases) assert.equal(await get({ authorization: `Bearer ${token}` }), 401, what);
  });

  test('no route and no relay without a token; not in the query, not by Proxy-Authorization on plain routes', async () => {
    const token = await signer.tokenFor('node-r');
    assert.equal(await get({}, `/node/v1/sandboxes?token=${token}`), 401, 'a token in the query counts for nothing');
    assert.equal(await get({ 'proxy-authorization': `Bearer ${token}` }), 401, 'Proxy-Authorization is for CONNECT only');
    assert.equal(await get({}, '/no/such/route'), 401, 'an unknown route says nothing before the token');
    assert.equal(await get({}, '/node/v1/oom-events'), 401);
    assert.equal(await get({ authorization: `Basic ${Buffer.from(`x:${token}`).toString('base64')}` }), 401);
    assert.equal(await get({ authorization: `Bearer ${'a'.repeat(20_000)}` }), 431, 'very long headers stop at the parser');
    // CONNECT: a garbage Proxy-Authorization is not rescued by a good Authorization, and vice versa a good one works.
    const c1 = await raw(port, `CONNECT x1.agent:1 HTTP/1.1\r\nhost: x1.agent:1\r\nproxy-authorization: Bearer junk\r\nauthorization: Bearer ${token}\r\n\r\n`);
    assert.equal(statusOf(c1.text), 401);
    const c2 = await raw(port, 'CONNECT x1.agent:1 HTTP/1.1\r\nhost: x1.agent:1\r\n\r\n');
    assert.equal(statusOf(c2.text), 401);
    for (const m of logged) assert.ok(!m.includes(token), 'a token is never logged');
  });

  test("a snapshot's export: max_bytes checked, an unknown sandbox NOT_FOUND; a refusal and a completed export leave no copy on the node", async () => {
    const token = await signer.tokenFor('node-r');
    const post = async (id: string, body: unknown) => {
      const r = await fetch(`http://127.0.0.1:${port}/node/v1/sandboxes/${id}/layer`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return { status: r.status, body: r.headers.get('content-type')?.includes('json') ? ((await r.json()) as { code?: string }) : (await r.arrayBuffer(), {}) };
    };
    for (const maxBytes of ['1', -1, 1.5, null, 2 ** 60]) assert.equal((await post('x1', { max_bytes: maxBytes })).body.code, 'VALIDATION_ERROR', JSON.stringify(maxBytes));
    assert.equal((await post('nosuch', {})).body.code, 'NOT_FOUND');
    await fake.create({ id: 'exp1', lowerDirs: [dir], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 }, internetAccess: false, hostname: 'exp1', env: {} });
    try {
      await fake.writeFile('exp1', '/root/a.txt', 'some bytes');
      assert.equal((await post('exp1', { max_bytes: 1 })).body.code, 'LIMIT_EXCEEDED');
      const ok = await post('exp1', {});
      assert.equal(ok.status, 200);
      // Removed as the answer ends (just after the client has it all).
      let left = await readdir(join(dir, 'exports'));
      for (let i = 0; i < 40 && left.length > 0; i++) left = await new Promise((r) => setTimeout(r, 50)).then(() => readdir(join(dir, 'exports')));
      assert.deepEqual(left, [], 'the copy is removed once sent');
    } finally {
      await fake.destroy('exp1');
    }
  });

  test('a refused CONNECT does not keep its connection open for as long as the client likes', async () => {
    // A node of its own: fetch's kept-alive connections to the other one would count too.
    const lone = nodeApi({ node: nodeOver(fake, 'node-r'), byReference: false, auth: verifier });
    await lone.listen({ host: '127.0.0.1', port: 0 });
    const socks: Socket[] = [];
    try {
      for (let i = 0; i < 20; i++) {
        // A client that never closes its side (allowHalfOpen: a FIN from the node does not close it).
        const s = connect({ port: (lone.server.address() as AddressInfo).port, host: '127.0.0.1', allowHalfOpen: true });
        s.on('error', () => undefined);
        s.resume();
        s.write('CONNECT x1.agent:1 HTTP/1.1\r\nhost: x1.agent:1\r\nproxy-authorization: Bearer junk\r\n\r\n');
        socks.push(s);
      }
      await sleep(1500);
      const open = await new Promise<number>((resolve, reject) => lone.server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
      assert.equal(open, 0, 'every refused CONNECT is closed by the node, whatever the client does');
    } finally {
      for (const s of socks) s.destroy();
      await lone.close();
    }
  });

  test('relay targets: only <id>.agent:1; a sandbox that does not exist answers 502 at once', async () => {
    const token = await signer.tokenFor('node-r');
    const connectTo = (target: string) => raw(port, `CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\nproxy-authorization: Bearer ${token}\r\n\r\n`);
    for (const target of ['../../etc.agent:1', 'x1.agent:2', 'x1.agent:1/..', 'X1.agent:1', 'x1%2f..agent:1', '/x1.agent:1', 'x1.agent:1\\t', 'x1.agent', '127.0.0.1:7070']) {
      assert.equal(statusOf((await connectTo(target)).text), 400, target);
    }
    const t0 = performance.now();
    const r = await connectTo('nosuch.agent:1');
    assert.equal(statusOf(r.text), 502);
    assert.ok(performance.now() - t0 < 1000, 'no hang');
  });

  test('bodies of the wrong shape are 400s or 500s, never a crash; the node answers after', async () => {
    const token = await signer.tokenFor('node-r');
    const send = async (method: string, path: string, body: unknown) => {
      const r = await fetch(`http://127.0.0.1:${port}${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
      return r.status;
    };
    const bad: Array<[string, string, unknown]> = [
      ['PUT', '/node/v1/sandboxes/b1', { id: 'b2' }],
      ['PUT', '/node/v1/sandboxes/b1', 'null'],
      ['PUT', '/node/v1/sandboxes/b1', '{"id":'],
      ['PUT', '/node/v1/sandboxes/b1', [1, 2]],
      ['PUT', '/node/v1/sandboxes/b1', { id: 'b1' }],
      ['PUT', '/node/v1/sandboxes/b1', { id: 'b1', lowerDirs: 'x', resources: 'y', hostname: {}, env: 5 }],
      ['PUT', '/node/v1/sandboxes/b1', { id: 'b1', lowerDirs: [dir], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 }, hostname: 'b1', env: {}, internetAccess: true, egress: { internet: true, allow: ['*'], deny: 7 } }],
      ['PUT', '/node/v1/sandboxes/b1/egress', { internet: 'yes', allow: [], deny: [] }],
      ['PUT', '/node/v1/sandboxes/b1/egress', { internet: true, allow: [{}], deny: [] }],
      ['PUT', '/node/v1/sandboxes/b1/egress', { internet: true, allow: ['not a domain!', '10.0.0.0/33'], deny: [] }],
      ['POST', '/node/v1/sandboxes/b1/reset-disk', { disk_gb: '1' }],
      ['POST', '/node/v1/sandboxes/b1/reset-disk', { disk_gb: 1e308 * 10 }],
      ['POST', '/node/v1/statuses', { ids: 'b1' }],
      ['POST', '/node/v1/statuses', { ids: ['../x'] }],
      ['POST', '/node/v1/statuses', { ids: Array.from({ length: 100_001 }, (_, i) => `s${i}`) }],
      ['POST', '/node/v1/sandboxes/b1/pause', '{"__proto__":{"x":1}}'],
    ];
    for (const [method, path, body] of bad) {
      const st = await send(method, path, body);
      assert.ok(st === 400 || st === 404 || st === 413 || st === 500, `${method} ${path} ${JSON.stringify(body).slice(0, 120)} → ${st}`);
    }
    // 100k well-formed ids fit the body limit and are answered.
    const ids = Array.from({ length: 60_000 }, (_, i) => `s${i}`);
    assert.equal(await send('POST', '/node/v1/statuses', { ids }), 200);
    assert.equal(await get({ authorization: `Bearer ${token}` }, '/node/v1/health'), 200, 'still serving');
  });

  test('a relay whose client leaves before the agent answers leaves nothing open on the agent side', async () => {
    // An agent socket of our own, counting its open connections.
    const sock = join(dir, 'agent.sock');
    const open = new Set<Socket>();
    const agent: Server = createServer((s) => {
      open.add(s);
      s.on('error', () => undefined);
      s.on('close', () => open.delete(s));
    });
    await new Promise<void>((r) => agent.listen(sock, r));
    const bare = nodeApi({ node: nodeOver({ agentSocket: () => sock } as unknown as Runtime, 'node-r'), byReference: false, auth: verifier });
    await bare.listen({ host: '127.0.0.1', port: 0 });
    const p = (bare.server.address() as AddressInfo).port;
    try {
      const token = await signer.tokenFor('node-r');
      for (let i = 0; i < 20; i++) {
        const s = connect(p, '127.0.0.1');
        s.on('error', () => undefined);
        s.write(`CONNECT a1.agent:1 HTTP/1.1\r\nhost: a1.agent:1\r\nproxy-authorization: Bearer ${token}\r\n\r\n`);
        // Gone as soon as the request is out: while the node still checks the token.
        setImmediate(() => s.destroy());
      }
      // And clients that stay, then leave after the relay is up.
      for (let i = 0; i < 5; i++) {
        const s = connect(p, '127.0.0.1');
        s.on('error', () => undefined);
        s.write(`CONNECT a1.agent:1 HTTP/1.1\r\nhost: a1.agent:1\r\nproxy-authorization: Bearer ${token}\r\n\r\n`);
        await new Promise((r) => s.once('data', r));
        s.destroy();
      }
      for (let i = 0; i < 40 && open.size > 0; i++) await sleep(50);
      assert.equal(open.size, 0, 'every agent connection closed with its client');
    } finally {
      await bare.close();
      for (const s of open) s.destroy();
      await new Promise((r) => agent.close(r));
    }
  });
});
