import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { buildUrl, failedBeforeSend, HttpClient, retryDelayMs, shouldRetry } from './http.js';
import { AbortError, ConnectionError, TimeoutError } from './errors.js';

const refused = Object.assign(new TypeError('fetch failed'), { cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) });
const reset = Object.assign(new TypeError('fetch failed'), { cause: Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }) });
const aggregate = Object.assign(new TypeError('fetch failed'), {
  cause: Object.assign(new AggregateError([Object.assign(new Error('a'), { code: 'ECONNREFUSED' }), Object.assign(new Error('b'), { code: 'ENETUNREACH' })]), { code: 'ECONNREFUSED' }),
});

test('only failures before the connection was made count as never sent', () => {
  assert.equal(failedBeforeSend(refused), true);
  assert.equal(failedBeforeSend(aggregate), true);
  assert.equal(failedBeforeSend(reset), false);
  assert.equal(failedBeforeSend(new Error('x')), false);
});

test('GETs are retried on 5xx and network errors; POSTs only when the request never left', () => {
  assert.equal(shouldRetry('GET', { status: 503 }, true), true);
  assert.equal(shouldRetry('GET', { status: 500 }, true), true);
  assert.equal(shouldRetry('GET', { status: 404 }, true), false);
  assert.equal(shouldRetry('GET', { status: 429 }, true), false);
  assert.equal(shouldRetry('GET', { error: reset }, true), true);
  assert.equal(shouldRetry('POST', { status: 503 }, true), false, 'a 5xx after POST /v1/sandboxes may have created one');
  assert.equal(shouldRetry('POST', { status: 502 }, true), false, 'never re-run code');
  assert.equal(shouldRetry('POST', { error: reset }, true), false, 'the code may have started');
  assert.equal(shouldRetry('POST', { error: refused }, true), true);
  assert.equal(shouldRetry('POST', { error: refused }, false), false, 'a one-shot stream cannot be sent again');
  assert.equal(shouldRetry('DELETE', { status: 503 }, true), false);
  assert.equal(shouldRetry('PUT', { status: 503 }, true), false);
});

test('backoff grows and is capped', () => {
  assert.equal(retryDelayMs(0, () => 1), 250);
  assert.equal(retryDelayMs(1, () => 1), 500);
  assert.equal(retryDelayMs(10, () => 1), 4000);
  assert.equal(retryDelayMs(0, () => 0), 125);
});

test('buildUrl joins base, path and defined query values', () => {
  assert.equal(buildUrl('http://h:1/', '/v1/sandboxes', { limit: 5, cursor: undefined, status: null }), 'http://h:1/v1/sandboxes?limit=5');
  assert.equal(buildUrl('http://h:1', '/files/read', { path: '/workspace/a b&c' }), 'http://h:1/files/read?path=%2Fworkspace%2Fa+b%26c');
  assert.equal(buildUrl('http://h:1', 'http://other:2/u?sig=1'), 'http://other:2/u?sig=1');
});

async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

test('a refused connection is retried, then reported as ConnectionError naming the address', async () => {
  const port = await closedPort();
  let attempts = 0;
  const client = new HttpClient({
    baseUrl: `http://127.0.0.1:${port}`,
    fetch: (...a: Parameters<typeof fetch>) => {
      attempts++;
      return fetch(...a);
    },
    maxRetries: 2,
    requestTimeoutMs: 10_000,
  });
  await assert.rejects(client.json({ method: 'POST', path: '/execute', json: { code: '1' } }), (e: unknown) => {
    assert.ok(e instanceof ConnectionError);
    assert.match(e.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
    assert.match(e.message, /ECONNREFUSED/);
    return true;
  });
  assert.equal(attempts, 3);
});

test('a caller abort is AbortError; an AbortSignal.timeout or the client deadline is TimeoutError', async () => {
  // A server that accepts and never answers, so only the signals can end the call.
  const sockets: import('node:net').Socket[] = [];
  const srv = createServer((s) => sockets.push(s));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const baseUrl = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
  const client = new HttpClient({ baseUrl, fetch, maxRetries: 0, requestTimeoutMs: 60_000 });
  try {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 50);
    await assert.rejects(client.json({ method: 'GET', path: '/x', signal: ac.signal }), AbortError);
    await assert.rejects(client.json({ method: 'GET', path: '/x', signal: AbortSignal.timeout(50) }), TimeoutError);
    await assert.rejects(client.json({ method: 'GET', path: '/x', timeoutMs: 50 }), (e: unknown) => e instanceof TimeoutError && /50 ms/.test(e.message));
    const pre = new AbortController();
    pre.abort();
    await assert.rejects(client.json({ method: 'GET', path: '/x', signal: pre.signal }), AbortError);
  } finally {
    for (const s of sockets) s.destroy();
    srv.close();
  }
});
