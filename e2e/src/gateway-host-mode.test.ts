import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { api, createSandbox, freePort, startServer } from './harness.js';

/** GET through the gateway's single port with a chosen Host header (no DNS needed). */
function viaHost(port: number, host: string, path: string, token?: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host, ...(token ? { authorization: `Bearer ${token}` } : {}) } }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('host-based routing: public_host is http://<id>.<domain>:<port>, routed by the Host header', async () => {
  const gatewayPort = await freePort();
  const server = await startServer({ templates: ['base'], env: { SANDBOXD_GATEWAY_DOMAIN: 'sandboxes.test', SANDBOXD_GATEWAY_PORT: String(gatewayPort) } });
  try {
    const sb = await createSandbox(server);
    assert.equal(sb.publicHost, `http://${sb.id}.sandboxes.test:${gatewayPort}`);
    const ok = await viaHost(gatewayPort, `${sb.id}.sandboxes.test:${gatewayPort}`, '/info', sb.authToken);
    assert.equal(ok.status, 200);
    assert.equal(ok.body.sandbox_id, sb.id);
    const other = await createSandbox(server);
    const cross = await viaHost(gatewayPort, `${other.id}.sandboxes.test`, '/info', sb.authToken);
    assert.equal(cross.status, 401, "a token opens only its own sandbox's host");
    const unknown = await viaHost(gatewayPort, 'nobody.sandboxes.test', '/info', sb.authToken);
    assert.equal(unknown.status, 404);
    const wrongDomain = await viaHost(gatewayPort, `${sb.id}.elsewhere.test`, '/info', sb.authToken);
    assert.equal(wrongDomain.status, 404);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    assert.equal((await viaHost(gatewayPort, `${sb.id}.sandboxes.test`, '/info', sb.authToken)).status, 404, 'a deleted sandbox is gone from the route table');
  } finally {
    await server.stop();
  }
});
