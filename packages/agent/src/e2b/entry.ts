import type { IncomingMessage, ServerResponse } from 'node:http';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import type { EnvdDeps } from './deps.js';
import { drainRequest } from '../http/drain.js';
import { downloadFile, sendError, uploadFiles } from './files-http.js';
import { filesystemService } from './filesystem-service.js';
import { Filesystem } from './gen/filesystem/filesystem_pb.js';
import { Process } from './gen/process/process_pb.js';
import { processService } from './process-service.js';
import { ProcessTable } from './processes.js';
import { SandboxUsers } from './users.js';
import { PolledWatchers } from './watcher.js';

/** Where the gateway forwards what E2B's clients send to the in-sandbox daemon's port. */
export const ENVD_PREFIX = '/e2b/envd';
/** Largest Connect message either way (SendInput data, a ListDir answer). */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export type EnvdHandler = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * E2B's in-sandbox daemon ("envd") on the agent's socket, below /e2b/envd: the Connect services
 * process.Process and filesystem.Filesystem (JSON and binary, unary and streaming), and the plain
 * HTTP /files and /health. Built into its own bundle (envd.cjs) and loaded at the first request,
 * so a sandbox nobody reaches through E2B's clients pays nothing for it.
 */
export function createEnvd(agent: EnvdDeps['agent']): EnvdHandler {
  const deps: EnvdDeps = { agent, users: new SandboxUsers(), processes: new ProcessTable(agent.helperPath), watchers: new PolledWatchers() };
  const rpc = connectNodeAdapter({
    requestPathPrefix: ENVD_PREFIX,
    readMaxBytes: MAX_MESSAGE_BYTES,
    writeMaxBytes: MAX_MESSAGE_BYTES,
    routes: (router) => {
      router.service(Process, processService(deps));
      router.service(Filesystem, filesystemService(deps));
    },
  });
  return (req, res) => {
    const url = new URL(req.url ?? '/', 'http://agent');
    const path = url.pathname.slice(ENVD_PREFIX.length);
    if (path === '/health') {
      res.writeHead(204);
      res.end();
      return;
    }
    if (path === '/files') {
      const work = req.method === 'GET' || req.method === 'HEAD' ? downloadFile(deps, req, res, url) : req.method === 'POST' ? uploadFiles(deps, req, res, url) : null;
      if (!work) {
        res.writeHead(405, { allow: 'GET, HEAD, POST', 'content-type': 'application/json' });
        res.end(JSON.stringify({ code: 405, message: `${req.method} is not allowed on /files` }));
        return;
      }
      work.catch(async (err: unknown) => {
        await drainRequest(req);
        sendError(res, err, 'files');
      });
      return;
    }
    rpc(req, res);
  };
}
