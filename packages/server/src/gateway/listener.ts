import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { safeUrl } from '../logging.js';
import type { RouteEntry } from '../services/routes.js';
import { refusalOf, type ConnectionLimits } from '../services/connections.js';
import type { RouteTable } from './routes.js';
import { sendError, type OnIncident } from './proxy.js';
import { rawError } from './tunnel.js';
import { isPreviewLink, type Previews, type PreviewTarget } from './previews.js';
import { agentCors, requestIdOf } from './http-helpers.js';

/** Requests a listener hands elsewhere before its own routing (true: taken). */
export interface Intercept {
  request(req: IncomingMessage, res: ServerResponse): boolean;
  upgrade(req: IncomingMessage, socket: Socket, head: Buffer): boolean;
}

/** What a gateway listener needs of the gateway. */
export interface ListenerCore {
  routes: Pick<RouteTable, 'get'>;
  connections: Pick<ConnectionLimits, 'watch'>;
  /** Logs each request to a sandbox's URL once it is answered (absent: none). */
  logRequest?: (fields: Record<string, unknown>) => void;
  incident: OnIncident;
  /** The credentials and state checks of a request to the agent (access.ts). */
  authorize(req: IncomingMessage, known: RouteEntry | undefined, upgrade: boolean, asked: string | undefined): Promise<RouteEntry>;
  previews: Pick<Previews, 'authorize' | 'link'>;
  /** Relays a request that was let through (to the port `pv` of a preview, else to the agent). */
  forward(req: IncomingMessage, res: ServerResponse, entry: RouteEntry, requestId: string, pv: PreviewTarget | undefined): void;
  /** Opens the tunnel of an upgrade that was let through (to the app's `port`, else to the agent). */
  tunnel(req: IncomingMessage, socket: Socket, head: Buffer, entry: RouteEntry, requestId: string, port: number | undefined): void;
  /** The use a request let through began is over. */
  end(sandboxId: string): void;
}

/** Which sandbox a listener's requests are for. */
export interface ListenerRouting {
  /** The sandbox a request is to, as the route table has it (absent: `asked` is looked up). */
  lookup: (req: IncomingMessage) => RouteEntry | undefined;
  asked: (req: IncomingMessage) => string | undefined;
  preview?: (req: IncomingMessage) => PreviewTarget | undefined;
  intercept?: Intercept;
}

/**
 * A listener of the gateway: logs each request, refuses what the connection limits refuse, answers
 * a preview's signed link and the agent API's CORS, then authorizes and forwards (an upgrade: tunnels).
 * `asked`: the sandbox id a request names (its port's, or its host's first label), for a 404's
 * message. `preview`: the sandbox port a request is for, when it is to a preview URL.
 */
export function makeGatewayServer(core: ListenerCore, { lookup, asked, preview = () => undefined, intercept }: ListenerRouting): Server {
  const server = createServer((req, res) => {
    if (intercept?.request(req, res)) return;
    const requestId = requestIdOf(req);
    const pv = preview(req);
    const logRequest = core.logRequest;
    if (logRequest) {
      const startedAt = performance.now();
      const entry = pv ? core.routes.get(pv.sandboxId) : lookup(req);
      res.once('close', () =>
        logRequest({
          request_id: requestId,
          sandbox_id: entry?.sandboxId ?? null,
          method: req.method,
          url: safeUrl(req.url ?? ''),
          status: res.headersSent ? res.statusCode : 499,
          ms: Math.round((performance.now() - startedAt) * 100) / 100,
          ...(entry ? { org: entry.orgId } : {}),
          ...(pv ? { preview_port: pv.port } : {}),
        }),
      );
    }
    const refused = refusalOf(req.socket);
    if (refused) return sendError(res, refused, requestId, core.incident);
    if (pv && isPreviewLink(req.url)) {
      core.previews.link(req, res, pv, requestId).catch((err: unknown) => sendError(res, err, requestId, core.incident));
      return;
    }
    // A preview's app answers its own CORS; the agent's API gets the gateway's.
    if (!pv && req.headers.origin !== undefined) {
      // Browsers (the console, a user's page) may call the agent API from another origin. No
      // credential is ambient (no cookies reach the sandbox; a token or key in a header the page
      // itself sets), so any origin may: an answer is readable only with a credential the page holds.
      if (agentCors(req, res, requestId)) return;
    }
    (pv ? core.previews.authorize(req, pv) : core.authorize(req, lookup(req), false, asked(req)))
      .then(
        (entry) => core.forward(req, res, entry, requestId, pv),
        (err: unknown) => sendError(res, err, requestId, core.incident),
      )
      .catch((err: unknown) => sendError(res, err, requestId, core.incident));
  });
  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    if (intercept?.upgrade(req, socket, head)) return;
    const requestId = requestIdOf(req);
    socket.on('error', () => socket.destroy());
    const refused = refusalOf(socket);
    if (refused) return rawError(socket, refused, requestId, core.incident);
    const pv = preview(req);
    (pv ? core.previews.authorize(req, pv) : core.authorize(req, lookup(req), true, asked(req)))
      .then(
        (entry) => {
          if (socket.destroyed) {
            core.end(entry.sandboxId);
            return;
          }
          core.tunnel(req, socket, head, entry, requestId, pv?.port);
        },
        (err: unknown) => rawError(socket, err, requestId, core.incident),
      )
      .catch((err: unknown) => rawError(socket, err, requestId, core.incident));
  });
  server.on('clientError', (_err, socket) => socket.destroy());
  core.connections.watch(server);
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 70_000;
  server.requestTimeout = 0;
  return server;
}
