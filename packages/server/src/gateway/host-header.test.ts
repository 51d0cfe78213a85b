import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { SqliteStore } from '../store/sqlite.js';
import { ConnectionLimits } from '../services/connections.js';
import { KeyService } from '../services/keys.js';
import { RouteTable } from './routes.js';
import type { RouteEntry } from '../services/routes.js';
import { unixDial } from '../testing/fake-node.js';
import { TokenService } from '../services/tokens.js';
import { Gateway, previewCookieName } from './gateway.js';

function get(port: number, host: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: '/', headers: { host, ...headers }, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.setTimeout(10_000, () => req.destroy(new Error('no answer')));
    req.on('error', reject);
    req.end();
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createNetServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), 'sbd-host-header-'));
const socketPath = join(dir, 'agent.sock');
const agent: Server = createServer((_req, res) => res.end('ok'));
const tokens = new TokenService(join(dir, 'jwt.pem'), 600);
const loads: string[] = [];
// As in a cluster: every route comes from the store (the loader), by the id the Host names.
const rows: Record<string, Omit<RouteEntry, 'dial'>> = {
  sbvictim: { sandboxId: 'sbvictim', orgId: 'org_a', status: 'running', port: null },
  sbother: { sandboxId: 'sbother', orgId: 'org_b', status: 'running', port: null },
};
const routes = new RouteTable({
  loader: async (id) => {
    loads.push(id);
    const row = rows[id];
    return row && { ...row, dial: unixDial(socketPath) };
  },
  hearing: () => true,
});
let gateway: Gateway;
let port = 0;

before(async () => {
  await new Promise<void>((r) => agent.listen(socketPath, () => r()));
  port = await freePort();
  gateway = new Gateway({
    config: { mode: 'host', bindHost: '127.0.0.1', publicHostname: '127.0.0.1', portMin: 0, portMax: 0, domain: 'sandboxes.test', hostModePort: port, idleTimeoutMs: 5000, responseHeadersTimeoutMs: 5000 },
    routes,
    tokens,
    keys: new KeyService(SqliteStore.open(':memory:')),
    portUsed: async () => false,
    connections: new ConnectionLimits({ perClient: 1000, perOrg: 1000, total: 1000 }),
    log: () => undefined,
  });
  await gateway.listenHostMode();
});

after(async () => {
  await gateway.closeAll();
  await new Promise((r) => agent.close(r));
  rmSync(dir, { recursive: true, force: true });
});

test('host mode in a cluster: Host header tricks open no sandbox but the one the credential is for', async () => {
  const victim = (await tokens.issue('sbvictim', 'org_a')).token;
  const auth = { authorization: `Bearer ${victim}` };
  assert.equal(await get(port, 'sbvictim.sandboxes.test', auth), 200);
  assert.equal(await get(port, `SBVICTIM.Sandboxes.TEST:${port}`, auth), 200, 'case and a port do not matter');
  for (const host of ['sbvictim.sandboxes.test.', 'sbvictim.evil.sandboxes.test', 'sbvictim.sandboxes.test.evil.example', 'sbvictim.sandboxes.tes', 'sandboxes.test', '.sandboxes.test', 'sbvictim-3000.sandboxes.test', '[::1]', '']) {
    assert.equal(await get(port, host, auth), 404, `Host: ${JSON.stringify(host)}`);
  }
  // Another organization's sandbox, with the victim's token, by every way of naming it.
  for (const host of ['sbother.sandboxes.test', 'SBOTHER.sandboxes.test:1', `sbother.sandboxes.test:${port}`]) {
    assert.equal(await get(port, host, auth), 401, `Host: ${host}`);
  }
  // Its previews: the token in the preview header, or the victim's preview session under the other's cookie name.
  const session = (await tokens.issuePreview('session', 'sbvictim', 3000, false, 600)).token;
  assert.equal(await get(port, '3000-sbother.sandboxes.test', { 'x-sandboxd-token': victim }), 401);
  assert.equal(await get(port, '3000-sbother.sandboxes.test', { cookie: `${previewCookieName('sbother', 3000)}=${session}` }), 401);
  assert.equal(await get(port, '3001-sbvictim.sandboxes.test', { cookie: `${previewCookieName('sbvictim', 3001)}=${session}` }), 401, 'a session is for its one port');
  assert.equal(await get(port, '99999-sbvictim.sandboxes.test', { 'x-sandboxd-token': victim }), 404);
  // Nothing that is not an id reached the store.
  assert.ok(loads.every((id) => /^[a-z0-9_-]{1,64}$/.test(id)), loads.join(', '));
});
