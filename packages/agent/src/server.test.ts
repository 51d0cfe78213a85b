import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { AddressInfo } from 'node:net';
import { setLogFile } from './log.js';
import { AgentStats } from './metrics/stats.js';
import { ServiceError } from './proto.js';
import { createAgentServer } from './server.js';

const dir = mkdtempSync(join(tmpdir(), 'agent-server-test-'));
const logFile = join(dir, 'agent.log');
let base = '';
const server = createAgentServer(new AgentStats(), [
  {
    method: 'GET',
    path: '/bug',
    handler: () => {
      const o = JSON.parse('null') as { field: string };
      return o.field;
    },
  },
  {
    method: 'GET',
    path: '/outage',
    handler: () => {
      throw new ServiceError('RUNTIME_ERROR', 'could not start the kernel; try again').withDetail('spawn /usr/bin/python3 EAGAIN');
    },
  },
  { method: 'GET', path: '/mistake', handler: () => Promise.reject(new ServiceError('FILE_NOT_FOUND', '/nope: no such file', { path: '/nope' })) },
]);

before(async () => {
  setLogFile(logFile);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

test("the agent renders errors as the other servers do: a bug is a 500 with an incident id in the agent's log, nothing of it in the body", async () => {
  const res = await fetch(`${base}/bug`, { headers: { 'x-request-id': 'req-bug' } });
  assert.equal(res.status, 500);
  const body = (await res.json()) as Record<string, unknown>;
  assert.equal(body.code, 'INTERNAL_ERROR');
  assert.equal(body.request_id, 'req-bug');
  assert.match(String(body.incident_id), /^inc_[0-9a-f]{16}$/);
  assert.ok(!/field|null|TypeError/.test(JSON.stringify(body)), JSON.stringify(body));
  const log = readFileSync(logFile, 'utf8');
  assert.match(log, new RegExp(`GET /bug: incident ${String(body.incident_id)} \\(bug\\) request req-bug: TypeError`));
});

test('an outage is a 503 with retry_after, its detail only in the log; a mistake is its 4xx', async () => {
  const res = await fetch(`${base}/outage`);
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '1');
  const body = (await res.json()) as Record<string, unknown>;
  assert.deepEqual([body.code, body.message, body.retry_after], ['RUNTIME_ERROR', 'could not start the kernel; try again', 1]);
  assert.ok(!JSON.stringify(body).includes('EAGAIN'));
  assert.match(readFileSync(logFile, 'utf8'), new RegExp(`incident ${String(body.incident_id)} \\(outage\\).*EAGAIN`));
  const miss = await fetch(`${base}/mistake`);
  assert.equal(miss.status, 404);
  const m = (await miss.json()) as Record<string, unknown>;
  assert.deepEqual([m.code, m.path, m.incident_id], ['FILE_NOT_FOUND', '/nope', undefined]);
});
