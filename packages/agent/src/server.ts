import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { ServiceError } from './proto.js';
import type { AgentStats } from './metrics/stats.js';
import { drainRequest } from './http/drain.js';
import { renderAgentError } from './http/errors.js';
import { IdleCollector } from './memory.js';
import type { Route, RouteContext, UpgradeRoute } from './context.js';

const MAX_JSON_BYTES = 10 * 1024 * 1024;

function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let overflowed = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_JSON_BYTES) {
        overflowed = true;
        chunks.length = 0;
        const err = new ServiceError('PAYLOAD_TOO_LARGE', `request body exceeds ${MAX_JSON_BYTES} bytes; send files with /files/upload`);
        void drainRequest(req).then(() => reject(err));
        return;
      }
      chunks.push(c);
    });
    req.on('error', reject);
    req.on('end', () => {
      if (overflowed) return;
      const text = Buffer.concat(chunks).toString('utf8').trim();
      if (text === '') return resolve({});
      try {
        const v: unknown = JSON.parse(text);
        if (v === null || typeof v !== 'object' || Array.isArray(v)) {
          return reject(new ServiceError('VALIDATION_ERROR', 'request body must be a JSON object'));
        }
        resolve(v as Record<string, unknown>);
      } catch {
        reject(new ServiceError('VALIDATION_ERROR', 'request body is not valid JSON'));
      }
    });
  });
}

export function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && given.length > 0 && given.length <= 200 ? given : randomUUID();
}

/** A small router: exact paths first, then '/*' prefixes; every response carries X-Request-ID. */
export function createAgentServer(stats: AgentStats, routes: Route[], upgrades: UpgradeRoute[] = []): Server {
  const exact = new Map<string, Route>();
  const prefixes: Route[] = [];
  for (const r of routes) {
    if (r.path.endsWith('/*')) prefixes.push(r);
    else exact.set(`${r.method} ${r.path}`, r);
  }
  const knownPaths = new Set(routes.map((r) => r.path));
  const upgradeByPath = new Map(upgrades.map((u) => [u.path, u]));
  const idle = new IdleCollector();

  const server = createServer((req, res) => {
    const requestId = requestIdOf(req);
    res.setHeader('x-request-id', requestId);
    res.on('finish', () => idle.activity());
    const url = new URL(req.url ?? '/', 'http://agent');
    const method = req.method ?? 'GET';
    stats.countRequest(url.pathname);

    let route = exact.get(`${method} ${url.pathname}`);
    let rest = '';
    if (!route) {
      route = prefixes.find((p) => p.method === method && url.pathname.startsWith(p.path.slice(0, -1)));
      if (route) rest = safeDecode(url.pathname.slice(route.path.length - 1));
    }
    const ctx: RouteContext = { req, res, url, requestId, rest, body: () => readJson(req) };

    const fail = (err: unknown) => {
      stats.totalErrors++;
      const r = renderAgentError(err, requestId, `${method} ${url.pathname}`);
      if (res.headersSent) {
        res.destroy();
        return;
      }
      send(res, r.status, r.body, r.headers);
    };

    if (!route) {
      const known = knownPaths.has(url.pathname) || prefixes.some((p) => url.pathname.startsWith(p.path.slice(0, -1)));
      fail(new ServiceError(known ? 'METHOD_NOT_ALLOWED' : 'ROUTE_NOT_FOUND', `no route for ${method} ${url.pathname}`));
      return;
    }
    const handler = route.handler;
    Promise.resolve()
      .then(() => handler(ctx))
      .then((result) => {
        if (result === undefined || res.headersSent || res.writableEnded) return;
        send(res, 200, result);
      })
      .catch(fail);
  });

  server.on('upgrade', (req: IncomingMessage, socket, head: Buffer) => {
    const requestId = requestIdOf(req);
    const url = new URL(req.url ?? '/', 'http://agent');
    stats.countRequest(url.pathname);
    const route = upgradeByPath.get(url.pathname);
    if (!route) {
      stats.totalErrors++;
      const body = JSON.stringify(new ServiceError('ROUTE_NOT_FOUND', `no WebSocket endpoint at ${url.pathname}`).toBody(requestId));
      socket.end(`HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`);
      return;
    }
    route.handler(req, socket, head, requestId);
  });

  // Long executions and slow uploads are normal here; the gateway in front owns client timeouts.
  server.requestTimeout = 0;
  server.headersTimeout = 60_000;
  server.keepAliveTimeout = 65_000;
  return server;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
