// Preview URLs against a fake agent that opens every tunnel (as a hostile one may) and answers
// each request on it as a keep-alive app: what a tenant can make the gateway hold, and what one
// tenant's page can do to another's preview.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SqliteStore } from '../store/sqlite.js';
import { ConnectionLimits } from '../services/connections.js';
import { KeyService } from '../services/keys.js';
import { RouteTable } from './routes.js';
import { unixDial } from '../testing/fake-node.js';
import { TokenService } from '../services/tokens.js';
import type { Config } from '../config/index.js';
import { Gateway, previewCookieName } from './gateway.js';

/** Answers 101 to every tunnel, then `200 ok` (keep-alive) to every request on it. */
class TunnelAgent {
  readonly server: Server;
  readonly sockets = new Set<Socket>();
  constructor(readonly path: string) {
    this.server = createServer((s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
      s.on('error', () => undefined);
      let buf = '';
      let tunnel = false;
      s.on('data', (d) => {
        buf += d.toString('latin1');
        for (let end = buf.indexOf('\r\n\r\n'); end >= 0; end = buf.indexOf('\r\n\r\n')) {
          const head = buf.slice(0, end);
          buf = buf.slice(end + 4);
          if (!tunnel) {
            tunnel = true;
            s.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: sandboxd-tcp\r\n\r\n');
            continue;
          }
          const close = /\r\nconnection: *close/i.test(head);
          s.write(`HTTP/1.1 200 OK\r\ncontent-length: 2\r\n${close ? 'connection: close\r\n' : ''}\r\nok`);
          if (close) s.end();
        }
      });
    });
  }
  listen(): Promise<void> {
    return new Promise((r) => this.server.listen(this.path, () => r()));
  }
  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

function get(port: number, host: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: '/', headers: { host, ...headers }, agent: false }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error('no answer')));
    req.on('error', reject);
    req.end();
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

describe('preview URLs: what a tenant can make the gateway hold, and do to another tenant', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-preview-'));
  const socketPath = join(dir, 'agent.sock');
  const agent = new TunnelAgent(socketPath);
  const store = SqliteStore.open(':memory:');
  const tokens = new TokenService(join(dir, 'jwt.pem'), 600);
  const routes = new RouteTable();
  const gateways: Gateway[] = [];
  const make = (config: Config['gateway']) => {
    const g = new Gateway({
      config,
      routes,
      tokens,
      keys: new KeyService(store),
      portUsed: async () => false,
      connections: new ConnectionLimits({ perClient: 1000, perOrg: 1000, total: 1000 }),
      log: () => undefined,
    });
    gateways.push(g);
    return g;
  };
  const base: Config['gateway'] = {
    mode: 'port',
    bindHost: '127.0.0.1',
    publicHostname: '127.0.0.1',
    portMin: 47200,
    portMax: 47299,
    domain: '',
    hostModePort: 0,
    idleTimeoutMs: 5000,
    responseHeadersTimeoutMs: 5000,
  };

  before(async () => {
    await agent.listen();
    routes.set({ sandboxId: 'sbvictim', orgId: 'org_a', status: 'running', dial: unixDial(socketPath), port: null });
  });
  after(async () => {
    for (const g of gateways) await g.closeAll();
    await agent.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("port mode: a cookie of the same name that another preview's page set (same host, another port) does not lock the user out", async () => {
    const g = make(base);
    const gw = (await g.openPreview('sbvictim', 3000, false, null))!;
    const session = (await tokens.issuePreview('session', 'sbvictim', 3000, true, 600)).token;
    const name = previewCookieName('sbvictim', 3000);
    assert.equal((await get(gw, `127.0.0.1:${gw}`, { cookie: `${name}=${session}` })).status, 200);
    // A page on 127.0.0.1:{another gateway port} runs document.cookie = 'sbxp_sbvictim_3000=x; path=/app':
    // the browser sends it first (its path is longer), then the user's own.
    const r = await get(gw, `127.0.0.1:${gw}`, { cookie: `${name}=tossed; ${name}=${session}` });
    assert.equal(r.status, 200, r.body);
    // One per path segment (/a, /a/b, ...): the user's own (Path=/) still comes last.
    const many = Array.from({ length: 20 }, (_, i) => `${name}=tossed${i}`).join('; ');
    assert.equal((await get(gw, `127.0.0.1:${gw}`, { cookie: `${many}; ${name}=${session}` })).status, 200);
    assert.equal((await get(gw, `127.0.0.1:${gw}`, { cookie: `${name}=tossed` })).status, 401);
    await g.close('sbvictim');
  });

  test("port mode: a page of another organization's preview (same site) cannot use the session cookie; the same sandbox's previews can", async () => {
    const g = make(base);
    const gw = (await g.openPreview('sbvictim', 3000, false, null))!;
    const sibling = (await g.openPreview('sbvictim', 5173, true, null))!;
    routes.set({ sandboxId: 'sbother', orgId: 'org_b', status: 'running', dial: unixDial(socketPath), port: null });
    const evil = (await g.openPreview('sbother', 8080, true, null))!;
    const session = (await tokens.issuePreview('session', 'sbvictim', 3000, true, 600)).token;
    const cookie = `${previewCookieName('sbvictim', 3000)}=${session}`;
    const at = (origin?: string) => get(gw, `127.0.0.1:${gw}`, origin ? { cookie, origin } : { cookie });
    assert.equal((await at()).status, 200);
    assert.equal((await at(`http://127.0.0.1:${gw}`)).status, 200, 'its own page');
    assert.equal((await at(`http://127.0.0.1:${sibling}`)).status, 200, "the same sandbox's frontend");
    const r = await at(`http://127.0.0.1:${evil}`);
    assert.equal(r.status, 403, r.body);
    assert.equal((await at('null')).status, 403);
    await g.close('sbvictim');
    await g.close('sbother');
    routes.delete('sbother');
  });

  test('port mode: asks for the same port at once share one listener, and the close of the sandbox closes it', async () => {
    // A range of its own: another file's gateways may listen in the shared one meanwhile.
    const range = { ...base, portMin: 47340, portMax: 47359 };
    const g = make(range);
    const ports = await Promise.all(Array.from({ length: 5 }, () => g.openPreview('sbvictim', 4000, false, null)));
    assert.equal(new Set(ports).size, 1, `one port: ${ports.join(', ')}`);
    const listening = async (port: number) =>
      new Promise<boolean>((resolve) => {
        const c = connect(port, '127.0.0.1');
        c.once('connect', () => (c.destroy(), resolve(true)));
        c.once('error', () => resolve(false));
      });
    assert.equal(await listening(ports[0]!), true);
    await g.close('sbvictim');
    for (let p = range.portMin; p <= range.portMax; p++) assert.equal(await listening(p), false, `nothing listens on ${p} after the close`);
  });

  test('host mode: ports nobody opened a preview of keep no pooled tunnels (a token holder could hold one per port, 65 535 of them)', async () => {
    const hostModePort = await freePort();
    const g = make({ ...base, mode: 'host', domain: 'sandboxes.test', hostModePort });
    await g.listenHostMode();
    const token = (await tokens.issue('sbvictim', 'org_a')).token;
    const before = agent.sockets.size;
    for (let p = 20_000; p < 20_050; p++) {
      const r = await get(hostModePort, `${p}-sbvictim.sandboxes.test`, { 'x-sandboxd-token': token });
      assert.equal(r.status, 200, r.body);
    }
    // Give the connections a moment to close.
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(agent.sockets.size - before <= 8, `${agent.sockets.size - before} tunnels held open for 50 ports`);
    // An opened preview's port pools its tunnels, as before.
    await g.openPreview('sbvictim', 8000, false, null);
    for (let i = 0; i < 3; i++) assert.equal((await get(hostModePort, `8000-sbvictim.sandboxes.test`, { 'x-sandboxd-token': token })).status, 200);
    await g.close('sbvictim');
  });
});
