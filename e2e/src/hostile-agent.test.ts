// A sandbox whose agent is hostile, through a real daemon: what a tenant who took over its agent's
// socket could answer. The daemon runs a stand-in agent bundle (SANDBOXD_AGENT_BUNDLE) that answers
// /health properly until told otherwise, then garbage. The gateway must answer 502 to that one
// client; the daemon must neither crash nor buffer a never-ending answer, at a start or at the
// reconciliation after a restart.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { waitFor } from './agent-support.js';
import { agent, api, createSandbox, crunContainers, startServer, TEST_DATA_DIR, type CreatedSandbox, type TestServer } from './harness.js';

const HOSTILE_AGENT = `
const http = require('node:http');
const fs = require('node:fs');
const fd = Number(process.env.SANDBOXD_AGENT_LISTEN_FD);
// On the sandbox's own disk: it survives stop/start and restarts of the daemon.
const EVIL = '/root/evil-health';
const RAW = {
  '/raw/status000': 'HTTP/1.1 000 Zero\\r\\ncontent-length: 0\\r\\n\\r\\n',
  '/raw/status999': 'HTTP/1.1 999 Big\\r\\ncontent-length: 0\\r\\n\\r\\n',
  '/raw/bad-header': 'HTTP/1.1 200 OK\\r\\nX-Bad: a\\u0000b\\r\\ncontent-length: 0\\r\\n\\r\\n',
  '/raw/garbage': 'this is not HTTP at all\\r\\n\\r\\n',
};
function endless(res) {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.write('{"status":"ok","padding":"');
  const chunk = Buffer.alloc(64 * 1024, 120);
  const pump = () => { while (!res.destroyed && res.write(chunk)); if (!res.destroyed) res.once('drain', pump); };
  pump();
}
http.createServer((req, res) => {
  if (RAW[req.url]) { req.socket.end(RAW[req.url]); return; }
  if (req.url === '/health') return fs.existsSync(EVIL) ? endless(res) : res.end('{"status":"ok"}');
  if (req.url === '/arm') { fs.writeFileSync(EVIL, ''); return res.end('{"armed":true}'); }
  if (req.url === '/endless') return endless(res);
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ ok: true, path: req.url }));
}).listen({ fd });
`;

/** Resident memory of a process, in MiB. */
function rssMib(pid: number): number {
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
}

describe('a hostile agent, through the real daemon and gateway', { timeout: 300_000 }, () => {
  let server: TestServer;
  let sb: CreatedSandbox;
  const bundleDir = join(TEST_DATA_DIR, `hostile-agent-${randomBytes(4).toString('hex')}`);

  before(async () => {
    mkdirSync(bundleDir, { recursive: true, mode: 0o711 });
    writeFileSync(join(bundleDir, 'agent.cjs'), HOSTILE_AGENT, { mode: 0o644 });
    server = await startServer({
      templates: ['base'],
      env: { SANDBOXD_AGENT_BUNDLE: join(bundleDir, 'agent.cjs'), SANDBOXD_WARM_POOL_SIZE: '0', SANDBOXD_AGENT_READY_TIMEOUT_MS: '3000' },
    });
    sb = await createSandbox(server, { timeout_seconds: 600 });
  });

  after(async () => {
    await server?.stop();
    rmSync(bundleDir, { recursive: true, force: true });
  });

  const alive = async () => assert.equal((await api(server, 'GET', '/health')).status, 200, 'the API still answers');

  test('status 000, status 999, a NUL in a header, not HTTP at all: a 502 each; the daemon and the sandbox go on', async () => {
    for (const path of ['/raw/status000', '/raw/status999', '/raw/bad-header', '/raw/garbage']) {
      const r = await agent(sb, 'GET', path);
      assert.equal(r.status, 502, `${path}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.code, 'AGENT_UNAVAILABLE');
      assert.equal(r.body.id, sb.id);
      // An outage: retry_after, and an incident id the daemon's log line carries; no host paths.
      assert.equal(r.body.retry_after, 1);
      assert.match(String(r.body.incident_id), /^inc_[0-9a-f]{16}$/);
      assert.ok(!JSON.stringify(r.body).includes(server.dataDir), JSON.stringify(r.body));
      await waitFor('the incident in the log', async () => (readFileSync(server.logFile, 'utf8').includes(String(r.body.incident_id)) ? true : undefined));
      await alive();
    }
    assert.equal((await agent(sb, 'GET', '/still-here')).body.path, '/still-here');
  });

  test('an endless answer streams to a client that reads it; the daemon does not buffer it', async () => {
    const before = rssMib(server.pid!);
    const res = await fetch(`${sb.publicHost}/endless`, { headers: { authorization: `Bearer ${sb.authToken}` } });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    let read = 0;
    while (read < 512 * 1024 * 1024) read += (await reader.read()).value!.length;
    await reader.cancel();
    assert.ok(rssMib(server.pid!) - before < 150, `daemon grew ${rssMib(server.pid!) - before} MiB while relaying ${read} bytes`);
    await alive();
  });

  test('an endless /health at start: the start fails with a 502 within the ready timeout, memory bounded, nothing keeps running', async () => {
    assert.equal((await agent(sb, 'POST', '/arm')).status, 200);
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`)).status, 200);
    const before = rssMib(server.pid!);
    const t0 = Date.now();
    const start = await api(server, 'POST', `/v1/sandboxes/${sb.id}/start`);
    assert.equal(start.status, 502, JSON.stringify(start.body));
    assert.equal(start.body.code, 'AGENT_UNAVAILABLE');
    assert.match(start.body.message, /did not become ready/);
    assert.ok(Date.now() - t0 < 15_000, `answered after ${Date.now() - t0} ms`);
    assert.ok(rssMib(server.pid!) - before < 100, `daemon grew ${rssMib(server.pid!) - before} MiB`);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).body.status, 'stopped');
    assert.ok(!crunContainers(server.dataDir).includes(sb.id), 'its container was stopped again');
    await alive();
  });

  test('a restart after a "reboot" with such a sandbox running: the daemon comes up and marks it stopped', async () => {
    // A running sandbox whose disk makes its agent answer /health without end.
    const other = await createSandbox(server, { timeout_seconds: 600 });
    assert.equal((await agent(other, 'POST', '/arm')).status, 200);
    await server.kill9();
    // A host reboot: the container is gone, the row says running.
    execFileSync('crun', ['--root', join(server.dataDir, 'crun'), 'delete', '-f', other.id]);
    await server.restart();
    await alive();
    const got = await api(server, 'GET', `/v1/sandboxes/${other.id}`);
    assert.equal(got.body.status, 'stopped', JSON.stringify(got.body));
    const viaGateway = await agent(other, 'GET', '/health');
    assert.equal(viaGateway.status, 409);
    assert.equal(viaGateway.body.code, 'SANDBOX_STOPPED');
    // And again: the next start of the daemon does not trip over it either.
    await server.kill9();
    await server.restart();
    await alive();
  });
});
