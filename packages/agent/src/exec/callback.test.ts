import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { deliverCallback, parseCallback, RETRY_DELAYS_MS, type CallbackState } from './callback.js';
import { ServiceError } from '../proto.js';

test('callback requests are validated field by field', () => {
  const ok = parseCallback({ callback_url: 'https://example.test/hook?x=1', callback_headers: { 'X-Token': 'abc' }, callback_signature_secret: 's' });
  assert.deepEqual(ok, { url: 'https://example.test/hook?x=1', headers: { 'X-Token': 'abc' }, secret: 's' });
  const bad: Array<[Record<string, unknown>, string]> = [
    [{}, 'callback_url'],
    [{ callback_url: 'not a url' }, 'callback_url'],
    [{ callback_url: 'file:///etc/passwd' }, 'callback_url'],
    [{ callback_url: 'http://u:p@h/' }, 'callback_url'],
    [{ callback_url: 'http://h/', callback_headers: ['x'] }, 'callback_headers'],
    [{ callback_url: 'http://h/', callback_headers: { 'bad name': 'x' } }, 'callback_headers'],
    [{ callback_url: 'http://h/', callback_headers: { Host: 'x' } }, 'callback_headers'],
    [{ callback_url: 'http://h/', callback_headers: { 'X-A': 'a\r\nInjected: 1' } }, 'callback_headers'],
    [{ callback_url: 'http://h/', callback_headers: { 'X-A': 5 } }, 'callback_headers'],
    [{ callback_url: 'http://h/', callback_headers: { 'X-A': 'check ✓' } }, 'callback_headers'],
    [{ callback_url: 'http://h/', callback_signature_secret: 7 }, 'callback_signature_secret'],
  ];
  for (const [body, field] of bad) {
    assert.throws(() => parseCallback(body), (e: unknown) => e instanceof ServiceError && e.code === 'VALIDATION_ERROR' && e.extra.field === field, JSON.stringify(body));
  }
});

async function receiver(statuses: number[]) {
  const got: Array<{ headers: IncomingMessage['headers']; body: string }> = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(statuses.shift() ?? 200).end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { got, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, close: () => new Promise<void>((r) => server.close(() => r())) };
}

test('the result is POSTed as JSON with the caller headers and an HMAC of the exact body; 5xx is retried, 4xx is not', async () => {
  const rx = await receiver([503, 200]);
  const sleeps: number[] = [];
  const sleep = async (ms: number) => void sleeps.push(ms);
  try {
    const state: CallbackState = { url: rx.url, status: 'pending', attempts: 0 };
    await deliverCallback({ url: rx.url, headers: { 'X-Token': 'abc' }, secret: 'shh' }, { execution_id: 'proc_1', stdout: 'héllo\n' }, state, sleep);
    assert.equal(state.status, 'delivered');
    assert.equal(state.attempts, 2);
    assert.deepEqual(sleeps, [RETRY_DELAYS_MS[0]]);
    const last = rx.got[1]!;
    assert.deepEqual(JSON.parse(last.body), { execution_id: 'proc_1', stdout: 'héllo\n' });
    assert.equal(last.headers['content-type'], 'application/json');
    assert.equal(last.headers['x-token'], 'abc');
    assert.equal(last.headers['x-sandboxd-signature'], `sha256=${createHmac('sha256', 'shh').update(last.body).digest('hex')}`);

    rx.got.length = 0;
    const rejected = await receiver([400]);
    const s2: CallbackState = { url: rejected.url, status: 'pending', attempts: 0 };
    await deliverCallback({ url: rejected.url, headers: {}, secret: undefined }, { a: 1 }, s2, sleep);
    await rejected.close();
    assert.equal(s2.status, 'failed');
    assert.equal(s2.attempts, 1);
    assert.equal(s2.last_status_code, 400);
    assert.equal(rejected.got[0]!.headers['x-sandboxd-signature'], undefined, 'no secret, no signature');
  } finally {
    await rx.close();
  }
});

test('an unreachable callback is tried four times, then failed with the reason', async () => {
  const rx = await receiver([]);
  await rx.close();
  const state: CallbackState = { url: rx.url, status: 'pending', attempts: 0 };
  await deliverCallback({ url: rx.url, headers: {}, secret: undefined }, {}, state, async () => undefined);
  assert.equal(state.status, 'failed');
  assert.equal(state.attempts, RETRY_DELAYS_MS.length + 1);
  assert.match(state.error ?? '', /ECONNREFUSED/);
});
