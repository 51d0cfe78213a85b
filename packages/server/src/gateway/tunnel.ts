import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { AgentDial } from '../services/routes.js';
import { renderError, ServiceError } from '@sandboxd/protocol';
import { AGENT_DIAL_TIMEOUT_MS, agentUnavailable, mayBeAgentGone, reportIncident, type OnIncident } from './proxy.js';
import { flushed, holdReads, type SpliceRelay } from './splice.js';

/** The subprotocol a browser's WebSocket offers its credential in: `sandboxd.auth.<token or API key>`. */
export const AUTH_SUBPROTOCOL_PREFIX = 'sandboxd.auth.';

/** The credential offered as a WebSocket subprotocol, if any. */
export function subprotocolCredential(req: IncomingMessage): string | undefined {
  const offered = req.headers['sec-websocket-protocol'];
  if (typeof offered !== 'string') return undefined;
  for (const p of offered.split(',')) {
    const v = p.trim();
    if (v.startsWith(AUTH_SUBPROTOCOL_PREFIX) && v.length > AUTH_SUBPROTOCOL_PREFIX.length) return v.slice(AUTH_SUBPROTOCOL_PREFIX.length);
  }
  return undefined;
}

/**
 * A WebSocket upgrade relayed to the agent as a byte tunnel: the request line and headers (without
 * our credentials) go to the agent's socket, and from then on bytes flow both ways unparsed, so
 * nothing the sandbox sends can upset the gateway. The tunnel closes when either side does, and
 * when no byte has moved either way for `idleMs` (the agent pings its WebSocket clients every 30 s,
 * so a live client's tunnel never idles out; a dead client's or a silent sandbox's does).
 *
 * `onClose` runs once, when the client's connection is gone (the agent's goes with it).
 */
export function openTunnel(
  req: IncomingMessage,
  client: Socket,
  head: Buffer,
  dial: AgentDial,
  requestId: string,
  idleMs: number,
  onClose: (upstream: Socket | undefined) => void,
  onAgentGone?: () => void,
  onIncident?: OnIncident,
  sandboxId = '',
  onUpstream?: (upstream: Socket) => void,
  splice?: SpliceRelay,
): void {
  let upstream: Socket | undefined;
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    upstream?.destroy();
    onClose(upstream);
  };
  client.on('close', close);
  // Both directions pass through the client socket, so its timer sees all traffic.
  client.setTimeout(idleMs, () => {
    client.destroy();
    upstream?.destroy();
  });
  dial(AGENT_DIAL_TIMEOUT_MS).then(
    (up) => {
      if (closed || client.destroyed) {
        up.destroy();
        return;
      }
      upstream = up;
      onUpstream?.(up);
      let answered = false;
      up.on('close', () => client.destroy());
      up.on('error', (err: NodeJS.ErrnoException) => {
        if (mayBeAgentGone(err)) onAgentGone?.();
        // Before the agent said anything the client can still get an HTTP answer; after, only a cut.
        if (!answered) rawError(client, agentUnavailable(sandboxId, 'is not answering', err.message), requestId, onIncident);
        else client.destroy();
      });
      up.once('data', () => (answered = true));
      let text = `${req.method} ${req.url} HTTP/1.1\r\n`;
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        const name = req.rawHeaders[i]!;
        const lower = name.toLowerCase();
        // Cookies are the browser's for this host (other services on it, a parent domain's
        // session): none of the sandbox's business.
        if (lower === 'authorization' || lower === 'x-api-key' || lower === 'x-request-id' || lower === 'cookie') continue;
        let value = req.rawHeaders[i + 1]!;
        if (lower === 'sec-websocket-protocol') {
          // A credential offered as a subprotocol (gateway.ts) stays here; the others go on.
          value = value
            .split(',')
            .map((p) => p.trim())
            .filter((p) => p && !p.startsWith(AUTH_SUBPROTOCOL_PREFIX))
            .join(', ');
          if (!value) continue;
        }
        text += `${name}: ${value}\r\n`;
      }
      text += `X-Request-ID: ${requestId}\r\n\r\n`;
      up.write(text);
      if (head.length) up.write(head);
      client.pipe(up);
      relayAnswerHead(up, client, undefined, splice && { splice, idleMs });
    },
    (err: NodeJS.ErrnoException) => {
      if (mayBeAgentGone(err)) onAgentGone?.();
      // A ServiceError says what it is (its node cannot be reached, say); a socket's error is the agent's.
      rawError(client, err instanceof ServiceError ? err : agentUnavailable(sandboxId, 'is not answering', err.message), requestId, onIncident);
    },
  );
}

/** The most an agent's answer to an upgrade may put before its first byte of WebSocket data. */
const MAX_ANSWER_HEAD = 16 * 1024;

/**
 * The agent's answer head (101 and its headers) goes to the client without the headers the
 * gateway alone may send (Set-Cookie: a sandbox could flood a browser's cookies for this host,
 * which the API shares; access-control-*); then bytes flow unparsed.
 */
export function relayAnswerHead(
  upstream: Socket,
  client: Socket,
  dropped: RegExp = /^(set-cookie|access-control-[^:]*)\s*:/i,
  inKernel?: { splice: SpliceRelay; idleMs: number },
): void {
  let buf = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    buf = Buffer.concat([buf, chunk]);
    const end = buf.indexOf('\r\n\r\n');
    if (end < 0) {
      if (buf.length > MAX_ANSWER_HEAD) {
        upstream.destroy();
        client.destroy();
      }
      return;
    }
    upstream.off('data', onData);
    const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
    const kept = lines.filter((l, i) => i === 0 || !dropped.test(l));
    client.write(Buffer.from(`${kept.join('\r\n')}\r\n\r\n`, 'latin1'));
    const rest = buf.subarray(end + 4);
    if (rest.length) client.write(rest);
    upstream.pipe(client);
    if (inKernel?.splice.canRelay(client, upstream)) handOverAfter(inKernel.splice, client, upstream, inKernel.idleMs);
  };
  upstream.on('data', onData);
}

/**
 * The rest of an upgraded connection (its heads are relayed: from here bytes flow unparsed either
 * way) goes to the in-kernel relay, which passes a half-close on and gives up after `idleMs` with
 * no byte either way. Both sockets are closed when it ends; if it cannot start, the JavaScript
 * relay carries on.
 */
/**
 * Most upgraded connections carry little (a terminal, a dev server's reload signal): a helper's
 * start would cost more than it saves. One that has moved `splice.minBytes` either way is handed over.
 */
function handOverAfter(splice: SpliceRelay, client: Socket, upstream: Socket, idleMs: number): void {
  let moved = 0;
  const count = (c: Buffer) => {
    moved += c.length;
    if (moved < splice.minBytes) return;
    client.off('data', count);
    upstream.off('data', count);
    // After this chunk has gone on through the pipe (its listener runs after this one).
    setImmediate(() => {
      if (!client.destroyed && !upstream.destroyed) handOver(splice, client, upstream, idleMs);
    });
  };
  client.on('data', count);
  upstream.on('data', count);
}

export function handOver(splice: SpliceRelay, client: Socket, upstream: Socket, idleMs: number): void {
  client.unpipe(upstream);
  upstream.unpipe(client);
  const releaseClient = holdReads(client);
  const releaseUpstream = holdReads(upstream);
  // What Node read already goes first.
  for (let c: Buffer | null; (c = client.read() as Buffer | null) !== null; ) upstream.write(c);
  for (let c: Buffer | null; (c = upstream.read() as Buffer | null) !== null; ) client.write(c);
  // Node sees none of the traffic now: the relay keeps the idle clock.
  client.setTimeout(0);
  const cut = () => {
    client.destroy();
    upstream.destroy();
  };
  Promise.all([flushed(client), flushed(upstream)])
    .then(() => (client.destroyed || upstream.destroyed ? 'failed' : splice.relay(client, upstream, idleMs)))
    .then((outcome) => {
      if (outcome !== 'fallback') return cut();
      releaseClient(true);
      releaseUpstream(true);
      client.setTimeout(idleMs);
      client.pipe(upstream);
      upstream.pipe(client);
    }, cut);
}

/** An HTTP error written on a raw (upgrade) socket, which is then closed; never throws. */
export function rawError(socket: Socket, err: unknown, requestId: string, onIncident?: OnIncident): void {
  const r = renderError(err, requestId);
  if (r.incident) reportIncident(onIncident, r.incident, requestId);
  const text = JSON.stringify(r.body);
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  let extra = '';
  for (const [k, v] of Object.entries(r.headers)) if (k !== 'connection') extra += `${k}: ${v}\r\n`;
  socket.end(
    `HTTP/1.1 ${r.status} ${r.body.code}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nx-request-id: ${requestId}\r\n${extra}connection: close\r\n\r\n${text}`,
  );
}
