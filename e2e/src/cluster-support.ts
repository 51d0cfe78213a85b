// What the tests of a whole cluster on this machine share: calls to a sandbox through one gateway
// by Host header (host mode's public_host needs DNS; a test has none), and waiting for a state.
import assert from 'node:assert/strict';
import { request } from 'node:http';

/** A call to a sandbox's agent (or a preview) through the gateway at `address:port`, by Host header. */
export function viaGateway(address: string, port: number, host: string, method: string, path: string, token: string, body?: unknown, timeoutMs = 30_000): Promise<{ status: number; body: any }> {
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: address,
        port,
        method,
        path,
        agent: false,
        headers: {
          host,
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {}),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => {
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            /* a preview's app answers what it likes */
          }
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      },
    );
    req.on('error', reject);
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timed out')));
    req.end(data);
  });
}

/** `fn` until `ok` of its value, every 100 ms, for at most `ms`; then the test fails with the last value. */
export async function until<T>(what: string, fn: () => Promise<T>, ok: (v: T) => boolean, ms = 5000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: T;
  do {
    last = await fn();
    if (ok(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  } while (Date.now() < deadline);
  assert.fail(`${what}: still ${JSON.stringify(last).slice(0, 300)} after ${ms} ms`);
}
