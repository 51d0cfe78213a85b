import { createServer, Agent, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { randomUUID } from 'node:crypto';
import { safeUrl } from '../logging.js';
import { describeCause, ServiceError, type ApiScope } from '@sandboxd/protocol';
import type { Config } from '../config.js';
import type { GatewayControl } from '../services/sandboxes.js';
import type { RouteEntry, RouteTable } from '../services/routes.js';
import { requireScope, type KeyService } from '../services/keys.js';
import type { TokenService } from '../services/tokens.js';
import { refusalOf, type ConnectionLimits } from '../services/connections.js';
import { proxyToAgent, sendError, type OnIncident } from './proxy.js';
import { openTunnel, rawError, subprotocolCredential } from './tunnel.js';

export interface GatewayDeps {
  config: Config['gateway'];
  routes: RouteTable;
  tokens: TokenService;
  keys: KeyService;
  /** Whether a sandbox (also a stopped one, which gets its port back on start) holds this port. */
  portUsed: (port: number) => Promise<boolean>;
  connections: ConnectionLimits;
  /** No agent listens on a running sandbox's socket: the lifecycle checks whether it stopped. */
  onAgentGone?: (sandboxId: string) => void;
  /** A paused sandbox with auto_resume got a request: resolves once it runs again. */
  wake?: (sandboxId: string) => Promise<void>;
  /** A request to the sandbox began or ended (its idle clock). */
  touch?: (sandboxId: string) => void;
  /** Each proxied request's round trip to the agent (metrics). */
  observeAgent?: (seconds: number, ok: boolean) => void;
  /** Logs each request to a sandbox's URL once it is answered (absent: none). */
  logRequest?: (fields: Record<string, unknown>) => void;
  log: (msg: string, extra?: Record<string, unknown>) => void;
}

/**
 * Every sandbox's public_host: checks the sandbox JWT (or an API key of the owning organization),
 * refuses paused/stopped sandboxes with 409, and proxies HTTP and WebSocket to the agent's socket.
 * Port mode gives each sandbox its own loopback port (clients drop URL paths on WebSocket, so a
 * path prefix is not enough); host mode routes `<id>.<domain>` on one port.
 */
export class Gateway implements GatewayControl {
  private servers = new Map<string, Server>();
  private hostServer: Server | undefined;
  private agents = new Map<string, Agent>();
  private claimed = new Set<number>();
  /** Where the next search for a free port starts: just past the last one handed out. */
  private nextPort: number | undefined;
  /** Upgraded (WebSocket) connections per sandbox: the HTTP server no longer tracks them. */
  private tunnels = new Map<string, Set<Socket>>();
  /** Proxied requests in flight per sandbox (an execution may run for long: the sandbox is in use). */
  private inflight = new Map<string, number>();
  /** Their responses, to cut them (interrupt). */
  private responses = new Map<string, Set<ServerResponse>>();

  /** Cuts the sandbox's requests in flight and its WebSockets (its deadline paused it); new ones are served. */
  interrupt(sandboxId: string): void {
    for (const sock of this.tunnels.get(sandboxId) ?? []) sock.destroy();
    for (const res of this.responses.get(sandboxId) ?? []) res.destroy();
  }

  /** A request is in flight to the sandbox, or a WebSocket to it is open. */
  busy(sandboxId: string): boolean {
    return (this.inflight.get(sandboxId) ?? 0) > 0 || (this.tunnels.get(sandboxId)?.size ?? 0) > 0;
  }

  /**
   * A request to the sandbox is in flight from the moment it is let through (authorize, in the same
   * step as its state check: an idle pause never freezes a sandbox under a request it let in)
   * until `end`; both are uses.
   */
  private begin(sandboxId: string): void {
    this.d.touch?.(sandboxId);
    this.inflight.set(sandboxId, (this.inflight.get(sandboxId) ?? 0) + 1);
  }

  private end(sandboxId: string): void {
    const n = (this.inflight.get(sandboxId) ?? 1) - 1;
    if (n > 0) this.inflight.set(sandboxId, n);
    else this.inflight.delete(sandboxId);
    this.d.touch?.(sandboxId);
  }

  constructor(private d: GatewayDeps) {}

  publicHost(sandboxId: string, port: number | null): string {
    const c = this.d.config;
    if (c.mode === 'host') return `http://${sandboxId}.${c.domain}${c.hostModePort === 80 ? '' : `:${c.hostModePort}`}`;
    return `http://${c.publicHostname.includes(':') ? `[${c.publicHostname}]` : c.publicHostname}:${port}`;
  }

  /** Host mode: one listener for all sandboxes. */
  async listenHostMode(): Promise<void> {
    if (this.d.config.mode !== 'host') return;
    const suffix = `.${this.d.config.domain.toLowerCase()}`;
    const asked = (req: IncomingMessage) => {
      const host = (req.headers.host ?? '').split(':')[0]!.toLowerCase();
      return host.endsWith(suffix) ? host.slice(0, -suffix.length) : undefined;
    };
    const server = this.makeServer((req) => {
      const id = asked(req);
      return id === undefined ? undefined : this.d.routes.get(id);
    }, asked);
    await listen(server, this.d.config.hostModePort, this.d.config.bindHost);
    this.hostServer = server;
  }

  async open(sandboxId: string, port: number | null): Promise<number | null> {
    if (this.d.config.mode === 'host') return null;
    const existing = this.servers.get(sandboxId);
    if (existing) return (existing.address() as { port: number }).port;
    const server = this.makeServer(() => this.d.routes.get(sandboxId), () => sandboxId);
    if (port !== null) {
      await listen(server, port, this.d.config.bindHost);
      this.claimed.add(port);
    } else {
      port = await this.listenOnFreePort(server);
    }
    this.servers.set(sandboxId, server);
    return port;
  }

  /**
   * Goes round the range from the port after the last one handed out, so the first port looked at
   * is almost always free, whatever the number of sandboxes (each look is one indexed query); a
   * port a deleted sandbox freed is not handed out again at once.
   */
  private async listenOnFreePort(server: Server): Promise<number> {
    const { portMin, portMax } = this.d.config;
    const span = portMax - portMin + 1;
    const from = this.nextPort ?? portMin;
    for (let i = 0; i < span; i++) {
      const p = portMin + ((from - portMin + i) % span);
      if (this.claimed.has(p) || (await this.d.portUsed(p))) continue;
      if (this.claimed.has(p)) continue;
      this.claimed.add(p);
      try {
        await listen(server, p, this.d.config.bindHost);
        this.nextPort = p + 1 > portMax ? portMin : p + 1;
        return p;
      } catch (err) {
        this.claimed.delete(p);
        if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
      }
    }
    throw new ServiceError('RUNTIME_ERROR', `no free gateway port in ${portMin}-${portMax}`);
  }

  async close(sandboxId: string): Promise<void> {
    for (const sock of this.tunnels.get(sandboxId) ?? []) sock.destroy();
    this.tunnels.delete(sandboxId);
    const server = this.servers.get(sandboxId);
    this.servers.delete(sandboxId);
    const agent = this.agents.get(sandboxId);
    this.agents.delete(sandboxId);
    agent?.destroy();
    if (!server) return;
    const addr = server.address();
    if (addr && typeof addr === 'object') this.claimed.delete(addr.port);
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  }

  /** Stops listening (daemon shutdown); sandboxes keep running and get their ports back on start. */
  async closeAll(): Promise<void> {
    await Promise.all([...new Set([...this.servers.keys(), ...this.tunnels.keys()])].map((id) => this.close(id)));
    if (this.hostServer) {
      const s = this.hostServer;
      this.hostServer = undefined;
      await new Promise<void>((r) => {
        s.close(() => r());
        s.closeAllConnections();
      });
    }
  }

  private agentFor(entry: RouteEntry): Agent {
    let agent = this.agents.get(entry.sandboxId);
    if (!agent) {
      agent = new Agent({ keepAlive: true, maxSockets: 64, maxFreeSockets: 8, keepAliveMsecs: 10_000 });
      this.agents.set(entry.sandboxId, agent);
    }
    return agent;
  }

  /**
   * Checks the credentials and the sandbox's state. A sandbox token is good for its own sandbox; an
   * API key needs the owning organization and `sandboxes:read` (plain GET/HEAD) or
   * `sandboxes:write` (anything else, WebSocket upgrades included: they run code).
   */
  private async authorize(req: IncomingMessage, entry: RouteEntry | undefined, upgrade: boolean, asked: string | undefined): Promise<RouteEntry> {
    if (!entry) {
      // The id comes from the client: echoed only when it looks like one.
      const id = asked !== undefined && /^[a-z0-9_-]{1,64}$/i.test(asked) ? asked : undefined;
      throw new ServiceError('NOT_FOUND', id ? `sandbox ${id} not found` : `no sandbox found at host ${JSON.stringify((req.headers.host ?? '').slice(0, 100))}`, id ? { id } : {});
    }
    const auth = req.headers.authorization;
    // A browser's WebSocket cannot send headers: it offers the credential as a subprotocol instead.
    const offered = upgrade && !auth && req.headers['x-api-key'] === undefined ? subprotocolCredential(req) : undefined;
    const bearer = auth?.toLowerCase().startsWith('bearer ') ? auth.slice(7).trim() : offered;
    const apiKey = (req.headers['x-api-key'] as string | undefined) ?? (bearer && bearer.split('.').length !== 3 ? bearer : undefined);
    // Waking a sandbox is a resume: a sandbox token, or a key that may change sandboxes.
    let mayWake = true;
    if (bearer && bearer.split('.').length === 3) {
      await this.d.tokens.verify(bearer, entry.sandboxId);
    } else if (apiKey) {
      const p = await this.d.keys.authenticate(apiKey);
      if (p.orgId !== entry.orgId) throw new ServiceError('PERMISSION_DENIED', undefined, { id: entry.sandboxId });
      const scope: ApiScope = !upgrade && (req.method === 'GET' || req.method === 'HEAD') ? 'sandboxes:read' : 'sandboxes:write';
      requireScope(p, scope);
      mayWake = p.scopes.has('sandboxes:write') || p.scopes.has('admin');
    } else {
      throw new ServiceError('AUTHENTICATION_ERROR', 'missing credentials: send Authorization: Bearer <auth_token>');
    }
    // The credentials took time to check: what is true of the sandbox now.
    const current = this.d.routes.get(entry.sandboxId);
    if (!current) throw new ServiceError('NOT_FOUND', `sandbox ${entry.sandboxId} not found`, { id: entry.sandboxId });
    entry = current;
    if (entry.status === 'paused' && entry.autoResume && this.d.wake && mayWake) {
      // It sleeps until someone uses it: this request wakes it, then is served.
      await this.d.wake(entry.sandboxId);
      const now = this.d.routes.get(entry.sandboxId);
      if (!now) throw new ServiceError('NOT_FOUND', `sandbox ${entry.sandboxId} not found`, { id: entry.sandboxId });
      entry = now;
    }
    if (entry.status === 'paused') {
      throw new ServiceError('SANDBOX_PAUSED', `sandbox ${entry.sandboxId} is paused; resume it first`, { id: entry.sandboxId });
    }
    if (entry.status === 'stopped') {
      throw new ServiceError('SANDBOX_STOPPED', `sandbox ${entry.sandboxId} is stopped; start it first`, { id: entry.sandboxId });
    }
    this.begin(entry.sandboxId);
    return entry;
  }

  /** `asked`: the sandbox id a request names (its port's, or its host's first label), for a 404's message. */
  private makeServer(lookup: (req: IncomingMessage) => RouteEntry | undefined, asked: (req: IncomingMessage) => string | undefined): Server {
    const server = createServer((req, res) => {
      const requestId = requestIdOf(req);
      if (this.d.logRequest) {
        const startedAt = performance.now();
        const entry = lookup(req);
        res.once('close', () =>
          this.d.logRequest!({
            request_id: requestId,
            sandbox_id: entry?.sandboxId ?? null,
            method: req.method,
            url: safeUrl(req.url ?? ''),
            status: res.headersSent ? res.statusCode : 499,
            ms: Math.round((performance.now() - startedAt) * 100) / 100,
            ...(entry ? { org: entry.orgId } : {}),
          }),
        );
      }
      const refused = refusalOf(req.socket);
      if (refused) return sendError(res, refused, requestId, this.incident);
      if (req.headers.origin !== undefined) {
        // Browsers (the console, a user's page) may call the agent API from another origin. No
        // credential is ambient (no cookies reach the sandbox; a token or key in a header the page
        // itself sets), so any origin may: an answer is readable only with a credential the page holds.
        if (req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined) return preflight(req, res, requestId);
        res.setHeader('access-control-allow-origin', '*');
        res.setHeader('access-control-expose-headers', EXPOSED_HEADERS);
      }
      this.authorize(req, lookup(req), false, asked(req))
        .then(
          (entry) => {
            // The client may have gone while it was authorized: then nothing is held for it.
            if (res.destroyed || req.socket.destroyed) {
              this.end(entry.sandboxId);
              res.destroy();
              return;
            }
            let release: () => void;
            try {
              release = this.d.connections.acquireOrg(entry.orgId);
            } catch (err) {
              this.end(entry.sandboxId);
              throw err;
            }
            res.once('close', release);
            let open = this.responses.get(entry.sandboxId);
            if (!open) this.responses.set(entry.sandboxId, (open = new Set()));
            const mine = open;
            mine.add(res);
            res.once('close', () => {
              mine.delete(res);
              if (mine.size === 0 && this.responses.get(entry.sandboxId) === mine) this.responses.delete(entry.sandboxId);
              this.end(entry.sandboxId);
            });
            const target = {
              sandboxId: entry.sandboxId,
              socketPath: entry.socketPath,
              agent: this.agentFor(entry),
              onAgentGone: () => this.d.onAgentGone?.(entry.sandboxId),
              observe: this.d.observeAgent,
              onIncident: this.incident,
            };
            proxyToAgent(req, res, target, requestId, {
              headersMs: this.d.config.responseHeadersTimeoutMs,
              idleMs: this.d.config.idleTimeoutMs,
            });
          },
          (err: unknown) => sendError(res, err, requestId, this.incident),
        )
        .catch((err: unknown) => sendError(res, err, requestId, this.incident));
    });
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      const requestId = requestIdOf(req);
      socket.on('error', () => socket.destroy());
      const refused = refusalOf(socket);
      if (refused) return rawError(socket, refused, requestId, this.incident);
      this.authorize(req, lookup(req), true, asked(req))
        .then(
          (entry) => {
            if (socket.destroyed) {
              this.end(entry.sandboxId);
              return;
            }
            try {
              this.tunnel(req, socket, head, entry, requestId);
            } catch (err) {
              this.end(entry.sandboxId);
              throw err;
            }
          },
          (err: unknown) => rawError(socket, err, requestId, this.incident),
        )
        .catch((err: unknown) => rawError(socket, err, requestId, this.incident));
    });
    server.on('clientError', (_err, socket) => socket.destroy());
    this.d.connections.watch(server);
    server.keepAliveTimeout = 65_000;
    server.headersTimeout = 70_000;
    server.requestTimeout = 0;
    return server;
  }

  /** The incident behind a 5xx answer (renderError), logged with its request. */
  private readonly incident: OnIncident = ({ id, kind, cause, detail }, requestId) => {
    this.d.log(kind === 'bug' ? 'gateway request failed: a bug (500)' : 'gateway request failed', {
      incident_id: id,
      request_id: requestId,
      ...(detail ? { detail } : {}),
      ...(kind === 'bug' ? { error: describeCause(cause) } : {}),
    });
  };

  private tunnel(req: IncomingMessage, socket: Socket, head: Buffer, entry: RouteEntry, requestId: string): void {
    const release = this.d.connections.acquireOrg(entry.orgId);
    // An open WebSocket (a terminal, a stream) is a use of the sandbox for as long as it is open.
    this.d.touch?.(entry.sandboxId);
    let set = this.tunnels.get(entry.sandboxId);
    if (!set) this.tunnels.set(entry.sandboxId, (set = new Set()));
    const tunnelSet = set;
    const { upstream } = openTunnel(
      req,
      socket,
      head,
      entry.socketPath,
      requestId,
      this.d.config.idleTimeoutMs,
      () => {
        release();
        this.d.touch?.(entry.sandboxId);
        tunnelSet.delete(socket);
        tunnelSet.delete(upstream);
        if (tunnelSet.size === 0 && this.tunnels.get(entry.sandboxId) === tunnelSet) this.tunnels.delete(entry.sandboxId);
      },
      () => this.d.onAgentGone?.(entry.sandboxId),
      this.incident,
      entry.sandboxId,
    );
    tunnelSet.add(socket);
    tunnelSet.add(upstream);
    // From here the open tunnel is what keeps the sandbox in use.
    this.end(entry.sandboxId);
  }
}

const EXPOSED_HEADERS = 'x-request-id, retry-after, content-disposition, content-length';
const PREFLIGHT_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE';
/** Request headers a preflight may ask for: names only (RFC 9110 tokens), a bounded list. */
const HEADER_LIST_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+(\s*,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+){0,31}$/;

/** CORS preflight: answered by the gateway itself (it carries no credential), never by the sandbox. */
function preflight(req: IncomingMessage, res: ServerResponse, requestId: string): void {
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

function requestIdOf(req: IncomingMessage): string {
  const incoming = req.headers['x-request-id'];
  return typeof incoming === 'string' && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : randomUUID();
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
}
