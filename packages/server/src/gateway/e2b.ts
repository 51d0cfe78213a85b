import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { renderError, ServiceError } from '@sandboxd/protocol';
import { reportIncident, type OnIncident } from './proxy.js';

/**
 * E2B's data plane, as its unmodified clients speak it. With `E2B_SANDBOX_URL` set they send every
 * request to that one base URL and name the sandbox and the port inside it in headers; without it
 * they use the host `<port>-<id>.<domain>`. Port 49983 is E2B's in-sandbox daemon (our agent's
 * `/e2b/envd` routes), 49999 its code interpreter (`/e2b/ci`); any other port is the user's app (a
 * preview). The sandbox's access token comes in `X-Access-Token` (the envd calls and runCode) or
 * `E2B-Traffic-Access-Token` (the code interpreter's context calls send only that one).
 */

/** Where the API port serves E2B's data plane: `E2B_SANDBOX_URL=http://<api>/e2b/sandbox`. */
export const E2B_SANDBOX_PREFIX = '/e2b/sandbox';
export const E2B_ENVD_PORT = 49983;
export const E2B_CI_PORT = 49999;
/** The agent's routes for each of E2B's in-sandbox ports. */
const AGENT_PREFIX: Record<number, string> = { [E2B_ENVD_PORT]: '/e2b/envd', [E2B_CI_PORT]: '/e2b/ci' };

export const E2B_SANDBOX_ID_HEADER = 'e2b-sandbox-id';
export const E2B_SANDBOX_PORT_HEADER = 'e2b-sandbox-port';
export const E2B_ACCESS_TOKEN_HEADER = 'x-access-token';
export const E2B_TRAFFIC_TOKEN_HEADER = 'e2b-traffic-access-token';
/** E2B's routing headers and credentials: they never reach the sandbox. */
export const E2B_HEADERS = [E2B_SANDBOX_ID_HEADER, E2B_SANDBOX_PORT_HEADER, E2B_ACCESS_TOKEN_HEADER, E2B_TRAFFIC_TOKEN_HEADER] as const;

export interface E2bTarget {
  sandboxId: string;
  /** The port inside the sandbox the client asked for. */
  port: number;
  /** The path and query to send: under the agent's E2B routes for 49983 and 49999, as asked for an app's port. */
  path: string;
  /** An app's port (a preview), not the agent. */
  app: boolean;
}

const ID_RE = /^[a-z0-9][a-z0-9_-]{0,63}$/;

function oneHeader(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? undefined : v;
}

/** A sandbox id as the client gave it: a 400 when it cannot be one (never echoed unchecked). */
export function e2bSandboxId(given: string | undefined): string {
  if (given === undefined || given.trim() === '') {
    throw new ServiceError('VALIDATION_ERROR', `the ${E2B_SANDBOX_ID_HEADER} header is required: the id of the sandbox to reach`, { field: E2B_SANDBOX_ID_HEADER });
  }
  const id = given.trim().toLowerCase();
  if (!ID_RE.test(id)) throw new ServiceError('VALIDATION_ERROR', `${E2B_SANDBOX_ID_HEADER} is not a sandbox id`, { field: E2B_SANDBOX_ID_HEADER });
  return id;
}

/** A port inside the sandbox: digits, 1 to 65535. */
export function e2bPort(given: string | undefined, field = E2B_SANDBOX_PORT_HEADER): number {
  if (given === undefined || given.trim() === '') {
    throw new ServiceError('VALIDATION_ERROR', `the ${field} header is required: ${E2B_ENVD_PORT} (envd), ${E2B_CI_PORT} (code interpreter) or your app's port`, { field });
  }
  const v = given.trim();
  const port = /^\d{1,5}$/.test(v) ? Number(v) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new ServiceError('VALIDATION_ERROR', `${field} must be a port number from 1 to 65535`, { field });
  return port;
}

/**
 * The path to send on: `rest` is the request's path and query below the base URL. A path whose
 * dot segments or encoded slashes would resolve elsewhere than it reads is refused: under an
 * agent prefix it must stay there.
 */
export function e2bPath(port: number, rest: string): { path: string; app: boolean } {
  const path = rest === '' ? '/' : rest;
  if (!path.startsWith('/') || path.startsWith('//')) throw new ServiceError('VALIDATION_ERROR', 'the request path must start with a single /');
  const q = path.indexOf('?');
  const pathname = q < 0 ? path : path.slice(0, q);
  if (/(^|\/)\.\.?(\/|$)/.test(pathname) || /%2f|%5c|%2e|\\/i.test(pathname)) {
    throw new ServiceError('VALIDATION_ERROR', 'the request path may not hold dot segments, backslashes or encoded slashes or dots');
  }
  const prefix = AGENT_PREFIX[port];
  return prefix ? { path: `${prefix}${path}`, app: false } : { path, app: true };
}

/** The target of a request to the base URL: sandbox and port from the headers, `rest` below the prefix. */
export function e2bHeaderTarget(req: IncomingMessage, rest: string): E2bTarget {
  const sandboxId = e2bSandboxId(oneHeader(req, E2B_SANDBOX_ID_HEADER));
  const port = e2bPort(oneHeader(req, E2B_SANDBOX_PORT_HEADER));
  return { sandboxId, port, ...e2bPath(port, rest) };
}

/** The part of a URL below the base URL's prefix; undefined when it is not under it. */
export function belowPrefix(url: string | undefined, prefix = E2B_SANDBOX_PREFIX): string | undefined {
  if (url === undefined || !url.startsWith(prefix)) return undefined;
  const rest = url.slice(prefix.length);
  if (rest === '' || rest.startsWith('/')) return rest;
  if (rest.startsWith('?')) return `/${rest}`;
  return undefined;
}

/** The sandbox's access token the client sent, if any. */
export function e2bAccessToken(req: IncomingMessage): string | undefined {
  for (const h of [E2B_ACCESS_TOKEN_HEADER, E2B_TRAFFIC_TOKEN_HEADER]) {
    const v = oneHeader(req, h)?.trim();
    if (v) return v;
  }
  return undefined;
}

/**
 * E2B's clients name the user a command or file operation runs as in `Authorization: Basic
 * base64("<user>:")`: it goes on to the agent's envd routes (which check the user), never a
 * credential (Bearer), and only when it is well formed.
 */
export function e2bUserHeader(req: IncomingMessage, target: E2bTarget): { authorization: string } | undefined {
  if (target.port !== E2B_ENVD_PORT) return undefined;
  const auth = oneHeader(req, 'authorization');
  return auth !== undefined && /^Basic [A-Za-z0-9+/]{0,512}={0,2}$/i.test(auth) ? { authorization: auth } : undefined;
}

/** Whether a request to envd's `/files` is signed (uploadUrl/downloadUrl): its credential is in its query. */
export function signedFileRequest(target: E2bTarget): boolean {
  if (target.port !== E2B_ENVD_PORT) return false;
  const q = target.path.indexOf('?');
  if (q < 0 || target.path.slice(0, q) !== '/e2b/envd/files') return false;
  return new URLSearchParams(target.path.slice(q + 1)).has('signature');
}

/**
 * Checks a signed file URL against the sandbox's access token (the one the control plane handed
 * out, kept in its row) and returns the path to send on, without the signature. E2B's clients
 * sign `${path}:${operation}:${user}:${token}` (and `:${expiration}` when the URL expires):
 * `v1_` and the SHA-256's base64 without padding; operation `read` (GET, HEAD) or `write` (POST);
 * no username signs as "" (the JS client; "undefined" and "None" from others are taken too).
 */
export function checkSignedFileUrl(method: string | undefined, target: E2bTarget, token: string, nowSeconds = Date.now() / 1000): string {
  const q = target.path.indexOf('?');
  const query = new URLSearchParams(target.path.slice(q + 1));
  const refuse = (why: string) => new ServiceError('AUTHENTICATION_ERROR', `the signed URL is not valid: ${why}`, { id: target.sandboxId });
  const op = method === 'GET' || method === 'HEAD' ? 'read' : method === 'POST' ? 'write' : undefined;
  if (!op) throw refuse(`a signed URL is for GET (download) or POST (upload), not ${String(method).slice(0, 16)}`);
  const signatures = query.getAll('signature');
  const expirations = query.getAll('signature_expiration');
  if (signatures.length !== 1 || expirations.length > 1) throw refuse('one signature (and at most one signature_expiration) is expected');
  const given = signatures[0]!;
  let expiration = '';
  if (expirations.length) {
    const e = expirations[0]!;
    if (!/^\d{1,12}$/.test(e)) throw refuse('signature_expiration must be unix seconds');
    if (Number(e) <= nowSeconds) throw refuse('it expired');
    expiration = `:${e}`;
  }
  const path = query.get('path') ?? '';
  const username = query.get('username');
  const users = username === null ? ['', 'undefined', 'None'] : [username];
  const wanted = Buffer.from(given);
  const ok = users.some((user) => {
    const digest = createHash('sha256').update(`${path}:${op}:${user}:${token}${expiration}`).digest('base64').replace(/=+$/, '');
    const expected = Buffer.from(`v1_${digest}`);
    return expected.length === wanted.length && timingSafeEqual(expected, wanted);
  });
  if (!ok) throw refuse('the signature does not match');
  query.delete('signature');
  query.delete('signature_expiration');
  const rest = query.toString();
  return `${target.path.slice(0, q)}${rest ? `?${rest}` : ''}`;
}

/** Takes E2B's routing headers and credentials off a request before it goes on. */
export function dropE2bHeaders(req: IncomingMessage): void {
  for (const h of E2B_HEADERS) delete req.headers[h];
}

/**
 * The status E2B's clients turn into the right error. A sandbox that is not there or not running
 * (missing, deleted, stopped, paused and not waking, its agent gone) is a 502, which they read as
 * "the sandbox is not running" (`isRunning()` false, a TimeoutError elsewhere), as E2B's own proxy
 * answers; a credential of another sandbox or organization, expired or revoked, is a 401
 * (AuthenticationError).
 */
export function e2bStatus(err: ServiceError): number {
  switch (err.code) {
    case 'NOT_FOUND':
    case 'SANDBOX_STOPPED':
    case 'SANDBOX_PAUSED':
      return 502;
    case 'PERMISSION_DENIED':
      return 401;
    default:
      return err.status;
  }
}

/** Connect's code for an HTTP status (connectrpc.com/docs/protocol, error codes). */
function connectCode(status: number): string {
  if (status === 400) return 'invalid_argument';
  if (status === 401) return 'unauthenticated';
  if (status === 403) return 'permission_denied';
  if (status === 404) return 'not_found';
  if (status === 408 || status === 504) return 'deadline_exceeded';
  if (status === 409) return 'failed_precondition';
  if (status === 413 || status === 429) return 'resource_exhausted';
  if (status === 502 || status === 503) return 'unavailable';
  if (status === 501) return 'unimplemented';
  return status >= 500 ? 'internal' : 'unknown';
}

/** Whether a request is a Connect RPC, and a streaming one (whose errors travel in its end-of-stream message). */
function connectKind(req: IncomingMessage): 'unary' | 'stream' | undefined {
  const type = (req.headers['content-type'] ?? '').toLowerCase();
  if (type.startsWith('application/connect+')) return 'stream';
  if (req.headers['connect-protocol-version'] !== undefined) return 'unary';
  return undefined;
}

/**
 * The gateway's own error (before or instead of the sandbox's answer) in the shape the E2B client
 * reads: a Connect error for Connect RPCs (a unary one's JSON body, a stream's end-of-stream
 * message), else our JSON error body (its `message` is what the client shows) with e2bStatus.
 */
export function sendE2bError(req: IncomingMessage, res: ServerResponse, err: unknown, requestId: string, onIncident?: OnIncident): void {
  const r = renderError(err, requestId);
  if (r.incident) reportIncident(onIncident, r.incident, requestId);
  const status = err instanceof ServiceError ? e2bStatus(err) : r.status;
  const kind = connectKind(req);
  const message = String(r.body.message ?? r.body.error ?? 'error');
  try {
    if (kind === 'unary') {
      const text = JSON.stringify({ code: connectCode(status), message });
      res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'x-request-id': requestId, ...r.headers });
      res.end(text);
    } else if (kind === 'stream') {
      // A stream's error is its end-of-stream message (flag 2) on a 200: the status alone would say less.
      const json = Buffer.from(JSON.stringify({ error: { code: connectCode(status), message } }));
      const head = Buffer.alloc(5);
      head.writeUInt8(2, 0);
      head.writeUInt32BE(json.length, 1);
      res.writeHead(200, { 'content-type': 'application/connect+json', 'content-length': json.length + 5, 'x-request-id': requestId });
      res.end(Buffer.concat([head, json]));
    } else {
      const text = JSON.stringify(r.body);
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), 'x-request-id': requestId, ...r.headers });
      res.end(text);
    }
  } catch {
    res.destroy();
  }
}

/** The same refusal on a socket whose upgrade was not let through. */
export function rawE2bError(socket: Socket, err: unknown, requestId: string, onIncident?: OnIncident): void {
  const r = renderError(err, requestId);
  if (r.incident) reportIncident(onIncident, r.incident, requestId);
  const status = err instanceof ServiceError ? e2bStatus(err) : r.status;
  const text = JSON.stringify(r.body);
  if (!socket.writable) return void socket.destroy();
  socket.end(`HTTP/1.1 ${status} ${status === 502 ? 'Bad Gateway' : 'Error'}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(text)}\r\nx-request-id: ${requestId}\r\nconnection: close\r\n\r\n${text}`);
}
