import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ERROR_CODES } from '@sandboxd/protocol';
import {
  AuthenticationError,
  ConflictError,
  errorFromResponse,
  InvalidStateError,
  KNOWN_ERROR_CODES,
  NotFoundError,
  parseRetryAfter,
  PermissionDeniedError,
  RateLimitError,
  SandboxdError,
  SandboxExpiredError,
  ServerError,
  ValidationError,
} from './errors.js';

const headers = (h: Record<string, string>) => ({ get: (n: string) => h[n.toLowerCase()] ?? null });

test('the SDK copy of the error registry equals the protocol registry', () => {
  const protocol = Object.fromEntries(Object.entries(ERROR_CODES).map(([k, v]) => [k, v.status]));
  assert.deepEqual(KNOWN_ERROR_CODES, protocol, 'copy the new codes into KNOWN_ERROR_CODES in packages/sdk/src/errors.ts');
});

test('error class is chosen by code, then by status', () => {
  const cases: Array<[number, string | undefined, new (...a: never[]) => SandboxdError]> = [
    [404, 'NOT_FOUND', NotFoundError],
    [404, 'TEMPLATE_NOT_FOUND', NotFoundError],
    [404, 'FILE_NOT_FOUND', NotFoundError],
    [404, 'PROCESS_NOT_FOUND', NotFoundError],
    [404, 'SOMETHING_NEW_NOT_FOUND', NotFoundError],
    [401, 'AUTHENTICATION_ERROR', AuthenticationError],
    [401, 'TOKEN_EXPIRED', AuthenticationError],
    [401, undefined, AuthenticationError],
    [403, 'PERMISSION_DENIED', PermissionDeniedError],
    [409, 'INVALID_STATE', InvalidStateError],
    [409, 'SANDBOX_PAUSED', InvalidStateError],
    [409, 'TEMPLATE_EXISTS', ConflictError],
    [410, 'SANDBOX_EXPIRED', SandboxExpiredError],
    [404, 'SANDBOX_EXPIRED', SandboxExpiredError],
    [400, 'VALIDATION_ERROR', ValidationError],
    [400, 'INVALID_TEMPLATE_DEFINITION', ValidationError],
    [429, 'RATE_LIMIT_EXCEEDED', RateLimitError],
    [500, 'INTERNAL_ERROR', ServerError],
    [503, undefined, ServerError],
    [0, 'FILE_NOT_FOUND', NotFoundError],
    [0, 'VALIDATION_ERROR', ValidationError],
  ];
  for (const [status, code, Cls] of cases) {
    const e = errorFromResponse({ status, body: { error: 'x', message: 'y', code } });
    assert.ok(e instanceof Cls, `${status} ${code} → ${e.constructor.name}, want ${Cls.name}`);
    assert.ok(e instanceof SandboxdError);
  }
  assert.ok(errorFromResponse({ status: 409, body: { code: 'INVALID_STATE' } }) instanceof ConflictError, 'InvalidStateError is a ConflictError');
});

test('message, code, status and request id come from the flat body', () => {
  const e = errorFromResponse({
    status: 404,
    body: { error: 'Sandbox not found', message: 'Sandbox sb_1 not found', code: 'NOT_FOUND', request_id: 'req_1', id: 'sb_1' },
    headers: headers({ 'x-request-id': 'req_header' }),
  });
  assert.equal(e.message, 'Sandbox sb_1 not found');
  assert.equal(e.code, 'NOT_FOUND');
  assert.equal(e.status, 404);
  assert.equal(e.requestId, 'req_1');
  assert.equal(e.name, 'NotFoundError');
  assert.deepEqual((e.body as { id: string }).id, 'sb_1');
});

test('falls back to the error text, the nested shape, the header request id, then the status', () => {
  const a = errorFromResponse({ status: 400, body: { error: 'either template_id or template_name must be provided' }, headers: headers({ 'x-request-id': 'r2' }) });
  assert.equal(a.message, 'either template_id or template_name must be provided');
  assert.equal(a.code, 'HTTP_400');
  assert.equal(a.requestId, 'r2');
  assert.ok(a instanceof ValidationError);
  const b = errorFromResponse({ status: 401, body: { error: { code: 'AUTHENTICATION_ERROR', message: 'bad key', request_id: 'r3' } } });
  assert.equal(b.message, 'bad key');
  assert.equal(b.code, 'AUTHENTICATION_ERROR');
  assert.equal(b.requestId, 'r3');
  const c = errorFromResponse({ status: 502, body: '<html>Bad Gateway</html>' });
  assert.ok(c instanceof ServerError);
  assert.equal(c.message, '<html>Bad Gateway</html>');
  const d = errorFromResponse({ status: 500, body: undefined });
  assert.equal(d.message, 'Request failed with status 500');
  assert.equal(d.incidentId, undefined);
  const i = errorFromResponse({ status: 500, body: { error: 'Internal server error', message: 'internal error; incident inc_0123456789abcdef', code: 'INTERNAL_ERROR', incident_id: 'inc_0123456789abcdef', request_id: 'r4' } });
  assert.ok(i instanceof ServerError);
  assert.equal(i.incidentId, 'inc_0123456789abcdef');
  assert.equal(i.toJSON().incident_id, 'inc_0123456789abcdef');
});

test('the file path is exposed on NotFoundError, the expiry on SandboxExpiredError', () => {
  const e = errorFromResponse({ status: 404, body: { code: 'FILE_NOT_FOUND', message: 'no such file', path: '/workspace/x' } });
  assert.ok(e instanceof NotFoundError);
  assert.equal(e.path, '/workspace/x');
  const x = errorFromResponse({ status: 410, body: { code: 'SANDBOX_EXPIRED', error: 'Sandbox expired', expires_at: '2030-01-01T00:00:00Z' } });
  assert.ok(x instanceof SandboxExpiredError);
  assert.equal(x.expiresAt, '2030-01-01T00:00:00Z');
});

test('RateLimitError.retryAfter comes from retry_after, else Retry-After', () => {
  const a = errorFromResponse({ status: 429, body: { code: 'RATE_LIMIT_EXCEEDED', error: 'Rate limit exceeded', retry_after: 7 }, headers: headers({ 'retry-after': '3' }) });
  assert.ok(a instanceof RateLimitError);
  assert.equal(a.retryAfter, 7);
  const b = errorFromResponse({ status: 429, body: { error: 'Rate limit exceeded' }, headers: headers({ 'retry-after': '3' }) });
  assert.equal((b as RateLimitError).retryAfter, 3);
  const c = errorFromResponse({ status: 429, body: {} });
  assert.equal((c as RateLimitError).retryAfter, undefined);
  assert.deepEqual(JSON.parse(JSON.stringify(a)).retry_after, 7);
});

test('parseRetryAfter reads seconds and HTTP dates', () => {
  assert.equal(parseRetryAfter(undefined, '12'), 12);
  assert.equal(parseRetryAfter('5', null), 5);
  const now = Date.parse('2030-01-01T00:00:00Z');
  assert.equal(parseRetryAfter(undefined, 'Tue, 01 Jan 2030 00:00:30 GMT', now), 30);
  assert.equal(parseRetryAfter(undefined, 'soon'), undefined);
  assert.equal(parseRetryAfter(-1, null), undefined);
});
