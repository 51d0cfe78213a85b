import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';

/** Response headers a browser page may read of the agent's answers. */
export const EXPOSED_HEADERS = 'x-request-id, retry-after, content-disposition, content-length';
const PREFLIGHT_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE';
/** Request headers a preflight may ask for: names only (RFC 9110 tokens), a bounded list. */
const HEADER_LIST_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+(\s*,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+){0,31}$/;

/** CORS preflight: answered by the gateway itself (it carries no credential), never by the sandbox. */
export function preflight(req: IncomingMessage, res: ServerResponse, requestId: string): void {
  const asked = req.headers['access-control-request-headers'];
  const headers: Record<string, string> = {
    'access-control-allow-origin': '*',
    'access-control-allow-methods': PREFLIGHT_METHODS,
    'access-control-max-age': '600',
    'x-request-id': requestId,
    'content-length': '0',
  };
  if (typeof asked === 'string' && HEADER_LIST_RE.test(asked.trim())) headers['access-control-allow-headers'] = asked.trim();
  res.writeHead(204, headers);
  res.end();
}

/**
 * The gateway's own CORS for a request from a browser page to the agent's API: a preflight is
 * answered here (true: nothing more to do); anything else gets the headers that let the page read it.
 */
export function agentCors(req: IncomingMessage, res: ServerResponse, requestId: string): boolean {
  if (req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined) {
    preflight(req, res, requestId);
    return true;
  }
  res.setHeader('access-control-allow-origin', '*');
  res.setHeader('access-control-expose-headers', EXPOSED_HEADERS);
  return false;
}

/** The client's X-Request-Id when it looks like one, else a new one. */
export function requestIdOf(req: IncomingMessage): string {
  const incoming = req.headers['x-request-id'];
  return typeof incoming === 'string' && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : randomUUID();
}

export function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
}

/** Stops listening and cuts the connections still open (kept-alive ones would hold the close back). */
export function closeServer(server: Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
