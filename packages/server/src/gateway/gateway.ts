import { createServer, Agent, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { randomUUID } from 'node:crypto';
import { safeUrl } from '../logging.js';
import { describeCause, ServiceError, type ApiScope } from '@sandboxd/protocol';
import type { GatewayControl } from '../services/sandboxes/index.js';
import type { RouteEntry } from '../services/routes.js';
import type { RouteTable } from './routes.js';
import { requireScope, type KeyService } from '../services/keys.js';
import type { PreviewClaims, TokenService } from '../services/tokens.js';
import { refusalOf, type ConnectionLimits } from '../services/connections.js';
import { DialAgent, PREVIEW_COOKIE_PREFIX, PREVIEW_TOKEN_HEADER, proxyToAgent, sendError, type OnIncident } from './proxy.js';
import { openTunnel, rawError, subprotocolCredential } from './tunnel.js';
import { openPreviewUpgrade, PortTunnelAgent } from './port-tunnel.js';
import { SpliceRelay } from './splice.js';
import { belowPrefix, dropE2bHeaders, e2bAccessToken, e2bHeaderTarget, e2bPath, e2bPort, E2B_CI_PORT, E2B_ENVD_PORT, E2B_SANDBOX_ID_HEADER, rawE2bError, sendE2bError, e2bUserHeader, signedFileRequest, checkSignedFileUrl, type E2bTarget } from './e2b.js';

/** The gateway's settings, declared with the gateway: config.ts fills them in, and the gateway needs nothing else of it. */
export interface GatewayConfig {
  /** 'port': one loopback port per sandbox (default). 'host': routing by Host `<id>.<domain>`. */
  mode: 'port' | 'host';
  bindHost: string;
  /** Hostname put in public_host URLs. */
  publicHostname: string;
  portMin: number;
  portMax: number;
  /** Host mode: the wildcard domain and the one port the gateway listens on. */
  domain: string;
  hostModePort: number;
  /** A WebSocket tunnel, or a response body in progress, with no byte either way for this long is closed. */
  idleTimeoutMs: number;
  /** How long the gateway waits for an agent's response headers (executions may run up to a day). */
  responseHeadersTimeoutMs: number;
  /**
   * The in-kernel relay (splice.ts): compiled into `dir`; bodies of at least `minBytes` and upgraded
   * connections go through it. Absent: everything is relayed in JavaScript.
   */
  splice?: { dir: string; minBytes: number };
}

export interface GatewayDeps {
  config: GatewayConfig;
  routes: RouteTable;
  tokens: TokenService;
  keys: KeyService;
  /** Whether a sandbox (also a stopped one, which gets its port back on start) holds this port. */
  portUsed: (port: number) => Promise<boolean>;
  connections: ConnectionLimits;
  /** No agent listens on a running sandbox's socket: the lifecycle checks whether it stopped. */
  onAgentGone?: (sandboxId: string) => void;
  /** The access token the control plane handed out for the sandbox's E2B clients (signed file URLs are checked against it). */
  e2bToken?: (sandboxId: string) => Promise<string | null | undefined>;
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
  /** Previews by sandbox and port inside it. */
  private previews = new Map<string, Map<number, PreviewState>>();

  /** Cuts the sandbox's requests in flight and its WebSockets (its deadline paused it); new ones are served. */
  interrupt(sandboxId: string): void {
    for (const sock of this.tunnels.get(sandboxId) ?? []) sock.destroy();
    for (const res of this.responses.get(sandboxId) ?? []) res.destroy();
  }

  /** The sandboxes with a request in flight or a WebSocket open. */
  *busyIds(): Iterable<string> {
    for (const [id, n] of this.inflight) if (n > 0) yield id;
    for (const [id, set] of this.tunnels) if (set.size > 0 && !this.inflight.get(id)) yield id;
  }

  /**
   * A node of the cluster stopped answering: the kept-alive connections to its sandboxes lead
   * nowhere, and what is in flight through them would wait for a timeout. Both end now; the next
   * request is told the node is away (RouteEntry.reachable).
   */
  dropNode(nodeId: string): void {
    for (const id of [...this.agents.keys()]) {
      if (this.d.routes.get(id)?.nodeId !== nodeId) continue;
      this.agents.get(id)?.destroy();
      this.agents.delete(id);
      // What waits for an answer is told why (503 NODE_UNAVAILABLE); what was answering is cut.
      for (const res of [...(this.responses.get(id) ?? [])]) {
        if (res.headersSent) {
          res.destroy();
          continue;
        }
        const requestId = String(res.getHeader('x-request-id') ?? '');
        sendError(res, new ServiceError('NODE_UNAVAILABLE', `sandbox ${id} is on a node that stopped answering; it is served again when the node is back`, { id, retry_after: 10 }), requestId, this.incident);
      }
      for (const sock of this.tunnels.get(id) ?? []) sock.destroy();
    }
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

  /** Large bodies and upgraded connections, relayed in the kernel once their heads are checked. */
  private readonly splice: SpliceRelay | undefined;

  constructor(private d: GatewayDeps) {
    const sp = d.config.splice;
    if (sp) {
      this.splice = new SpliceRelay(sp.minBytes);
      this.splice.prepare(sp.dir, d.log);
    }
  }

  publicHost(sandboxId: string, port: number | null): string {
    const c = this.d.config;
    if (c.mode === 'host') return `http://${sandboxId}.${c.domain}${c.hostModePort === 80 ? '' : `:${c.hostModePort}`}`;
    return `http://${c.publicHostname.includes(':') ? `[${c.publicHostname}]` : c.publicHostname}:${port}`;
  }

  previewUrl(sandboxId: string, port: number, gatewayPort: number | null): string {
    const c = this.d.config;
    if (c.mode === 'host') return `http://${port}-${sandboxId}.${c.domain}${c.hostModePort === 80 ? '' : `:${c.hostModePort}`}`;
    return this.publicHost(sandboxId, gatewayPort);
  }

  async openPreview(sandboxId: string, port: number, isPublic: boolean, gatewayPort: number | null): Promise<number | null> {
    let ports = this.previews.get(sandboxId);
    if (!ports) this.previews.set(sandboxId, (ports = new Map()));
    let state = ports.get(port);
    if (!state) {
      state = { public: isPublic, server: undefined, agent: undefined };
      ports.set(port, state);
    }
    state.public = isPublic;
    if (this.d.config.mode === 'host') return null;
    if (state.server) return (state.server.address() as { port: number }).port;
    // Two asks at once would otherwise make two listeners, one of them never closed.
    const s = state;
    s.opening ??= this.listenPreview(sandboxId, port, s, gatewayPort).finally(() => (s.opening = undefined));
    return s.opening;
  }

  private async listenPreview(sandboxId: string, port: number, state: PreviewState, gatewayPort: number | null): Promise<number> {
    const server = this.makeServer(
      () => undefined,
      () => sandboxId,
      () => ({ sandboxId, port }),
    );
    let bound: number;
    if (gatewayPort !== null) {
      await listen(server, gatewayPort, this.d.config.bindHost);
      this.claimed.add(gatewayPort);
      bound = gatewayPort;
    } else {
      bound = await this.listenOnFreePort(server);
    }
    // A close of the sandbox may have come while it listened.
    if (this.previews.get(sandboxId)?.get(port) !== state) {
      this.claimed.delete(bound);
      await closeServer(server);
      throw new ServiceError('NOT_FOUND', `sandbox ${sandboxId} not found`, { id: sandboxId });
    }
    state.server = server;
    return bound;
  }

  /** The HTTP agent whose connections are tunnels to the sandbox's port (kept while the preview is). */
  private previewAgent(entry: RouteEntry, port: number): PortTunnelAgent {
    const dial = () => this.d.routes.get(entry.sandboxId)?.dial ?? entry.dial;
    const state = this.previews.get(entry.sandboxId)?.get(port);
    // Host mode serves every port's preview (a private one takes the token either way), but pools
    // tunnels only for the ports someone opened a preview of (at most MAX_PREVIEWS_PER_SANDBOX):
    // kept-alive tunnels to each of 65 535 ports would be the daemon's descriptors.
    if (!state) return new PortTunnelAgent(dial, entry.sandboxId, port, { keepAlive: false });
    state.agent ??= new PortTunnelAgent(dial, entry.sandboxId, port);
    return state.agent;
  }

  /**
   * Host mode's E2B names: `49983-<id>.<domain>` (envd) and `49999-<id>.<domain>` (code
   * interpreter) reach the agent's E2B routes; a request under E2B's base URL prefix that names
   * its sandbox in E2b-Sandbox-Id is routed by its headers, whatever its host (the cluster's edge
   * has no API port to serve the base URL on).
   */
  private e2bHostIntercept(label: (req: IncomingMessage) => string | undefined): Intercept {
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
        if ('rest' in t) this.serveE2b(req, res, t.rest);
        else if ('err' in t) sendE2bError(req, res, t.err, requestIdOf(req), this.incident);
        else this.e2bRequest(req, res, t.ok, requestIdOf(req));
        return true;
      },
      upgrade: (req, socket, head) => {
        const t = target(req);
        if (!t) return false;
        if ('rest' in t) this.upgradeE2b(req, socket, head, t.rest);
        else if ('err' in t) rawE2bError(socket, t.err, requestIdOf(req), this.incident);
        else {
          socket.on('error', () => socket.destroy());
          const refused = refusalOf(socket);
          if (refused) rawE2bError(socket, refused, requestIdOf(req), this.incident);
          else this.e2bUpgrade(req, socket, head, t.ok, requestIdOf(req));
        }
        return true;
      },
    };
  }

  /** Host mode: one listener for all sandboxes. */
  async listenHostMode(): Promise<void> {
    if (this.d.config.mode !== 'host') return;
    const suffix = `.${this.d.config.domain.toLowerCase()}`;
    const label = (req: IncomingMessage) => {
      const host = (req.headers.host ?? '').split(':')[0]!.toLowerCase();
      return host.endsWith(suffix) ? host.slice(0, -suffix.length) : undefined;
    };
    /** `{port}-{id}.{domain}`: a preview of a port of the sandbox. */
    const preview = (req: IncomingMessage): PreviewTarget | undefined => {
      const m = /^(\d{1,5})-([a-z0-9]{1,64})$/.exec(label(req) ?? '');
      if (!m) return undefined;
      const port = Number(m[1]);
      return port >= 1 && port <= 65535 && port !== E2B_ENVD_PORT && port !== E2B_CI_PORT ? { sandboxId: m[2]!, port } : undefined;
    };
    const asked = (req: IncomingMessage) => preview(req)?.sandboxId ?? label(req);
    const server = this.makeServer(
      (req) => {
        const id = label(req);
        return id === undefined ? undefined : this.d.routes.get(id);
      },
      asked,
      preview,
      this.e2bHostIntercept(label),
    );
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
    const previews = this.previews.get(sandboxId);
    this.previews.delete(sandboxId);
    for (const state of previews?.values() ?? []) {
      state.agent?.destroy();
      if (!state.server) continue;
      const addr = state.server.address();
      if (addr && typeof addr === 'object') this.claimed.delete(addr.port);
      await closeServer(state.server);
    }
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
    await Promise.all([...new Set([...this.servers.keys(), ...this.tunnels.keys(), ...this.previews.keys()])].map((id) => this.close(id)));
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
      const id = entry.sandboxId;
      agent = new DialAgent(() => this.d.routes.get(id)?.dial ?? entry.dial);
      this.agents.set(entry.sandboxId, agent);
    }
    return agent;
  }

  /**
   * Checks the credentials and the sandbox's state. A sandbox token is good for its own sandbox; an
   * API key needs the owning organization and `sandboxes:read` (plain GET/HEAD) or
   * `sandboxes:write` (anything else, WebSocket upgrades included: they run code).
   */
  private async authorize(req: IncomingMessage, known: RouteEntry | undefined, upgrade: boolean, asked: string | undefined): Promise<RouteEntry> {
    // The id comes from the client: echoed (and looked up) only when it looks like one.
    const id = asked !== undefined && /^[a-z0-9_-]{1,64}$/i.test(asked) ? asked : undefined;
    // What the store says of it now, in a cluster (another replica may have made or changed it).
    const entry = known ? await this.d.routes.ensure(known.sandboxId) : id ? await this.d.routes.ensure(id.toLowerCase()) : undefined;
    if (!entry) {
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
    return this.admit(entry.sandboxId, mayWake);
  }

  /**
   * A preview's request: a public port lets anyone in; a private one takes the sandbox's token
   * (X-Sandboxd-Token) or the session cookie a signed link set.
   */
  private async authorizePreview(req: IncomingMessage, target: PreviewTarget): Promise<RouteEntry> {
    const entry = await this.d.routes.ensure(target.sandboxId);
    if (!entry) throw new ServiceError('NOT_FOUND', `sandbox ${target.sandboxId} not found`, { id: target.sandboxId });
    const state = this.previews.get(target.sandboxId)?.get(target.port);
    let mayWake = true;
    if (!state?.public) {
      const token = req.headers[PREVIEW_TOKEN_HEADER];
      // Every cookie of this name: another preview's page (same host in port mode, a sibling host
      // in host mode) may set one with a longer path, which the browser sends first.
      const sessions = cookieValues(req.headers.cookie, previewCookieName(target.sandboxId, target.port));
      if (typeof token === 'string' && token !== '') {
        await this.d.tokens.verify(token, target.sandboxId);
      } else if (sessions.length) {
        // The cookie is ambient, and every preview (other organizations' too) is the same site: a
        // page of another preview could use it (a WebSocket, which no CORS guards; a form post).
        if (!this.mayUseSession(req, target.sandboxId)) {
          throw new ServiceError('PERMISSION_DENIED', `a page of another origin may not use the session of port ${target.port} of sandbox ${target.sandboxId}`, {
            id: target.sandboxId,
          });
        }
        mayWake = (await this.firstValidSession(sessions, target)).wake;
      } else {
        throw new ServiceError(
          'AUTHENTICATION_ERROR',
          `port ${target.port} of sandbox ${target.sandboxId} is private: send the sandbox's auth_token in the X-Sandboxd-Token header, or open the signed link (signed_url) that GET /v1/sandboxes/${target.sandboxId}/ports/${target.port} gives`,
          { id: target.sandboxId },
        );
      }
    }
    return this.admit(target.sandboxId, mayWake);
  }

  /** A request may use a preview's session cookie: no Origin, its own, or another preview's of the same sandbox. */
  private mayUseSession(req: IncomingMessage, sandboxId: string): boolean {
    const origin = req.headers.origin;
    if (origin === undefined) return true;
    let u: URL;
    try {
      u = new URL(origin);
    } catch {
      return false;
    }
    if (u.host === (req.headers.host ?? '').toLowerCase()) return true;
    const c = this.d.config;
    if (c.mode === 'host') {
      const m = /^(\d{1,5})-([a-z0-9]{1,64})\.(.+)$/.exec(u.hostname);
      return m !== null && m[2] === sandboxId && m[3] === c.domain.toLowerCase();
    }
    const host = c.publicHostname.includes(':') ? `[${c.publicHostname.toLowerCase()}]` : c.publicHostname.toLowerCase();
    if (u.hostname !== host) return false;
    for (const state of this.previews.get(sandboxId)?.values() ?? []) {
      const addr = state.server?.address();
      if (addr && typeof addr === 'object' && String(addr.port) === u.port) return true;
    }
    return false;
  }

  /** The first of the session cookies that verifies; else the first one's error. */
  private async firstValidSession(sessions: string[], target: PreviewTarget): Promise<PreviewClaims> {
    let first: unknown;
    for (const s of sessions) {
      try {
        return await this.d.tokens.verifyPreview(s, 'session', target.sandboxId, target.port);
      } catch (err) {
        first ??= err;
      }
    }
    throw first;
  }

  /**
   * A signed link (`/_sandboxd/auth?token=...`) opens a private preview in a browser: it sets the
   * preview's session cookie (HttpOnly, this host only, SameSite=Strict: no other site's page can
   * make a browser send it) and sends the browser on to the app. A link followed from another site
   * (Sec-Fetch-Site: cross-site) lands on a page that moves on by itself: a redirect would carry
   * the other site's context, and the browser would hold the Strict cookie back once.
   */
  private async previewLink(req: IncomingMessage, res: ServerResponse, target: PreviewTarget, requestId: string): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://preview');
    const token = url.searchParams.get('token') ?? '';
    if (!(await this.d.routes.ensure(target.sandboxId))) throw new ServiceError('NOT_FOUND', `sandbox ${target.sandboxId} not found`, { id: target.sandboxId });
    const link = await this.d.tokens.verifyPreview(token, 'link', target.sandboxId, target.port);
    const ttl = PREVIEW_SESSION_SECONDS;
    const session = await this.d.tokens.issuePreview('session', target.sandboxId, target.port, link.wake, ttl, link.keyId);
    const next = url.searchParams.get('next') ?? '/';
    // Only a path of this host: never a way to send a browser elsewhere.
    const location = /^\/(?![/\\])[\x21-\x7e]*$/.test(next) ? next : '/';
    const headers = {
      'set-cookie': `${previewCookieName(target.sandboxId, target.port)}=${session.token}; Path=/; Max-Age=${ttl}; HttpOnly; SameSite=Strict`,
      'cache-control': 'no-store',
      'referrer-policy': 'no-referrer',
      'x-request-id': requestId,
    };
    if (req.headers['sec-fetch-site'] === 'cross-site') {
      // `location` is a path of printable ASCII without quotes' meaning in HTML once escaped.
      const href = location.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
      const page = `<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=${href}"><title>Opening the preview</title><a href="${href}">Open the preview</a>\n`;
      res.writeHead(200, { ...headers, 'content-type': 'text/html; charset=utf-8', 'content-security-policy': "default-src 'none'", 'content-length': String(Buffer.byteLength(page)) });
      res.end(page);
      return;
    }
    res.writeHead(302, { ...headers, location, 'content-length': '0' });
    res.end();
  }

  /** Lets a request through to a sandbox whose credentials passed: wakes it if it may, refuses it if it sleeps or is stopped. */
  private async admit(sandboxId: string, mayWake: boolean): Promise<RouteEntry> {
    // The credentials took time to check: what is true of the sandbox now.
    let entry = await this.d.routes.ensure(sandboxId);
    if (!entry) throw new ServiceError('NOT_FOUND', `sandbox ${sandboxId} not found`, { id: sandboxId });
    if (entry.status === 'paused' && entry.autoResume && this.d.wake && mayWake) {
      // It sleeps until someone uses it: this request wakes it, then is served.
      await this.d.wake(entry.sandboxId);
      const now = await this.d.routes.ensure(entry.sandboxId);
      if (!now) throw new ServiceError('NOT_FOUND', `sandbox ${entry.sandboxId} not found`, { id: entry.sandboxId });
      entry = now;
    }
    if (entry.status === 'paused') {
      throw new ServiceError('SANDBOX_PAUSED', `sandbox ${entry.sandboxId} is paused; resume it first`, { id: entry.sandboxId });
    }
    if (entry.status === 'stopped') {
      throw new ServiceError('SANDBOX_STOPPED', `sandbox ${entry.sandboxId} is stopped; start it first`, { id: entry.sandboxId });
    }
    try {
      entry.reachable?.();
    } catch (err) {
      // Kept-alive connections to it lead nowhere now: new ones are made once its node is back.
      this.agents.get(entry.sandboxId)?.destroy();
      this.agents.delete(entry.sandboxId);
      throw err;
    }
    this.begin(entry.sandboxId);
    return entry;
  }

  /**
   * `asked`: the sandbox id a request names (its port's, or its host's first label), for a 404's
   * message. `preview`: the sandbox port a request is for, when it is to a preview URL.
   */
  private makeServer(
    lookup: (req: IncomingMessage) => RouteEntry | undefined,
    asked: (req: IncomingMessage) => string | undefined,
    preview: (req: IncomingMessage) => PreviewTarget | undefined = () => undefined,
    intercept?: Intercept,
  ): Server {
    const server = createServer((req, res) => {
      if (intercept?.request(req, res)) return;
      const requestId = requestIdOf(req);
      const pv = preview(req);
      if (this.d.logRequest) {
        const startedAt = performance.now();
        const entry = pv ? this.d.routes.get(pv.sandboxId) : lookup(req);
        res.once('close', () =>
          this.d.logRequest!({
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
      if (refused) return sendError(res, refused, requestId, this.incident);
      if (pv && isPreviewLink(req.url)) {
        this.previewLink(req, res, pv, requestId).catch((err: unknown) => sendError(res, err, requestId, this.incident));
        return;
      }
      // A preview's app answers its own CORS; the agent's API gets the gateway's.
      if (!pv && req.headers.origin !== undefined) {
        // Browsers (the console, a user's page) may call the agent API from another origin. No
        // credential is ambient (no cookies reach the sandbox; a token or key in a header the page
        // itself sets), so any origin may: an answer is readable only with a credential the page holds.
        if (req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined) return preflight(req, res, requestId);
        res.setHeader('access-control-allow-origin', '*');
        res.setHeader('access-control-expose-headers', EXPOSED_HEADERS);
      }
      (pv ? this.authorizePreview(req, pv) : this.authorize(req, lookup(req), false, asked(req)))
        .then(
          (entry) => this.forward(req, res, entry, requestId, pv),
          (err: unknown) => sendError(res, err, requestId, this.incident),
        )
        .catch((err: unknown) => sendError(res, err, requestId, this.incident));
    });
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      if (intercept?.upgrade(req, socket, head)) return;
      const requestId = requestIdOf(req);
      socket.on('error', () => socket.destroy());
      const refused = refusalOf(socket);
      if (refused) return rawError(socket, refused, requestId, this.incident);
      const pv = preview(req);
      (pv ? this.authorizePreview(req, pv) : this.authorize(req, lookup(req), true, asked(req)))
        .then(
          (entry) => {
            if (socket.destroyed) {
              this.end(entry.sandboxId);
              return;
            }
            try {
              if (pv) this.previewTunnel(req, socket, head, entry, pv.port, requestId);
              else this.tunnel(req, socket, head, entry, requestId);
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

  /**
   * Relays a request that was let through (admit) to the sandbox's agent, or to the port `pv` of a
   * preview; `fail` renders the gateway's own errors (absent: sendError).
   */
  private forward(
    req: IncomingMessage,
    res: ServerResponse,
    entry: RouteEntry,
    requestId: string,
    pv: PreviewTarget | undefined,
    fail?: (res: ServerResponse, err: unknown, requestId: string) => void,
    extraHeaders?: Record<string, string>,
  ): void {
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
    const target = pv
      ? { sandboxId: entry.sandboxId, agent: this.previewAgent(entry, pv.port), onIncident: this.incident, headers: 'preview' as const, splice: this.splice, sendError: fail }
      : {
          sandboxId: entry.sandboxId,
          agent: this.agentFor(entry),
          onAgentGone: () => this.d.onAgentGone?.(entry.sandboxId),
          observe: this.d.observeAgent,
          onIncident: this.incident,
          splice: this.splice,
          sendError: fail,
          extraHeaders,
        };
    proxyToAgent(req, res, target, requestId, {
      headersMs: this.d.config.responseHeadersTimeoutMs,
      idleMs: this.d.config.idleTimeoutMs,
    });
  }

  /**
   * E2B's data plane through its one base URL (e2b.ts): `rest` is the request's path below the
   * prefix; the sandbox and the port inside it come from the routing headers. Served on the API
   * port (every mode) and on host mode's listener.
   */
  serveE2b(req: IncomingMessage, res: ServerResponse, rest: string): void {
    const requestId = requestIdOf(req);
    let target: E2bTarget;
    try {
      target = e2bHeaderTarget(req, rest);
    } catch (err) {
      this.logE2b(req, res, requestId, undefined);
      return sendE2bError(req, res, err, requestId, this.incident);
    }
    this.e2bRequest(req, res, target, requestId);
  }

  /** An upgrade (an app's WebSocket) through E2B's base URL. */
  upgradeE2b(req: IncomingMessage, socket: Socket, head: Buffer, rest: string): void {
    const requestId = requestIdOf(req);
    socket.on('error', () => socket.destroy());
    const refused = refusalOf(socket);
    if (refused) return rawE2bError(socket, refused, requestId, this.incident);
    let target: E2bTarget;
    try {
      target = e2bHeaderTarget(req, rest);
    } catch (err) {
      return rawE2bError(socket, err, requestId, this.incident);
    }
    this.e2bUpgrade(req, socket, head, target, requestId);
  }

  private e2bUpgrade(req: IncomingMessage, socket: Socket, head: Buffer, target: E2bTarget, requestId: string): void {
    this.authorizeE2b(req, target, true)
      .then(
        (entry) => {
          if (socket.destroyed) {
            this.end(entry.sandboxId);
            return;
          }
          dropE2bHeaders(req);
          req.url = target.path;
          try {
            if (target.app) this.previewTunnel(req, socket, head, entry, target.port, requestId);
            else this.tunnel(req, socket, head, entry, requestId);
          } catch (err) {
            this.end(entry.sandboxId);
            throw err;
          }
        },
        (err: unknown) => rawE2bError(socket, err, requestId, this.incident),
      )
      .catch((err: unknown) => rawE2bError(socket, err, requestId, this.incident));
  }

  private logE2b(req: IncomingMessage, res: ServerResponse, requestId: string, target: E2bTarget | undefined): void {
    if (!this.d.logRequest) return;
    const startedAt = performance.now();
    const entry = target ? this.d.routes.get(target.sandboxId) : undefined;
    // As the client asked (the agent is sent another path).
    const url = safeUrl(req.url ?? '');
    res.once('close', () =>
      this.d.logRequest!({
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

  private e2bRequest(req: IncomingMessage, res: ServerResponse, target: E2bTarget, requestId: string): void {
    this.logE2b(req, res, requestId, target);
    const fail = (r: ServerResponse, err: unknown, id: string) => sendE2bError(req, r, err, id, this.incident);
    const refused = refusalOf(req.socket);
    if (refused) return fail(res, refused, requestId);
    // E2B's clients run in browsers too: the agent's ports get the gateway's CORS; an app keeps its own.
    if (!target.app && req.headers.origin !== undefined) {
      if (req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined) return preflight(req, res, requestId);
      res.setHeader('access-control-allow-origin', '*');
      res.setHeader('access-control-expose-headers', EXPOSED_HEADERS);
    }
    this.authorizeE2b(req, target, false)
      .then(
        (entry) => {
          const user = e2bUserHeader(req, target);
          dropE2bHeaders(req);
          req.url = target.path;
          this.forward(req, res, entry, requestId, target.app ? { sandboxId: entry.sandboxId, port: target.port } : undefined, fail, user);
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
  private async authorizeE2b(req: IncomingMessage, target: E2bTarget, upgrade: boolean): Promise<RouteEntry> {
    const token = e2bAccessToken(req);
    if (token !== undefined) {
      await this.d.tokens.verify(token, target.sandboxId);
      return this.admit(target.sandboxId, true);
    }
    if (signedFileRequest(target)) {
      // uploadUrl()/downloadUrl(): the URL is the credential, signed with the sandbox's kept token.
      const kept = await this.d.e2bToken?.(target.sandboxId);
      if (!kept) throw new ServiceError('AUTHENTICATION_ERROR', `sandbox ${target.sandboxId} has no E2B access token to check a signed URL against`, { id: target.sandboxId });
      await this.d.tokens.verify(kept, target.sandboxId);
      target.path = checkSignedFileUrl(req.method, target, kept);
      return this.admit(target.sandboxId, true);
    }
    if (target.app) return this.authorizePreview(req, { sandboxId: target.sandboxId, port: target.port });
    const auth = req.headers.authorization;
    if ((auth === undefined || /^basic /i.test(auth)) && req.headers['x-api-key'] === undefined && !upgrade) {
      throw new ServiceError('AUTHENTICATION_ERROR', "missing credentials: send the sandbox's access token (envdAccessToken) in X-Access-Token", { id: target.sandboxId });
    }
    return this.authorize(req, undefined, upgrade, target.sandboxId);
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
    tunnelSet.add(socket);
    openTunnel(
      req,
      socket,
      head,
      entry.dial,
      requestId,
      this.d.config.idleTimeoutMs,
      (upstream) => {
        release();
        this.d.touch?.(entry.sandboxId);
        tunnelSet.delete(socket);
        if (upstream) tunnelSet.delete(upstream);
        if (tunnelSet.size === 0 && this.tunnels.get(entry.sandboxId) === tunnelSet) this.tunnels.delete(entry.sandboxId);
      },
      () => this.d.onAgentGone?.(entry.sandboxId),
      this.incident,
      entry.sandboxId,
      (upstream) => tunnelSet.add(upstream),
      this.splice,
    );
    // From here the open tunnel is what keeps the sandbox in use.
    this.end(entry.sandboxId);
  }

  /** An upgrade (a dev server's hot-reload WebSocket, say) to a preview: a byte tunnel to the app's port. */
  private previewTunnel(req: IncomingMessage, socket: Socket, head: Buffer, entry: RouteEntry, port: number, requestId: string): void {
    const release = this.d.connections.acquireOrg(entry.orgId);
    this.d.touch?.(entry.sandboxId);
    let set = this.tunnels.get(entry.sandboxId);
    if (!set) this.tunnels.set(entry.sandboxId, (set = new Set()));
    const tunnelSet = set;
    tunnelSet.add(socket);
    openPreviewUpgrade({
      req,
      client: socket,
      head,
      dial: entry.dial,
      sandboxId: entry.sandboxId,
      port,
      requestId,
      idleMs: this.d.config.idleTimeoutMs,
      onUpstream: (upstream) => tunnelSet.add(upstream),
      onClose: (upstream) => {
        release();
        this.d.touch?.(entry.sandboxId);
        tunnelSet.delete(socket);
        if (upstream) tunnelSet.delete(upstream);
        if (tunnelSet.size === 0 && this.tunnels.get(entry.sandboxId) === tunnelSet) this.tunnels.delete(entry.sandboxId);
      },
      onIncident: this.incident,
      splice: this.splice,
    });
    this.end(entry.sandboxId);
  }
}

/** Requests a listener hands elsewhere before its own routing (true: taken). */
interface Intercept {
  request(req: IncomingMessage, res: ServerResponse): boolean;
  upgrade(req: IncomingMessage, socket: Socket, head: Buffer): boolean;
}

/** A preview: which sandbox, which port inside it. */
interface PreviewTarget {
  sandboxId: string;
  port: number;
}

interface PreviewState {
  public: boolean;
  /** Port mode: its own listener. */
  server: Server | undefined;
  /** Pooled tunnels to the port, made on first use. */
  agent: PortTunnelAgent | undefined;
  /** Port mode: the listen in progress, which concurrent asks for the same port share. */
  opening?: Promise<number>;
}

/** Where a signed preview link lands (reserved on every preview host). */
export const PREVIEW_LINK_PATH = '/_sandboxd/auth';

function isPreviewLink(url: string | undefined): boolean {
  return url !== undefined && url.startsWith(PREVIEW_LINK_PATH) && (url.length === PREVIEW_LINK_PATH.length || url[PREVIEW_LINK_PATH.length] === '?');
}
/** How long the browser session a signed link opens lasts. */
const PREVIEW_SESSION_SECONDS = 24 * 3600;

/** A preview's session cookie: its own name per sandbox and port (in port mode all previews share one host). */
export function previewCookieName(sandboxId: string, port: number): string {
  return `${PREVIEW_COOKIE_PREFIX}${sandboxId}_${port}`;
}

/** How many cookies of one name a request's session is looked for in (each is a signature check). */
const MAX_SESSION_COOKIES = 8;

/**
 * The values of the cookies named `name` to try: the last one sent first (the link's own, Path=/,
 * comes after any of a longer path another page set, and replaced any of the same path), then the
 * others in the order sent; at most MAX_SESSION_COOKIES.
 */
function cookieValues(header: string | undefined, name: string): string[] {
  const all: string[] = [];
  if (!header) return all;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) all.push(part.slice(eq + 1).trim());
  }
  return all.length ? [all[all.length - 1]!, ...all.slice(0, -1)].slice(0, MAX_SESSION_COOKIES) : all;
}

function closeServer(server: Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
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
