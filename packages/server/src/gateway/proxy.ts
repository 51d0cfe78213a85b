import { Agent, request, type AgentOptions, type ClientRequestArgs, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { AgentDial } from '../services/routes.js';
import { renderError, ServiceError, type Incident } from '@sandboxd/protocol';
import { flushed, holdReads, type SpliceRelay } from './splice.js';

/** Headers that describe one hop, plus our credentials: never forwarded to the agent. */
export const HOP_HEADERS = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'authorization', 'x-api-key', 'te', 'trailer',
  // The browser's cookies for this host, and a WebSocket's credential offered as a subprotocol
  // (meaningless without an upgrade): not the sandbox's.
  'cookie', 'sec-websocket-protocol',
  // The daemon's own boot probe (node/agent-client.ts): a client's would get the first
  // responder's "starting" answer instead of the agent's.
  'x-sandboxd-probe',
]);
/**
 * A preview's app has its own cookies, credentials and CORS: only hop headers and the gateway's own
 * credentials (PREVIEW_TOKEN_HEADER, cookies named PREVIEW_COOKIE_PREFIX...) stay behind.
 */
const PREVIEW_HOP_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer']);
/** The header a preview's private port takes the sandbox's token in. */
export const PREVIEW_TOKEN_HEADER = 'x-sandboxd-token';
/** Preview session cookies are named this, then the sandbox id and port. */
export const PREVIEW_COOKIE_PREFIX = 'sbxp_';

/** Whether a cookie's name (what precedes its first `=`) is one of the gateway's: browsers match names case-sensitively, the gateway does not. */
function gatewayCookieName(name: string): boolean {
  return name.trim().toLowerCase().startsWith(PREVIEW_COOKIE_PREFIX);
}

/** A Cookie header without the gateway's preview cookies (undefined when none is left). */
export function withoutPreviewCookies(cookie: string | undefined): string | undefined {
  if (cookie === undefined) return undefined;
  const kept = cookie
    .split(';')
    .map((c) => c.trim())
    .filter((c) => c && !gatewayCookieName(c.split('=')[0]!));
  return kept.length ? kept.join('; ') : undefined;
}

/**
 * Whether an app's Set-Cookie value may reach the browser: not one named like the gateway's own
 * (in any case), and not a nameless one (`=v`, or no `=` before the first `;`): a browser sends a
 * nameless cookie back as its bare value, so `=sbxp_...=x` would come back as a gateway cookie.
 */
export function appSetCookieAllowed(value: string): boolean {
  const pair = value.split(';')[0]!;
  const eq = pair.indexOf('=');
  return eq > 0 && pair.slice(0, eq).trim() !== '' && !gatewayCookieName(pair.slice(0, eq));
}

/** The same for an answer head's raw line (the preview's WebSocket answer), for relayAnswerHead. */
export const PREVIEW_DROPPED_SET_COOKIE = new RegExp(`^set-cookie[ \\t]*:[ \\t]*(?:${PREVIEW_COOKIE_PREFIX}|=|[^=;]*(?:;|$))`, 'i');

/** Response headers of one hop: not relayed from the agent (Node frames the client's response itself). */
const RESPONSE_HOP_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'trailer', 'te']);
/** RFC 9110 token: what a header name may be. */
const TOKEN_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** What Node lets a header value hold (no CR, LF, NUL or other control characters but tab). */
const VALUE_RE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** A sandbox may send a few 1xx (100 Continue, 103 Early Hints); an endless stream of them is an attack. */
const MAX_INFORMATIONAL = 16;

export interface ProxyTimeouts {
  /** From the request until the agent's response headers (executions may run up to a day). */
  headersMs: number;
  /** A response body that moves no byte either way for this long is cut. */
  idleMs: number;
}

export interface ProxyTarget {
  sandboxId: string;
  /** Keeps the connections to the agent (a DialAgent: they are opened with the sandbox's dialer). */
  agent: Agent;
  /** The agent's socket failed as its exit would make it fail (mayBeAgentGone). */
  onAgentGone?: () => void;
  /** How long the agent took to answer (its response headers), or to fail. */
  observe?: (seconds: number, ok: boolean) => void;
  /** Logs an error answer's incident (renderError). */
  onIncident?: OnIncident;
  /**
   * `preview`: a user's app behind a preview URL, which keeps its own cookies, Authorization,
   * Set-Cookie and CORS headers (not the gateway's preview credentials). Default: the agent.
   */
  headers?: 'agent' | 'preview';
  /** Large bodies (and their connections) relayed in the kernel once their heads are checked. */
  splice?: SpliceRelay;
  /** Headers set on the request after the client's were filtered (E2B's `Authorization: Basic <user>`, which names the user to run as). */
  extraHeaders?: OutgoingHttpHeaders;
  /** Renders the gateway's own error answer (absent: sendError); E2B's clients read another shape (e2b.ts). */
  sendError?: (res: ServerResponse, err: unknown, requestId: string) => void;
}

/** Logs what renderError found behind a 5xx, with the request it answered. */
export type OnIncident = (incident: Incident, requestId: string) => void;

/**
 * The agent's socket failed in a way its exit causes: nobody listens (it exited, or was killed from
 * inside its sandbox), or the connection broke under a request (it died while answering). Only a
 * hint: the lifecycle checks the container before it calls the sandbox stopped.
 */
export function mayBeAgentGone(err: NodeJS.ErrnoException): boolean {
  // AGENT_UNAVAILABLE: the node that holds the sandbox could not reach its agent (the same refusal, relayed).
  return err.code === 'ECONNREFUSED' || err.code === 'ENOENT' || err.code === 'ECONNRESET' || err.code === 'EPIPE' || (err instanceof ServiceError && err.code === 'AGENT_UNAVAILABLE');
}

/** How long the gateway waits for a connection to an agent (its socket, or its node's relay). */
export const AGENT_DIAL_TIMEOUT_MS = 10_000;

/**
 * An HTTP agent (connection pool) for one sandbox whose connections are opened with its dialer:
 * to its unix socket on this machine, or through the node that holds it.
 */
export class DialAgent extends Agent {
  constructor(
    private readonly dial: () => AgentDial,
    opts: AgentOptions = { keepAlive: true, maxSockets: 64, maxFreeSockets: 8, keepAliveMsecs: 10_000 },
  ) {
    super(opts);
  }

  override createConnection(_options: ClientRequestArgs, callback?: (err: Error | null, stream: Duplex) => void): undefined {
    if (!callback) throw new Error('DialAgent connects asynchronously: a callback is required');
    this.dial()(AGENT_DIAL_TIMEOUT_MS).then(
      (sock) => callback(null, sock),
      (err: Error) => callback(err, undefined as unknown as Duplex),
    );
    return undefined;
  }
}

/**
 * Relays one request to a sandbox's agent and its answer back. Everything that comes from the
 * sandbox is hostile input: an invalid status line, status or header, a response that never
 * comes or stalls, too many informational responses, a broken body, an upgrade nobody asked for;
 * each ends as a 502 to this one client (or, once its headers are out, a cut connection) and never
 * as an exception. Only this client's request is affected.
 */
export function proxyToAgent(req: IncomingMessage, res: ServerResponse, target: ProxyTarget, requestId: string, timeouts: ProxyTimeouts): void {
  const headers: OutgoingHttpHeaders = {};
  const preview = target.headers === 'preview';
  if (preview) {
    for (const [k, v] of Object.entries(req.headers)) if (!PREVIEW_HOP_HEADERS.has(k) && k !== PREVIEW_TOKEN_HEADER && v !== undefined) headers[k] = v;
    const cookie = withoutPreviewCookies(req.headers.cookie);
    if (cookie === undefined) delete headers.cookie;
    else headers.cookie = cookie;
  } else {
    for (const [k, v] of Object.entries(req.headers)) if (!HOP_HEADERS.has(k) && v !== undefined) headers[k] = v;
  }
  Object.assign(headers, target.extraHeaders);
  headers['x-request-id'] = requestId;
  if (req.headers['transfer-encoding']) headers['transfer-encoding'] = req.headers['transfer-encoding'];

  let done = false;
  let idle: NodeJS.Timeout | undefined;
  const startedAt = performance.now();
  let observed = false;
  const observe = (ok: boolean) => {
    if (observed) return;
    observed = true;
    target.observe?.((performance.now() - startedAt) / 1000, ok);
  };
  const upstream = request({ method: req.method, path: req.url, headers, agent: target.agent });
  const finish = () => {
    done = true;
    clearTimeout(headersTimer);
    clearTimeout(idle);
  };
  /** The sandbox misbehaved: a 502 if nothing was sent yet, else the client's connection is cut. */
  const fail = (why: string | ServiceError, detail?: string) => {
    if (done) return;
    observe(false);
    finish();
    upstream.destroy();
    if (res.headersSent) res.destroy();
    else {
      const err = typeof why === 'string' ? agentUnavailable(target.sandboxId, why, detail) : why;
      if (target.sendError) target.sendError(res, err, requestId);
      else sendError(res, err, requestId, target.onIncident);
    }
  };
  const headersTimer = setTimeout(() => fail(`sent no response within ${Math.round(timeouts.headersMs / 1000)} s`), timeouts.headersMs);
  const touch = () => {
    clearTimeout(idle);
    idle = setTimeout(() => fail(`sent nothing for ${Math.round(timeouts.idleMs / 1000)} s`), timeouts.idleMs);
  };

  let informational = 0;
  upstream.on('information', () => {
    if (++informational > MAX_INFORMATIONAL) fail(`sent more than ${MAX_INFORMATIONAL} informational responses`);
  });
  upstream.on('error', (err: NodeJS.ErrnoException) => {
    // A preview's tunnel could not be opened (nothing listens, the agent refused): said as it is.
    // So is a node that holds the sandbox and cannot be reached (NODE_UNAVAILABLE).
    if (err instanceof ServiceError) {
      if (!done && mayBeAgentGone(err)) target.onAgentGone?.();
      return fail(err);
    }
    // Not when this side ended it (a client that went away, a timeout): that says nothing of the agent.
    if (!done && mayBeAgentGone(err)) target.onAgentGone?.();
    fail(`is not answering properly`, err.message);
  });
  upstream.on('upgrade', (_res, socket) => {
    socket.destroy();
    fail('switched protocols without being asked to');
  });
  upstream.on('response', (ures) => {
    ures.on('error', () => fail('broke off its response'));
    if (done) {
      ures.destroy();
      return;
    }
    clearTimeout(headersTimer);
    observe(true);
    const status = ures.statusCode;
    if (status === undefined || !Number.isInteger(status) || status < 200 || status > 599) {
      fail(`answered with an invalid status ${JSON.stringify(status)}`);
      return;
    }
    const out = relayableHeaders(ures, preview);
    if (typeof out === 'string') {
      fail(out);
      return;
    }
    out['x-request-id'] = requestId;
    try {
      res.writeHead(status, out);
    } catch (err) {
      fail('answered with headers that cannot be relayed', err instanceof Error ? err.message : undefined);
      return;
    }
    const relayInJs = () => {
      touch();
      ures.on('data', touch);
      res.on('drain', touch);
      ures.on('end', finish);
      ures.pipe(res);
    };
    const length = bodyLength(ures.headers);
    const up = ures.socket;
    const bodyExpected = req.method !== 'HEAD' && status !== 204 && status !== 304;
    if (bodyExpected && length !== undefined && target.splice?.worth(length, up, req.socket) && res.socket === req.socket && up.readableLength === 0) {
      // Node reads no more of the agent's answer: the rest of the body goes in the kernel.
      const release = holdReads(up);
      // The bytes of the body that came with the head are pushed after this handler returns.
      setImmediate(() => void spliceResponse(release, length));
      return;
    }
    relayInJs();

    async function spliceResponse(release: (resume?: boolean) => void, length: number): Promise<void> {
      if (done) return release();
      let got = 0;
      for (let c: Buffer | null; (c = ures.read() as Buffer | null) !== null; ) {
        got += c.length;
        res.write(c);
      }
      if (got > length) return fail('sent more than its content-length');
      let outcome: Awaited<ReturnType<SpliceRelay['copy']>>;
      try {
        if (got === 0) res.flushHeaders();
        await flushed(req.socket);
        outcome = done ? 'failed' : await target.splice!.copy(up, req.socket, length - got, timeouts.idleMs);
      } catch {
        outcome = 'failed';
      }
      if (done) return;
      if (outcome === 'fallback') {
        // Nothing was moved: Node reads on where it stopped.
        release(true);
        return relayInJs();
      }
      if (outcome !== 'done') return fail(outcome === 'idle' ? `sent nothing for ${Math.round(timeouts.idleMs / 1000)} s` : 'broke off its response');
      // Node's parser of this connection still waits for the body it never saw: it is not reused.
      finish();
      upstream.destroy();
      res.end();
    }
  });

  // A client that goes away cancels the upstream request (and with it a streaming download).
  res.on('close', () => {
    if (!res.writableFinished) {
      finish();
      upstream.destroy();
    }
  });
  res.on('error', () => upstream.destroy());
  req.on('error', () => upstream.destroy());
  const reqLength = bodyLength(req.headers);
  if (reqLength !== undefined && !req.complete && target.splice?.worth(reqLength, req.socket, req.socket)) spliceRequest(target.splice, reqLength);
  else req.pipe(upstream);

  /**
   * A large request body goes to the agent in the kernel. Node's parser of the client's connection
   * then never sees the body's bytes, so the connection is closed after this answer: a request
   * after it could not be told from the body, and is never relayed unchecked.
   */
  function spliceRequest(splice: SpliceRelay, length: number): void {
    const release = holdReads(req.socket);
    res.shouldKeepAlive = false;
    upstream.once('socket', (sock) => {
      const go = () => void sendBody(sock as Socket, length);
      if ((sock as Socket).connecting) sock.once('connect', go);
      else go();
    });
    async function sendBody(sock: Socket, length: number): Promise<void> {
      if (done) return;
      if (!splice.worth(length, sock, req.socket)) {
        release(true);
        req.pipe(upstream);
        return;
      }
      let got = 0;
      for (let c: Buffer | null; (c = req.read() as Buffer | null) !== null; ) {
        got += c.length;
        upstream.write(c);
      }
      if (req.complete || got >= length) {
        release(true);
        upstream.end();
        return;
      }
      let outcome: Awaited<ReturnType<SpliceRelay['copy']>>;
      try {
        if (got === 0) upstream.flushHeaders();
        await flushed(sock);
        outcome = done ? 'failed' : await splice.copy(req.socket, sock, length - got, timeouts.idleMs);
      } catch {
        outcome = 'failed';
      }
      if (outcome === 'done') upstream.end();
      else if (outcome === 'fallback') {
        release(true);
        req.pipe(upstream);
      } else if (!done && !res.headersSent) {
        // The client stopped sending its body (gone, or idle): nothing more to answer.
        finish();
        upstream.destroy();
        res.destroy();
      }
    }
  }
}

/** A message's body length when it is framed by Content-Length alone. */
export function bodyLength(headers: IncomingMessage['headers']): number | undefined {
  if (headers['transfer-encoding'] !== undefined) return undefined;
  const v = headers['content-length'];
  return v !== undefined && /^\d{1,15}$/.test(v) ? Number(v) : undefined;
}

/** The agent's response headers that may go to the client, or why they may not. */
function relayableHeaders(ures: IncomingMessage, preview: boolean): OutgoingHttpHeaders | string {
  const out: OutgoingHttpHeaders = {};
  for (const [k, v0] of Object.entries(ures.headers)) {
    let v = v0;
    if (preview && v !== undefined && !RESPONSE_HOP_HEADERS.has(k)) {
      // The app's own cookies and CORS are its business; the gateway's preview cookies are not.
      if (k === 'set-cookie') v = (v as string[]).filter(appSetCookieAllowed);
      if (!TOKEN_RE.test(k)) return `answered with an invalid header name ${JSON.stringify(k.slice(0, 64))}`;
      const values = Array.isArray(v) ? v : [v];
      if (values.some((x) => typeof x !== 'string' || !VALUE_RE.test(x))) return `answered with an invalid value of header ${k}`;
      if (values.length) out[k] = v;
      continue;
    }
    // Which origins may read an answer is the gateway's to say (gateway.ts), not the sandbox's.
    // Nor may it set cookies for this host (which the API shares: a flood of them would lock a
    // browser out of the console).
    if (v === undefined || RESPONSE_HOP_HEADERS.has(k) || k.startsWith('access-control-') || k === 'set-cookie') continue;
    if (!TOKEN_RE.test(k)) return `answered with an invalid header name ${JSON.stringify(k.slice(0, 64))}`;
    const values = Array.isArray(v) ? v : [v];
    if (values.some((x) => typeof x !== 'string' || !VALUE_RE.test(x))) return `answered with an invalid value of header ${k}`;
    out[k] = v;
  }
  return out;
}

/** 502: the sandbox's agent did not answer as it must; `detail` (a socket error, which names host paths) is logged only. */
export function agentUnavailable(sandboxId: string, why: string, detail?: string): ServiceError {
  const se = new ServiceError('AGENT_UNAVAILABLE', `the sandbox's agent ${why}`, { id: sandboxId });
  return detail ? se.withDetail(detail) : se;
}

/** Logging an incident must not take the request (or the process, from a listener) down. */
export function reportIncident(onIncident: OnIncident | undefined, incident: Incident, requestId: string): void {
  try {
    onIncident?.(incident, requestId);
  } catch {
    // the answer still goes out
  }
}

/** A JSON error (renderError) to a client whose response has not started; never throws. */
export function sendError(res: ServerResponse, err: unknown, requestId: string, onIncident?: OnIncident): void {
  const r = renderError(err, requestId);
  if (r.incident) reportIncident(onIncident, r.incident, requestId);
  const text = JSON.stringify(r.body);
  try {
    res.writeHead(r.status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), 'x-request-id': requestId, ...r.headers });
    res.end(text);
  } catch {
    res.destroy();
  }
}
