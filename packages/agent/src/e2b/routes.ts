import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Agent, Route, RouteContext } from '../context.js';
import { drainRequest } from '../http/drain.js';
import { ENVD_WIRE_PREFIX } from '../proto.js';
import { lazyDeps, type EnvdDeps } from './deps.js';
import { downloadFile, sendError, uploadFiles } from './files-http.js';
import { rtFsRoutes } from './rt-fs.js';
import { rtProcessRoutes } from './rt-process.js';

/** Where the gateway forwards E2B's plain HTTP calls to the in-sandbox daemon's port (/files, /health). */
export const ENVD_PREFIX = '/e2b/envd';
/** The agent's plain routes behind the gateway's Connect services (process.Process, filesystem.Filesystem). */
export const RT_PREFIX = ENVD_WIRE_PREFIX;

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE'];

/** E2B's /files: download (GET, HEAD) and upload (POST), errors in E2B's `{code, message}`. */
async function files(d: EnvdDeps, req: IncomingMessage, res: ServerResponse, url: URL): Promise<undefined> {
  const work = req.method === 'GET' || req.method === 'HEAD' ? downloadFile(d, req, res, url) : req.method === 'POST' ? uploadFiles(d, req, res, url) : null;
  if (!work) {
    await drainRequest(req);
    res.writeHead(405, { allow: 'GET, HEAD, POST', 'content-type': 'application/json' });
    res.end(JSON.stringify({ code: 405, message: `${req.method} is not allowed on /files` }));
    return undefined;
  }
  try {
    await work;
  } catch (err) {
    await drainRequest(req);
    sendError(res, err, 'files');
  }
  return undefined;
}

/**
 * E2B's in-sandbox daemon, as far as it stays in the sandbox: its plain HTTP /files and /health,
 * and the state behind its Connect services (processes, watchers) on plain routes below /e2b/rt,
 * which the daemon's gateway speaks Connect for.
 */
export function e2bRoutes(agent: Agent): Route[] {
  const deps = lazyDeps(agent);
  const health = (ctx: RouteContext): undefined => {
    ctx.res.writeHead(204);
    ctx.res.end();
    return undefined;
  };
  return [
    ...METHODS.map((method) => ({ method, path: `${ENVD_PREFIX}/health`, handler: health })),
    ...METHODS.map((method) => ({ method, path: `${ENVD_PREFIX}/files`, handler: (ctx: RouteContext) => files(deps(), ctx.req, ctx.res, ctx.url) })),
    ...rtProcessRoutes(RT_PREFIX, deps),
    ...rtFsRoutes(RT_PREFIX, deps),
  ];
}
