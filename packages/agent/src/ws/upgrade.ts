import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { WebSocket, WebSocketServer } from 'ws';

let wss: WebSocketServer | null = null;
/**
 * Every WebSocket client is pinged this often and dropped if it did not answer the previous ping.
 * The pings also keep a live client's tunnel through the gateway from idling out
 * (SANDBOXD_TUNNEL_IDLE_TIMEOUT_SECONDS, 300 s by default), however quiet the session.
 */
export const HEARTBEAT_MS = 30_000;
const requestIds = new WeakMap<IncomingMessage, string>();

/** Completes a WebSocket upgrade; `ws` is loaded on first use only (memory of idle agents). */
export async function acceptWebSocket(req: IncomingMessage, socket: Duplex, head: Buffer, requestId: string): Promise<WebSocket> {
  if (!wss) {
    const { WebSocketServer } = await import('ws');
    wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 16 * 1024 * 1024 });
    wss.on('headers', (headers, r) => {
      const id = requestIds.get(r);
      if (id) headers.push(`X-Request-ID: ${id}`);
    });
  }
  requestIds.set(req, requestId);
  const server = wss;
  const ws = await new Promise<WebSocket>((resolve) => server.handleUpgrade(req, socket, head, resolve));
  heartbeat(ws);
  return ws;
}

function heartbeat(ws: WebSocket): void {
  let answered = true;
  ws.on('pong', () => (answered = true));
  const timer = setInterval(() => {
    if (!answered) {
      ws.terminate();
      return;
    }
    answered = false;
    try {
      ws.ping();
    } catch {
      ws.terminate();
    }
  }, HEARTBEAT_MS);
  timer.unref();
  ws.once('close', () => clearInterval(timer));
}

/** Parses a client frame; null for anything that is not a JSON object. */
export function parseObjectFrame(data: unknown): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(String(data));
    if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // not JSON
  }
  return null;
}

/** Parses a client frame; null for anything that is not a JSON object with a string `type`. */
export function parseFrame(data: unknown): (Record<string, unknown> & { type: string }) | null {
  const v = parseObjectFrame(data);
  return v && typeof v.type === 'string' ? (v as Record<string, unknown> & { type: string }) : null;
}
