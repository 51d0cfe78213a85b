import type { Agent, IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { describeCause, ServiceError } from '@sandboxd/protocol';
import type { GatewayControl } from '../services/sandboxes/index.js';
import type { RouteEntry } from '../services/routes.js';
import type { RouteTable } from './routes.js';
import type { KeyService } from '../services/keys.js';
import type { TokenService } from '../services/tokens.js';
import type { ConnectionLimits } from '../services/connections.js';
import { DialAgent, proxyToAgent, sendError, type OnIncident } from './proxy.js';
import { openTunnel } from './tunnel.js';
import { openPreviewUpgrade } from './port-tunnel.js';
import { SpliceRelay } from './splice.js';
import { E2B_CI_PORT, E2B_ENVD_PORT } from './e2b.js';
import { Access } from './access.js';
import { SandboxUses } from './uses.js';
import { E2bPlane } from './e2b-plane.js';
import { makeGatewayServer, type ListenerCore } from './listener.js';
import { Previews, type PreviewState, type PreviewTarget } from './previews.js';
import { closeServer, listen } from './http-helpers.js';
import { isEnvdRpc, isEnvdWire, type EnvdHost } from './envd/envd.js';

export { PREVIEW_LINK_PATH, previewCookieName } from './previews.js';

/** The gateway's settings, declared with the gateway: config/ fills them in, and the gateway needs nothing else of it. */
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
  /** Requests in flight and open tunnels, per sandbox. */
  private readonly uses: SandboxUses;
  /** Credentials and state checks. */
  private readonly access: Access;
  /** Previews by sandbox and port inside it. */
  private readonly previews: Previews;
  /** E2B's data plane. */
  private readonly e2b: E2bPlane;
  /** What the listeners need of the gateway. */
  private readonly front: ListenerCore;
  /** E2B's envd protocol, loaded at its first call (envd/envd.ts). */
  private envd: Promise<EnvdHost> | undefined;
  private envdHost: EnvdHost | undefined;

  /** Request bytes the daemon is reading for the organization's envd calls (tests). */
  envdReading(orgId: string): number {
    return this.envdHost?.readingFor(orgId) ?? 0;
  }

  /** Cuts the sandbox's requests in flight and its WebSockets (its deadline paused it); new ones are served. */
  interrupt(sandboxId: string): void {
    this.uses.interrupt(sandboxId);
  }

  /** The sandboxes with a request in flight or a WebSocket open. */
  busyIds(): Iterable<string> {
    return this.uses.busyIds();
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
      for (const res of this.uses.responsesOf(id)) {
        if (res.headersSent) {
          res.destroy();
          continue;
        }
        const requestId = String(res.getHeader('x-request-id') ?? '');
        sendError(res, new ServiceError('NODE_UNAVAILABLE', `sandbox ${id} is on a node that stopped answering; it is served again when the node is back`, { id, retry_after: 10 }), requestId, this.incident);
      }
      this.uses.cutTunnels(id);
    }
  }

  /** A request is in flight to the sandbox, or a WebSocket to it is open. */
  busy(sandboxId: string): boolean {
    return this.uses.busy(sandboxId);
  }

  /** Large bodies and upgraded connections, relayed in the kernel once their heads are checked. */
  private readonly splice: SpliceRelay | undefined;

  constructor(private d: GatewayDeps) {
    const sp = d.config.splice;
    if (sp) {
      this.splice = new SpliceRelay(sp.minBytes);
      this.splice.prepare(sp.dir, d.log);
    }
    this.uses = new SandboxUses(d.touch);
    this.access = new Access({
      routes: d.routes,
      tokens: d.tokens,
      keys: d.keys,
      wake: d.wake,
      dropAgent: (sandboxId) => {
        this.agents.get(sandboxId)?.destroy();
        this.agents.delete(sandboxId);
      },
      begin: (sandboxId) => this.uses.begin(sandboxId),
    });
    const admit = (sandboxId: string, mayWake: boolean) => this.access.admit(sandboxId, mayWake);
    this.previews = new Previews({ config: d.config, routes: d.routes, tokens: d.tokens, admit });
    const relay = {
      routes: d.routes,
      logRequest: d.logRequest,
      incident: this.incident,
      forward: this.forward.bind(this),
      tunnel: this.tunnel.bind(this),
      end: (sandboxId: string) => this.uses.end(sandboxId),
    };
    this.front = { ...relay, connections: d.connections, authorize: this.access.authorize.bind(this.access), previews: this.previews };
    this.e2b = new E2bPlane({
      ...relay,
      tokens: d.tokens,
      e2bToken: d.e2bToken,
      authorize: (req, upgrade, sandboxId) => this.access.authorize(req, undefined, upgrade, sandboxId),
      authorizePreview: (req, target) => this.previews.authorize(req, target),
      admit,
    });
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
    const state = this.previews.want(sandboxId, port, isPublic);
    if (this.d.config.mode === 'host') return null;
    if (state.server) return (state.server.address() as { port: number }).port;
    // Two asks at once would otherwise make two listeners, one of them never closed.
    state.opening ??= this.listenPreview(sandboxId, port, state, gatewayPort).finally(() => (state.opening = undefined));
    return state.opening;
  }

  private async listenPreview(sandboxId: string, port: number, state: PreviewState, gatewayPort: number | null): Promise<number> {
    const server = makeGatewayServer(this.front, { lookup: () => undefined, asked: () => sandboxId, preview: () => ({ sandboxId, port }) });
    let bound: number;
    if (gatewayPort !== null) {
      await listen(server, gatewayPort, this.d.config.bindHost);
      this.claimed.add(gatewayPort);
      bound = gatewayPort;
    } else {
      bound = await this.listenOnFreePort(server);
    }
    // A close of the sandbox may have come while it listened.
    if (this.previews.get(sandboxId, port) !== state) {
      this.claimed.delete(bound);
      await closeServer(server);
      throw new ServiceError('NOT_FOUND', `sandbox ${sandboxId} not found`, { id: sandboxId });
    }
    state.server = server;
    return bound;
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
    const server = makeGatewayServer(this.front, {
      lookup: (req) => {
        const id = label(req);
        return id === undefined ? undefined : this.d.routes.get(id);
      },
      asked,
      preview,
      intercept: this.e2b.hostIntercept(label),
    });
    await listen(server, this.d.config.hostModePort, this.d.config.bindHost);
    this.hostServer = server;
  }

  /**
   * E2B's data plane through its one base URL (e2b-plane.ts): `rest` is the request's path below
   * the prefix. Served on the API port (every mode) and on host mode's listener.
   */
  serveE2b(req: IncomingMessage, res: ServerResponse, rest: string): void {
    this.e2b.serve(req, res, rest);
  }

  /** An upgrade (an app's WebSocket) through E2B's base URL. */
  upgradeE2b(req: IncomingMessage, socket: Socket, head: Buffer, rest: string): void {
    this.e2b.upgrade(req, socket, head, rest);
  }

  async open(sandboxId: string, port: number | null): Promise<number | null> {
    if (this.d.config.mode === 'host') return null;
    const existing = this.servers.get(sandboxId);
    if (existing) return (existing.address() as { port: number }).port;
    const server = makeGatewayServer(this.front, { lookup: () => this.d.routes.get(sandboxId), asked: () => sandboxId });
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
    this.uses.cutTunnels(sandboxId, true);
    for (const state of this.previews.take(sandboxId)) {
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
    await closeServer(server);
  }

  /** Stops listening (daemon shutdown); sandboxes keep running and get their ports back on start. */
  async closeAll(): Promise<void> {
    await Promise.all([...new Set([...this.servers.keys(), ...this.uses.tunnelIds(), ...this.previews.sandboxIds()])].map((id) => this.close(id)));
    if (this.hostServer) {
      const s = this.hostServer;
      this.hostServer = undefined;
      await closeServer(s);
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
      this.uses.end(entry.sandboxId);
      res.destroy();
      return;
    }
    let release: () => void;
    try {
      release = this.d.connections.acquireOrg(entry.orgId);
    } catch (err) {
      this.uses.end(entry.sandboxId);
      throw err;
    }
    res.once('close', release);
    this.uses.holdResponse(entry.sandboxId, res);
    if (!pv && isEnvdRpc(req.url)) return this.serveEnvd(req, res, entry, requestId, fail, extraHeaders?.authorization);
    // The agent's plain E2B routes are the gateway's own wire to it (envd/agent-call.ts), not an API.
    if (!pv && isEnvdWire(req.url)) return (fail ?? ((r, e, id) => sendError(r, e, id, this.incident)))(res, new ServiceError('ROUTE_NOT_FOUND', `no route ${req.method} ${(req.url ?? '').split('?')[0]}`), requestId);
    const target = pv
      ? { sandboxId: entry.sandboxId, agent: this.previews.agent(entry, pv.port), onIncident: this.incident, headers: 'preview' as const, splice: this.splice, sendError: fail }
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
   * One of E2B's envd calls (Connect) for the sandbox: served here, over plain calls to its agent.
   * `authorization`: the user E2B's client named (Basic), absent on the sandbox's own route.
   */
  private serveEnvd(
    req: IncomingMessage,
    res: ServerResponse,
    entry: RouteEntry,
    requestId: string,
    fail: ((res: ServerResponse, err: unknown, requestId: string) => void) | undefined,
    authorization: string | undefined,
  ): void {
    this.envd ??= import('./envd/envd.js').then(({ EnvdHost }) => {
      this.envdHost = new EnvdHost((what, err) => this.d.log('e2b envd call failed', { call: what, error: describeCause(err), ...(err instanceof ServiceError && err.detail ? { detail: err.detail } : {}) }));
      return this.envdHost;
    });
    const call = { sandboxId: entry.sandboxId, orgId: entry.orgId, agent: this.agentFor(entry), authorization: authorization ?? null, headersMs: this.d.config.responseHeadersTimeoutMs };
    const refuse = (err: unknown) => (fail ? fail(res, err, requestId) : sendError(res, err, requestId, this.incident));
    this.envd.then((host) => {
      try {
        host.serve(req, res, call);
      } catch (err) {
        refuse(err);
      }
    }, refuse);
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

  /**
   * An upgrade that was let through (admit): a WebSocket tunnel to the agent, or (`port`: a
   * preview's, a dev server's hot-reload say) a byte tunnel to the app's port. An open tunnel is a
   * use of the sandbox for as long as it is open: it takes over from the request's use.
   */
  private tunnel(req: IncomingMessage, socket: Socket, head: Buffer, entry: RouteEntry, requestId: string, port: number | undefined): void {
    try {
      const release = this.d.connections.acquireOrg(entry.orgId);
      const { onUpstream, onClose } = this.uses.holdTunnel(entry.sandboxId, socket, release);
      const { dial, sandboxId } = entry;
      const idleMs = this.d.config.idleTimeoutMs;
      if (port !== undefined) {
        openPreviewUpgrade({ req, client: socket, head, dial, sandboxId, port, requestId, idleMs, onUpstream, onClose, onIncident: this.incident, splice: this.splice });
      } else {
        openTunnel(req, socket, head, dial, requestId, idleMs, onClose, () => this.d.onAgentGone?.(sandboxId), this.incident, sandboxId, onUpstream, this.splice);
      }
    } catch (err) {
      this.uses.end(entry.sandboxId);
      throw err;
    }
    this.uses.end(entry.sandboxId);
  }
}
