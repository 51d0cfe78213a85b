import { createHmac } from 'node:crypto';
import { ServiceError, type CallbackDelivery } from '../proto.js';
import { rejectNul } from '../http/validate.js';

/** Where and how the result of an asynchronous execution is delivered. */
export interface CallbackSpec {
  url: string;
  headers: Record<string, string>;
  secret: string | undefined;
}

/** What /execute/processes shows of a callback. */
export type CallbackState = CallbackDelivery;

export const SIGNATURE_HEADER = 'x-sandboxd-signature';
const MAX_HEADERS = 32;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Headers the agent sets itself (or that describe the connection) and a caller may not replace. */
const RESERVED = new Set(['host', 'content-length', 'content-type', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', SIGNATURE_HEADER]);
/** Delays before the 2nd, 3rd and 4th attempt. */
export const RETRY_DELAYS_MS = [1000, 5000, 25_000];
const ATTEMPT_TIMEOUT_MS = 10_000;

export function parseCallback(body: Record<string, unknown>): CallbackSpec {
  const raw = body.callback_url;
  if (typeof raw !== 'string' || raw.trim() === '') {
    throw new ServiceError('VALIDATION_ERROR', 'callback_url is required: the URL the result is POSTed to', { field: 'callback_url' });
  }
  // The URL parser would quietly percent-encode a NUL; it is a malformed URL all the same.
  rejectNul(raw, 'callback_url');
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ServiceError('VALIDATION_ERROR', `callback_url is not a URL: ${JSON.stringify(raw.slice(0, 200))}`, { field: 'callback_url' });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ServiceError('VALIDATION_ERROR', 'callback_url must be an http:// or https:// URL', { field: 'callback_url' });
  }
  if (raw.length > 2048) throw new ServiceError('VALIDATION_ERROR', 'callback_url is longer than 2048 characters', { field: 'callback_url' });
  if (url.username || url.password) {
    throw new ServiceError('VALIDATION_ERROR', 'callback_url may not carry credentials; send them in callback_headers', { field: 'callback_url' });
  }

  const headers: Record<string, string> = {};
  const rawHeaders = body.callback_headers;
  if (rawHeaders !== undefined && rawHeaders !== null) {
    if (typeof rawHeaders !== 'object' || Array.isArray(rawHeaders)) {
      throw new ServiceError('VALIDATION_ERROR', 'callback_headers must be an object of header names to string values', { field: 'callback_headers' });
    }
    const entries = Object.entries(rawHeaders as Record<string, unknown>);
    if (entries.length > MAX_HEADERS) throw new ServiceError('VALIDATION_ERROR', `callback_headers may hold at most ${MAX_HEADERS} headers`, { field: 'callback_headers' });
    for (const [name, value] of entries) {
      if (!HEADER_NAME.test(name)) throw new ServiceError('VALIDATION_ERROR', `callback_headers: ${JSON.stringify(name)} is not a header name`, { field: 'callback_headers' });
      if (RESERVED.has(name.toLowerCase())) throw new ServiceError('VALIDATION_ERROR', `callback_headers: ${name} is set by the agent`, { field: 'callback_headers' });
      // HTTP header values are bytes: one line of Latin-1 (anything else fails only at delivery).
      if (typeof value !== 'string' || !/^[\t\x20-\x7e\x80-\xff]*$/.test(value) || value.length > 8192) {
        throw new ServiceError('VALIDATION_ERROR', `callback_headers: the value of ${name} must be one line of Latin-1 text, at most 8192 characters`, { field: 'callback_headers' });
      }
      headers[name] = value;
    }
  }

  const secret = body.callback_signature_secret;
  if (secret !== undefined && secret !== null && (typeof secret !== 'string' || secret.length === 0 || secret.length > 1024)) {
    throw new ServiceError('VALIDATION_ERROR', 'callback_signature_secret must be a non-empty string of at most 1024 characters', { field: 'callback_signature_secret' });
  }
  return { url: url.toString(), headers, secret: typeof secret === 'string' ? secret : undefined };
}

/** `sha256=` and the hex HMAC-SHA256 of the exact body bytes, keyed with the secret. */
export function signature(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/**
 * POSTs `payload` as JSON to the callback URL, from inside the sandbox (so under its network
 * policy). A network error, a timeout, 429 or a 5xx is retried after 1, 5 and 25 s; any other
 * answer ends it. `state` is updated as it goes (it is what /execute/processes shows).
 */
export async function deliverCallback(
  spec: CallbackSpec,
  payload: Record<string, unknown>,
  state: CallbackState,
  sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms).unref()),
): Promise<void> {
  const body = JSON.stringify(payload);
  const headers: Record<string, string> = { ...spec.headers, 'content-type': 'application/json', 'user-agent': 'sandboxd-agent' };
  if (spec.secret) headers[SIGNATURE_HEADER] = signature(spec.secret, body);
  for (let attempt = 0; ; attempt++) {
    state.attempts = attempt + 1;
    let retry = false;
    try {
      const res = await fetch(spec.url, { method: 'POST', headers, body, redirect: 'manual', signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS) });
      await res.body?.cancel().catch(() => undefined);
      state.last_status_code = res.status;
      if (res.status >= 200 && res.status < 300) {
        state.status = 'delivered';
        state.delivered_at = new Date().toISOString();
        delete state.error;
        return;
      }
      state.error = `the callback answered ${res.status}`;
      retry = res.status === 429 || res.status >= 500;
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; message?: string } };
      state.error = e.name === 'TimeoutError' ? `no answer within ${ATTEMPT_TIMEOUT_MS / 1000} s` : `${e.cause?.code ?? e.cause?.message ?? e.message}`;
      retry = true;
    }
    const delay = RETRY_DELAYS_MS[attempt];
    if (!retry || delay === undefined) {
      state.status = 'failed';
      return;
    }
    await sleep(delay);
  }
}
