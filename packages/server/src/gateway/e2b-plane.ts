import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { ServiceError } from '@sandboxd/protocol';
import { safeUrl } from '../logging.js';
import type { RouteEntry } from '../services/routes.js';
import type { TokenService } from '../services/tokens.js';
import { refusalOf } from '../services/connections.js';
import type { RouteTable } from './routes.js';
import type { OnIncident } from './proxy.js';
import type { PreviewTarget } from './previews.js';
import { agentCors, requestIdOf } from './http-helpers.js';
import type { Intercept } from './listener.js';
import {
  belowPrefix,
  checkSignedFileUrl,
  dropE2bHeaders,
  e2bAccessToken,
  e2bHeaderTarget,
  e2bPath,
  e2bPort,
  e2bUserHeader,
  rawE2bError,
  sendE2bError,
  signedFileRequest,
  E2B_CI_PORT,
  E2B_ENVD_PORT,
  E2B_SANDBOX_ID_HEADER,
  type E2bTarget,
} from './e2b.js';

/** What E2B's data plane needs of the gateway. */
export interface E2bCore {
  routes: Pick<RouteTable, 'get'>;
  tokens: Pick<TokenService, 'verify'>;
  /** The access token the control plane handed out for the sandbox's E2B clients. */
  e2bToken?: (sandboxId: string) => Promise<string | null | undefined>;
  logRequest?: (fields: Record<string, unknown>) => void;
  incident: OnIncident;
  /** The gateway's own credentials check (a Bearer token, an API key of the owning organization). */
  authorize(req: IncomingMessage, upgrade: boolean, sandboxId: string): Promise<RouteEntry>;
  authorizePreview(req: IncomingMessage, target: PreviewTarget): Promise<RouteEntry>;
  admit(sandboxId: string, mayWake: boolean): Promise<RouteEntry>;
  /** Relays a request that was let through; `pv`: to an app's port. */
  forward(
    req: IncomingMessage,
    res: ServerResponse,
    entry: RouteEntry,
    requestId: string,
    pv: PreviewTarget | undefined,
    fail: (res: ServerResponse, err: unknown, requestId: string) => void,
    extraHeaders: Record<string, string> | undefined,
  ): void;
  /** Opens a WebSocket tunnel for an upgrade that was let through: to the agent, or to the app's `port`. */
  tunnel(req: IncomingMessage, socket: Socket, head: Buffer, entry: RouteEntry, requestId: string, port: number | undefined): void;
  /** The use `admit` began is over. */
  end(sandboxId: string): void;
}

/**
 * E2B's data plane (e2b.ts holds its wire format): requests through its one base URL, and host
 * mode's `<port>-<id>.<domain>` names of E2B's in-sandbox ports, authorized with E2B's credentials
 * and relayed like any other request to the sandbox.
 */
export class E2bPlane {
  constructor(private core: E2bCore) {}

  /**
   * Host mode's E2B names: `49983-<id>.<domain>` (envd) and `49999-<id>.<domain>` (code
   * interpreter) reach the agent's E2B routes; a request under E2B's base URL prefix that names
   * its sandbox in E2b-Sandbox-Id is routed by its headers, whatever its host (the cluster's edge
   * has no API port to serve the base URL on).
   */
  hostIntercept(label: (req: IncomingMessage) => string | undefined): Intercept {
    const target = (req: IncomingMessage): { ok: E2bTarget } | { err: unknown } | { rest: string } | undefined => {
      const rest = belowPrefix(req.url);
      if (rest !== undefined && req.headers[E2B_SANDBOX_ID_HEADER] !== undefined) return { rest };
      const m = /^(\d{1,5})-([a-z0-9]{1,64})$/.exec(label(req) ?? '');
      if (!m || (Number(m[1]) !== E2B_ENVD_PORT && Number(m[1]) !== E2B_CI_PORT)) return undefined;
      try {
        const port = e2bPort(m[1]);
        return { ok: { sandboxId: m[2]!, port, ...e2bPath(port, req.url ?? '/') } };
      } catch (err) {
        return { err };
      }
    };
    return {
      request: (req, res) => {
        const t = target(req);
        if (!t) return false;
        if ('rest' in t) this.serve(req, res, t.rest);
        else if ('err' in t) sendE2bError(req, res, t.err, requestIdOf(req), this.core.incident);
        else this.request(req, res, t.ok, requestIdOf(req));
        return true;
      },
      upgrade: (req, socket, head) => {
        const t = target(req);
        if (!t) return false;
        if ('rest' in t) this.upgrade(req, socket, head, t.rest);
        else if ('err' in t) rawE2bError(socket, t.err, requestIdOf(req), this.core.incident);
        else {
          socket.on('error', () => socket.destroy());
          const refused = refusalOf(socket);
          if (refused) rawE2bError(socket, refused, requestIdOf(req), this.core.incident);
          else this.openUpgrade(req, socket, head, t.ok, requestIdOf(req));
        }
        return true;
      },
    };
  }

  /**
   * A request through E2B's base URL: `rest` is its path below the prefix; the sandbox and the
   * port inside it come from the routing headers.
   */
  serve(req: IncomingMessage, res: ServerResponse, rest: string): void {
    const requestId = requestIdOf(req);
    let target: E2bTarget;
    try {
      target = e2bHeaderTarget(req, rest);
    } catch (err) {
      this.log(req, res, requestId, undefined);
      return sendE2bError(req, res, err, requestId, this.core.incident);
    }
    this.request(req, res, target, requestId);
  }

  /** An upgrade (an app's WebSocket) through E2B's base URL. */
  upgrade(req: IncomingMessage, socket: Socket, head: Buffer, rest: string): void {
    const requestId = requestIdOf(req);
    socket.on('error', () => socket.destroy());
    const refused = refusalOf(socket);
    if (refused) return rawE2bError(socket, refused, requestId, this.core.incident);
    let target: E2bTarget;
    try {
      target = e2bHeaderTarget(req, rest);
    } catch (err) {
      return rawE2bError(socket, err, requestId, this.core.incident);
    }
    this.openUpgrade(req, socket, head, target, requestId);
  }

  private openUpgrade(req: IncomingMessage, socket: Socket, head: Buffer, target: E2bTarget, requestId: string): void {
    this.authorize(req, target, true)
      .then(
        (entry) => {
          if (socket.destroyed) {
            this.core.end(entry.sandboxId);
            return;
          }
          dropE2bHeaders(req);
          req.url = target.path;
          this.core.tunnel(req, socket, head, entry, requestId, target.app ? target.port : undefined);
        },
        (err: unknown) => rawE2bError(socket, err, requestId, this.core.incident),
      )
      .catch((err: unknown) => rawE2bError(socket, err, requestId, this.core.incident));
  }

  private log(req: IncomingMessage, res: ServerResponse, requestId: string, target: E2bTarget | undefined): void {
    const logRequest = this.core.logRequest;
    if (!logRequest) return;
    const startedAt = performance.now();
    const entry = target ? this.core.routes.get(target.sandboxId) : undefined;
    // As the client asked (the agent is sent another path).
    const url = safeUrl(req.url ?? '');
    res.once('close', () =>
      logRequest({
        request_id: requestId,
        sandbox_id: entry?.sandboxId ?? null,
        method: req.method,
        url,
        status: res.headersSent ? res.statusCode : 499,
        ms: Math.round((performance.now() - startedAt) * 100) / 100,
        ...(entry ? { org: entry.orgId } : {}),
        ...(target ? { e2b_port: target.port } : {}),
      }),
    );
  }

  private request(req: IncomingMessage, res: ServerResponse, target: E2bTarget, requestId: string): void {
    this.log(req, res, requestId, target);
    const fail = (r: ServerResponse, err: unknown, id: string) => sendE2bError(req, r, err, id, this.core.incident);
    const refused = refusalOf(req.socket);
    if (refused) return fail(res, refused, requestId);
    // E2B's clients run in browsers too: the agent's ports get the gateway's CORS; an app keeps its own.
    if (!target.app && req.headers.origin !== undefined && agentCors(req, res, requestId)) return;
    this.authorize(req, target, false)
      .then(
        (entry) => {
          const user = e2bUserHeader(req, target);
          dropE2bHeaders(req);
          req.url = target.path;
          this.core.forward(req, res, entry, requestId, target.app ? { sandboxId: entry.sandboxId, port: target.port } : undefined, fail, user);
        },
        (err: unknown) => fail(res, err, requestId),
      )
      .catch((err: unknown) => fail(res, err, requestId));
  }

  /**
   * E2B's credentials: the sandbox's access token (X-Access-Token, or E2B-Traffic-Access-Token,
   * the only one the code interpreter's context calls send) is good for its own sandbox; without
   * one, what the gateway takes anyway (a Bearer token, an API key of the owning organization; a
   * public preview's port takes none).
   */
  private async authorize(req: IncomingMessage, target: E2bTarget, upgrade: boolean): Promise<RouteEntry> {
    const token = e2bAccessToken(req);
    if (token !== undefined) {
      await this.core.tokens.verify(token, target.sandboxId);
      return this.core.admit(target.sandboxId, true);
    }
    if (signedFileRequest(target)) {
      // uploadUrl()/downloadUrl(): the URL is the credential, signed with the sandbox's kept token.
      const kept = await this.core.e2bToken?.(target.sandboxId);
      if (!kept) throw new ServiceError('AUTHENTICATION_ERROR', `sandbox ${target.sandboxId} has no E2B access token to check a signed URL against`, { id: target.sandboxId });
      await this.core.tokens.verify(kept, target.sandboxId);
      target.path = checkSignedFileUrl(req.method, target, kept);
      return this.core.admit(target.sandboxId, true);
    }
    if (target.app) return this.core.authorizePreview(req, { sandboxId: target.sandboxId, port: target.port });
    const auth = req.headers.authorization;
    if ((auth === undefined || /^basic /i.test(auth)) && req.headers['x-api-key'] === undefined && !upgrade) {
      throw new ServiceError('AUTHENTICATION_ERROR', "missing credentials: send the sandbox's access token (envdAccessToken) in X-Access-Token", { id: target.sandboxId });
    }
    return this.core.authorize(req, upgrade, target.sandboxId);
  }
}
