import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ServiceError } from './errors.js';
import { describeCause, isProgrammingError, renderError } from './render-error.js';

test("a user's mistake is rendered as thrown, with no incident", () => {
  const r = renderError(new ServiceError('FILE_NOT_FOUND', '/x: no such file', { path: '/x' }, { 'x-extra': '1' }), 'req_1');
  assert.equal(r.status, 404);
  assert.deepEqual(r.body, { path: '/x', error: 'File not found', message: '/x: no such file', code: 'FILE_NOT_FOUND', request_id: 'req_1' });
  assert.deepEqual(r.headers, { 'x-extra': '1' });
  assert.equal(r.incident, undefined);
});

test('507 INSUFFICIENT_STORAGE is rendered as thrown, like a quota: no retry_after, no incident (waiting does not free room)', () => {
  const r = renderError(new ServiceError('INSUFFICIENT_STORAGE', 'no room', { requested_bytes: 1 }), 'req_2');
  assert.equal(r.status, 507);
  assert.deepEqual(r.body, { requested_bytes: 1, error: 'no room', message: 'no room', code: 'INSUFFICIENT_STORAGE', request_id: 'req_2' });
  assert.deepEqual(r.headers, {});
  assert.equal(r.incident, undefined);
});

test('an outage: its code and public message, retry_after in the body and Retry-After, an incident; the detail stays out', () => {
  const err = new ServiceError('RUNTIME_ERROR', 'the container runtime failed on this sandbox; try again').withDetail('mount /var/lib/sandboxd/x: busy');
  const r = renderError(err, 'req_2');
  assert.equal(r.status, 503);
  assert.equal(r.body.code, 'RUNTIME_ERROR');
  assert.equal(r.body.message, 'the container runtime failed on this sandbox; try again');
  assert.equal(r.body.retry_after, 1);
  assert.equal(r.headers['retry-after'], '1');
  assert.match(String(r.body.incident_id), /^inc_[0-9a-f]{16}$/);
  assert.ok(!JSON.stringify(r.body).includes('/var/lib'), 'the detail is for the log only');
  assert.equal(r.incident?.id, r.body.incident_id);
  assert.equal(r.incident?.kind, 'outage');
  assert.match(r.incident?.detail ?? '', /busy$/);
  // A thrower's own retry_after (a fraction is rounded up) is kept.
  const slow = renderError(new ServiceError('AGENT_UNAVAILABLE', 'the agent is not answering', { retry_after: 2.5, id: 'sb_1' }));
  assert.equal(slow.status, 502);
  assert.equal(slow.body.retry_after, 3);
  assert.equal(slow.headers['retry-after'], '3');
  assert.equal(slow.body.id, 'sb_1');
});

test('a bug: 500 INTERNAL_ERROR with an incident id and nothing of what was thrown', () => {
  let thrown: unknown;
  try {
    JSON.parse('null').x = 1;
  } catch (err) {
    thrown = err;
  }
  assert.ok(isProgrammingError(thrown));
  const r = renderError(thrown, 'req_3');
  assert.equal(r.status, 500);
  assert.equal(r.body.code, 'INTERNAL_ERROR');
  assert.equal(r.body.error, 'Internal server error');
  assert.equal(r.body.request_id, 'req_3');
  assert.ok(r.body.message.includes(String(r.body.incident_id)), r.body.message);
  assert.ok(!/undefined|reading|TypeError/.test(JSON.stringify(r.body)), JSON.stringify(r.body));
  assert.deepEqual(r.headers, {});
  assert.equal(r.incident?.kind, 'bug');
  assert.equal(r.incident?.cause, thrown);
  // Every incident has its own id.
  assert.notEqual(renderError(thrown).body.incident_id, r.body.incident_id);
  // An INTERNAL_ERROR thrown on purpose, a string, a plain Error: bugs too; a ServiceError's text is logged, not sent.
  const internal = renderError(new ServiceError('INTERNAL_ERROR', 'could not save /secret/path').withDetail('EIO'));
  assert.equal(internal.status, 500);
  assert.ok(!internal.body.message.includes('/secret/path'));
  assert.equal(internal.incident?.detail, 'could not save /secret/path: EIO');
  assert.equal(renderError('boom').status, 500);
  assert.equal(renderError(new Error('x')).body.code, 'INTERNAL_ERROR');
});

test('isProgrammingError: what the language throws for broken code, and failed assertions; not what the world throws', () => {
  assert.ok(isProgrammingError(new TypeError('x')));
  assert.ok(isProgrammingError(new RangeError('x')));
  assert.ok(isProgrammingError(new ReferenceError('x')));
  assert.throws(() => assert.equal(1, 2), (err: unknown) => isProgrammingError(err));
  const enoent = Object.assign(new Error('ENOENT: no such file'), { code: 'ENOENT' });
  assert.equal(isProgrammingError(enoent), false);
  assert.equal(isProgrammingError(new ServiceError('RUNTIME_ERROR')), false);
  assert.equal(isProgrammingError('x'), false);
});

test('rendering never throws: an extra that cannot be serialized, odd headers, odd things thrown', () => {
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  const r = renderError(new ServiceError('VALIDATION_ERROR', 'x', { cyclic }), 'req_4');
  assert.equal(r.status, 500, 'what cannot be sent is rendered as the bug it is');
  assert.doesNotThrow(() => JSON.stringify(r.body));
  const big = renderError(new ServiceError('RUNTIME_ERROR', 'x', { n: 10n }));
  assert.equal(big.status, 500);
  const headers = renderError(new ServiceError('RATE_LIMIT_EXCEEDED', 'slow down', {}, { 'retry-after': '3', 'x-bad': 'a\r\nset-cookie: x', 'bad name': 'v' }));
  assert.deepEqual(headers.headers, { 'retry-after': '3' });
  const odd = Object.create(null) as object;
  assert.equal(renderError(odd).status, 500);
  assert.equal(describeCause(odd), '{}');
  const hostile = { toJSON: () => { throw new Error('no'); } };
  assert.equal(describeCause(hostile), '[object Object]');
  assert.match(describeCause(new TypeError('t')), /^TypeError: t\n/);
});

test("an outage a lower layer names by its code (the store's STORE_UNAVAILABLE): 503 with its wait; what the thrower said stays in the log", () => {
  class StoreDown extends Error {
    readonly code = 'STORE_UNAVAILABLE';
  }
  const thrown = new StoreDown('connect ECONNREFUSED 10.1.2.3:5432 (user sandboxd)');
  const r = renderError(thrown, 'req_4');
  assert.equal(r.status, 503);
  assert.equal(r.body.code, 'STORE_UNAVAILABLE');
  assert.equal(r.body.message, 'the service cannot reach its database now; retry shortly');
  assert.equal(r.body.retry_after, 2);
  assert.equal(r.headers['retry-after'], '2');
  assert.doesNotMatch(JSON.stringify(r.body), /10\.1\.2\.3|user sandboxd/);
  assert.equal(r.incident?.kind, 'outage');
  assert.equal(r.incident?.cause, thrown, 'the log gets the error as the thrower made it, with its stack');
  assert.match(r.incident?.detail ?? '', /10\.1\.2\.3/);
  // Only an outage of the list is read off a code: a code of any other kind, or none of the registry, is a bug.
  for (const code of ['NOT_FOUND', 'RUNTIME_ERROR', 'ECONNREFUSED']) {
    const other = renderError(Object.assign(new Error('x'), { code }));
    assert.equal(other.status, 500, code);
    assert.equal(other.body.code, 'INTERNAL_ERROR', code);
  }
});
