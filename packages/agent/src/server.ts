import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { ServiceError } from '@sandboxd/protocol';
import type { AgentState, Route, RouteContext } from './context.js';

const MAX_JSON_BYTES = 10 * 1024 * 1024;

function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_JSON_BYTES) {
        reject(new ServiceError('PAYLOAD_TOO_LARGE', `request body exceeds ${MAX_JSON_BYTES} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('error', reject);
    req.on('end', () => {
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

/** A small router: exact paths first, then '/*' prefixes; every response carries X-Request-ID. */
export function createAgentServer(state: AgentState, routes: Route[]): Server {
  const exact = new Map<string, Route>();
  const prefixes: Route[] = [];
  for (const r of routes) {
    if (r.path.endsWith('/*')) prefixes.push(r);
    else exact.set(`${r.method} ${r.path}`, r);
  }
  const knownPaths = new Set(routes.map((r) => r.path));

  return createServer((req, res) => {
    const requestId = (req.headers['x-request-id'] as string | undefined) ?? randomUUID();
    res.setHeader('x-request-id', requestId);
    const url = new URL(req.url ?? '/', 'http://agent');
    const method = req.method ?? 'GET';
    state.totalRequests++;
    state.requestsByPath.set(url.pathname, (state.requestsByPath.get(url.pathname) ?? 0) + 1);

    let route = exact.get(`${method} ${url.pathname}`);
    if (!route) route = prefixes.find((p) => p.method === method && url.pathname.startsWith(p.path.slice(0, -1)));
    const ctx: RouteContext = { req, res, url, requestId, body: () => readJson(req) };

    const fail = (err: unknown) => {
      state.totalErrors++;
      const se = err instanceof ServiceError ? err : new ServiceError('INTERNAL_ERROR', err instanceof Error ? err.message : String(err));
      if (res.headersSent) {
        res.destroy();
        return;
      }
      send(res, se.status, se.toBody(requestId), se.headers);
    };

    if (!route) {
      const code = knownPaths.has(url.pathname) ? 'METHOD_NOT_ALLOWED' : 'ROUTE_NOT_FOUND';
      fail(new ServiceError(code, `no route for ${method} ${url.pathname}`));
      return;
    }
    Promise.resolve()
      .then(() => route.handler(ctx))
      .then((result) => {
        if (result === undefined || res.headersSent || res.writableEnded) return;
        send(res, 200, result);
      })
      .catch(fail);
  });
}
