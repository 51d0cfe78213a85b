import { Agent, type AgentOptions, type ClientRequestArgs } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import type { AgentDial } from '../services/routes.js';
import { ServiceError } from '@sandboxd/protocol';
import type { IncomingMessage } from 'node:http';
import { agentUnavailable, PREVIEW_DROPPED_SET_COOKIE, PREVIEW_TOKEN_HEADER, withoutPreviewCookies, type OnIncident } from './proxy.js';
import { rawError, relayAnswerHead } from './tunnel.js';
import type { SpliceRelay } from './splice.js';

/** The most the agent's answer to a tunnel request may hold before its end. */
const MAX_ANSWER_HEAD = 16 * 1024;

/**
 * A byte stream to `port` inside a sandbox: the agent (which lives in the sandbox's network
 * namespace, so loopback-only servers are reached too) is asked over its socket to connect, and
 * answers 101 and then relays bytes, or 502 when nothing listens there. The agent's answer is a
 * sandbox's, so hostile: only its status line is read (bounded in size and time); its body never
 * reaches a client.
 */
export function openPortTunnel(dial: AgentDial, sandboxId: string, port: number, requestId: string, timeoutMs = 10_000): Promise<Socket> {
  return new Promise((resolve, reject) => {
    let sock: Socket | undefined;
    let buf = Buffer.alloc(0);
    let settled = false;
    const timer = setTimeout(() => fail(agentUnavailable(sandboxId, `did not open a connection to port ${port} within ${Math.round(timeoutMs / 1000)} s`)), timeoutMs);
    function fail(err: Error): void {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock?.destroy();
      reject(err);
    }
    dial(timeoutMs).then(
      (s) => {
        if (settled) {
          s.destroy();
          return;
        }
        sock = s;
        s.on('error', (err) => fail(agentUnavailable(sandboxId, 'is not answering', err.message)));
        s.on('close', () => fail(agentUnavailable(sandboxId, `closed the connection to port ${port}`)));
        s.on('data', onData);
        s.setNoDelay(true);
        s.write(`GET /ports/tunnel?port=${port} HTTP/1.1\r\nHost: agent\r\nConnection: Upgrade\r\nUpgrade: sandboxd-tcp\r\nX-Request-ID: ${requestId}\r\n\r\n`);
      },
      (err: Error) => fail(err instanceof ServiceError ? err : agentUnavailable(sandboxId, 'is not answering', err.message)),
    );
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) {
        if (buf.length > MAX_ANSWER_HEAD) fail(agentUnavailable(sandboxId, 'answered a tunnel request with an endless head'));
        return;
      }
      sock!.off('data', onData);
      const status = /^HTTP\/1\.[01] (\d{3})[ \r]/.exec(buf.subarray(0, Math.min(end + 2, 64)).toString('latin1'))?.[1];
      if (status === '101') {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        sock!.removeAllListeners('close');
        sock!.removeAllListeners('error');
        sock!.pause();
        const rest = buf.subarray(end + 4);
        if (rest.length) sock!.unshift(rest);
        resolve(sock!);
      } else if (status === '502') {
        fail(new ServiceError('PORT_NOT_LISTENING', `nothing is listening on port ${port} inside sandbox ${sandboxId}`, { id: sandboxId, port }));
      } else {
        fail(agentUnavailable(sandboxId, `answered a tunnel request to port ${port} with ${status ? `status ${status}` : 'no valid status line'}`));
      }
    };
  });
}

/**
 * An HTTP agent whose connections are tunnels to one port of one sandbox: previews reuse them
 * (keep-alive), as a browser's requests to a dev server come in bursts.
 */
export class PortTunnelAgent extends Agent {
  constructor(
    private dial: () => AgentDial,
    private sandboxId: string,
    private port: number,
    opts: AgentOptions = { keepAlive: true, maxSockets: 64, maxFreeSockets: 8, keepAliveMsecs: 10_000 },
  ) {
    super(opts);
  }

  override createConnection(_options: ClientRequestArgs, callback?: (err: Error | null, stream: Duplex) => void): undefined {
    if (!callback) throw new Error('PortTunnelAgent connects asynchronously: a callback is required');
    openPortTunnel(this.dial(), this.sandboxId, this.port, 'preview').then(
      (sock) => {
        // The request takes the socket on the next tick (its listeners then); the flow resumes on the one after.
        callback(null, sock);
        sock.resume();
      },
      (err: Error) => callback(err, undefined as unknown as Duplex),
    );
    return undefined;
  }
}

export interface PreviewUpgrade {
  req: IncomingMessage;
  client: Socket;
  head: Buffer;
  dial: AgentDial;
  sandboxId: string;
  port: number;
  requestId: string;
  /** No byte either way for this long: both sides are closed. */
  idleMs: number;
  /** The tunnel to the app is open (to be cut with the sandbox's other connections). */
  onUpstream: (upstream: Socket) => void;
  /** Once, when the client's connection is gone (and the tunnel with it). */
  onClose: (upstream: Socket | undefined) => void;
  onIncident?: OnIncident;
  splice?: SpliceRelay;
}

/** The app's answer head goes to the client as it is, but for cookies named like the gateway's own, or nameless. */
const PREVIEW_DROPPED_ANSWER = PREVIEW_DROPPED_SET_COOKIE;

/**
 * An upgrade to a preview (a dev server's hot-reload WebSocket, say): the request goes to the app
 * through a tunnel to its port, without the gateway's credentials, then bytes flow both ways
 * unparsed. Nothing listening, or an agent that does not open the tunnel, is an HTTP error to the
 * client; after the app's answer, only a cut.
 */
export function openPreviewUpgrade(u: PreviewUpgrade): void {
  let upstream: Socket | undefined;
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    upstream?.destroy();
    u.onClose(upstream);
  };
  u.client.on('close', close);
  u.client.setTimeout(u.idleMs, () => u.client.destroy());
  openPortTunnel(u.dial, u.sandboxId, u.port, u.requestId).then(
    (up) => {
      if (closed || u.client.destroyed) {
        up.destroy();
        return;
      }
      upstream = up;
      u.onUpstream(up);
      up.on('error', () => u.client.destroy());
      up.on('close', () => u.client.destroy());
      let text = `${u.req.method} ${u.req.url} HTTP/1.1\r\n`;
      for (let i = 0; i < u.req.rawHeaders.length; i += 2) {
        const name = u.req.rawHeaders[i]!;
        const lower = name.toLowerCase();
        if (lower === PREVIEW_TOKEN_HEADER) continue;
        let value = u.req.rawHeaders[i + 1]!;
        if (lower === 'cookie') {
          const kept = withoutPreviewCookies(value);
          if (kept === undefined) continue;
          value = kept;
        }
        text += `${name}: ${value}\r\n`;
      }
      up.write(`${text}\r\n`);
      if (u.head.length) up.write(u.head);
      up.resume();
      u.client.pipe(up);
      relayAnswerHead(up, u.client, PREVIEW_DROPPED_ANSWER, u.splice && { splice: u.splice, idleMs: u.idleMs });
    },
    (err: unknown) => rawError(u.client, err, u.requestId, u.onIncident),
  );
}
