import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import Fastify from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import { createLogger } from '../logging.js';
import { errorHandler } from './errors.js';

/** A Fastify app with the API's error handler, routes that fail in each way, and its log lines. */
async function app() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString('utf8').split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  const a = Fastify({ loggerInstance: createLogger('info', { format: 'json', stream }) });
  a.setErrorHandler(errorHandler);
  a.get('/bug', async () => {
    const o = JSON.parse('{}') as { deep: { field: string } };
    return o.deep.field;
  });
  a.get('/outage', async () => {
    throw new ServiceError('RUNTIME_ERROR', 'the container runtime failed on this sandbox; try again').withDetail('crun: /var/lib/sandboxd/sandboxes/sb_x: EBUSY');
  });
  a.get('/mistake', async () => {
    throw new ServiceError('TEMPLATE_NOT_FOUND', 'template nope not found', { template: 'nope' });
  });
  a.get('/library-4xx', async () => {
    throw Object.assign(new Error('something a library said'), { statusCode: 400 });
  });
  a.post('/json', { schema: { body: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } } }, async () => ({ ok: true }));
  await a.ready();
  return { a, lines };
}

test('a bug in a route: 500 with an incident id that the error log line carries, and nothing of the bug in the body', async () => {
  const { a, lines } = await app();
  const res = await a.inject({ method: 'GET', url: '/bug' });
  assert.equal(res.statusCode, 500);
  const body = res.json<Record<string, unknown>>();
  assert.equal(body.code, 'INTERNAL_ERROR');
  assert.match(String(body.incident_id), /^inc_[0-9a-f]{16}$/);
  assert.ok(!/field|undefined|TypeError|reading/.test(res.body), res.body);
  const line = lines.find((l) => l.incident_id === body.incident_id);
  assert.ok(line, `no log line with ${String(body.incident_id)}: ${JSON.stringify(lines)}`);
  assert.equal(line.level, 'error');
  assert.match(JSON.stringify(line.err), /TypeError/);
  assert.equal(line.reqId, body.request_id);
  await a.close();
});

test('an outage: 503 with retry_after and Retry-After; the detail is in the log line, not the body', async () => {
  const { a, lines } = await app();
  const res = await a.inject({ method: 'GET', url: '/outage' });
  assert.equal(res.statusCode, 503);
  assert.equal(res.headers['retry-after'], '1');
  const body = res.json<Record<string, unknown>>();
  assert.deepEqual([body.code, body.retry_after, body.message], ['RUNTIME_ERROR', 1, 'the container runtime failed on this sandbox; try again']);
  assert.ok(!res.body.includes('/var/lib'), res.body);
  const line = lines.find((l) => l.incident_id === body.incident_id);
  assert.equal(line?.level, 'warn');
  assert.match(String(line?.detail), /EBUSY/);
  await a.close();
});

test("a user's mistake stays a 4xx of its code and logs no incident; a library's 4xx is no validation error of the client", async () => {
  const { a, lines } = await app();
  const res = await a.inject({ method: 'GET', url: '/mistake' });
  assert.equal(res.statusCode, 404);
  assert.deepEqual(res.json(), { template: 'nope', error: 'Template not found', message: 'template nope not found', code: 'TEMPLATE_NOT_FOUND', request_id: res.json<{ request_id: string }>().request_id });
  const bad = await a.inject({ method: 'POST', url: '/json', payload: { n: 'x' } });
  assert.equal(bad.statusCode, 400);
  assert.equal(bad.json<{ code: string }>().code, 'VALIDATION_ERROR');
  const broken = await a.inject({ method: 'POST', url: '/json', headers: { 'content-type': 'application/json' }, payload: '{' });
  assert.equal(broken.json<{ code: string }>().code, 'VALIDATION_ERROR');
  assert.equal(lines.filter((l) => l.incident_id).length, 0);
  const lib = await a.inject({ method: 'GET', url: '/library-4xx' });
  assert.equal(lib.statusCode, 500, lib.body);
  assert.ok(!lib.body.includes('something a library said'));
  await a.close();
});

test('a database that cannot be reached is a 503 STORE_UNAVAILABLE with Retry-After, its cause in the log only', async () => {
  const { StoreUnavailableError } = await import('../store/errors.js');
  const a = Fastify();
  a.setErrorHandler(errorHandler);
  a.get('/db', async () => {
    throw new StoreUnavailableError('connect ECONNREFUSED 10.1.2.3:5432 (user sandboxd)');
  });
  const res = await a.inject({ method: 'GET', url: '/db' });
  assert.equal(res.statusCode, 503);
  assert.equal(res.headers['retry-after'], '2');
  const body = res.json() as { code: string; message: string; retry_after: number };
  assert.equal(body.code, 'STORE_UNAVAILABLE');
  assert.equal(body.retry_after, 2);
  assert.doesNotMatch(res.body, /10\.1\.2\.3|sandboxd\)/, 'the connection details stay in the log');
  await a.close();
});
