import { createServer, request, Agent, type IncomingMessage, type Server, type ServerResponse, type OutgoingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
import { randomUUID } from 'node:crypto';
import { ServiceError } from '@sandboxd/protocol';
import type { Config } from '../config.js';
import type { GatewayControl } from '../services/sandboxes.js';
import type { RouteEntry, RouteTable } from '../services/routes.js';
import type { KeyService } from '../services/keys.js';
import type { TokenService } from '../services/tokens.js';

/** Headers that describe one hop, plus our credentials: never forwarded to the agent. */
const HOP_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'authorization', 'x-api-key', 'te', 'trailer']);

export interface GatewayDeps {
  config: Config['gateway'];
  routes: RouteTable;
  tokens: TokenService;
  keys: KeyService;
  usedPorts: () => Promise<Set<number>>;
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
  /** Upgraded (WebSocket) connections per sandbox: the HTTP server no longer tracks them. */
  private tunnels = new Map<string, Set<Socket>>();

  constructor(private d: GatewayDeps) {}

  publicHost(sandboxId: string, port: number | null): string {
    const c = this.d.config;
    if (c.mode === 'host') return `http://${sandboxId}.${c.domain}${c.hostModePort === 80 ? '' : `:${c.hostModePort}`}`;
    return `http://${c.publicHostname.includes(':') ? `[${c.publicHostname}]` : c.publicHostname}:${port}`;
  }

  /** Host mode: one listener for all sandboxes. */
  async listenHostMode(): Promise<void> {
    if (this.d.config.mode !== 'host') return;
    const server = this.makeServer((req) => {
      const host = (req.headers.host ?? '').split(':')[0]!.toLowerCase();
      const suffix = `.${this.d.config.domain.toLowerCase()}`;
      return host.endsWith(suffix) ? this.d.routes.get(host.slice(0, -suffix.length)) : undefined;
    });
    await listen(server, this.d.config.hostModePort, this.d.config.bindHost);
    this.hostServer = server;
  }

  async open(sandboxId: string, port: number | null): Promise<number | null> {
    if (this.d.config.mode === 'host') return null;
    const existing = this.servers.get(sandboxId);
    if (existing) return (existing.address() as { port: number }).port;
    const server = this.makeServer(() => this.d.routes.get(sandboxId));
    if (port !== null) {
      await listen(server, port, this.d.config.bindHost);
      this.claimed.add(port);
    } else {
      port = await this.listenOnFreePort(server);
    }
    this.servers.set(sandboxId, server);
    return port;
  }

  private async listenOnFreePort(server: Server): Promise<number> {
    const used = await this.d.usedPorts();
    const { portMin, portMax } = this.d.config;
    for (let p = portMin; p <= portMax; p++) {
      if (used.has(p) || this.claimed.has(p)) continue;
      this.claimed.add(p);
      try {
        await listen(server, p, this.d.config.bindHost);
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

  private async authorize(req: IncomingMessage, entry: RouteEntry | undefined): Promise<RouteEntry> {
    if (!entry) throw new ServiceError('NOT_FOUND');
    const auth = req.headers.authorization;
    const bearer = auth?.toLowerCase().startsWith('bearer ') ? auth.slice(7).trim() : undefined;
    const apiKey = (req.headers['x-api-key'] as string | undefined) ?? (bearer && bearer.split('.').length !== 3 ? bearer : undefined);
    if (bearer && bearer.split('.').length === 3) {
      await this.d.tokens.verify(bearer, entry.sandboxId);
    } else if (apiKey) {
      const p = await this.d.keys.authenticate(apiKey);
      if (p.orgId !== entry.orgId) throw new ServiceError('PERMISSION_DENIED', undefined, { id: entry.sandboxId });
    } else {
      throw new ServiceError('AUTHENTICATION_ERROR', 'missing credentials: send Authorization: Bearer <auth_token>');
    }
    if (entry.status === 'paused') {
      throw new ServiceError('SANDBOX_PAUSED', `sandbox ${entry.sandboxId} is paused; resume it first`, { id: entry.sandboxId });
    }
    if (entry.status === 'stopped') {
      throw new ServiceError('SANDBOX_STOPPED', `sandbox ${entry.sandboxId} is stopped; start it first`, { id: entry.sandboxId });
    }
    return entry;
  }

  private makeServer(lookup: (req: IncomingMessage) => RouteEntry | undefined): Server {
    const server = createServer((req, res) => {
      const requestId = (req.headers['x-request-id'] as string | undefined) ?? randomUUID();
      this.authorize(req, lookup(req)).then(
        (entry) => this.proxy(req, res, entry, requestId),
        (err: unknown) => sendError(res, err, requestId),
      );
    });
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      const requestId = (req.headers['x-request-id'] as string | undefined) ?? randomUUID();
      socket.on('error', () => socket.destroy());
      this.authorize(req, lookup(req)).then(
        (entry) => this.tunnel(req, socket, head, entry, requestId),
        (err: unknown) => rawError(socket, err, requestId),
      );
    });
    server.keepAliveTimeout = 65_000;
    server.headersTimeout = 70_000;
    server.requestTimeout = 0;
    return server;
  }

  private proxy(req: IncomingMessage, res: ServerResponse, entry: RouteEntry, requestId: string): void {
    const headers: OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(req.headers)) if (!HOP_HEADERS.has(k) && v !== undefined) headers[k] = v;
    headers['x-request-id'] = requestId;
    if (req.headers['transfer-encoding']) headers['transfer-encoding'] = req.headers['transfer-encoding'];
    const upstream = request(
      { socketPath: entry.socketPath, method: req.method, path: req.url, headers, agent: this.agentFor(entry) },
      (ures) => {
        const out: OutgoingHttpHeaders = {};
        for (const [k, v] of Object.entries(ures.headers)) if (!HOP_HEADERS.has(k) && v !== undefined) out[k] = v;
        out['x-request-id'] = requestId;
        res.writeHead(ures.statusCode ?? 502, out);
        ures.pipe(res);
        ures.on('error', () => res.destroy());
      },
    );
    upstream.on('error', (err) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      sendError(res, new ServiceError('AGENT_UNAVAILABLE', `the sandbox's agent is not answering: ${err.message}`, { id: entry.sandboxId }), requestId);
    });
    // A client that goes away cancels the upstream request (and with it a streaming download).
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  }

  private tunnel(req: IncomingMessage, socket: Socket, head: Buffer, entry: RouteEntry, requestId: string): void {
    const upstream = connect(entry.socketPath);
    let set = this.tunnels.get(entry.sandboxId);
    if (!set) this.tunnels.set(entry.sandboxId, (set = new Set()));
    set.add(socket);
    set.add(upstream);
    const forget = () => {
      set.delete(socket);
      set.delete(upstream);
      if (set.size === 0 && this.tunnels.get(entry.sandboxId) === set) this.tunnels.delete(entry.sandboxId);
    };
    socket.on('close', forget);
    upstream.on('close', forget);
    upstream.on('error', (err) => rawError(socket, new ServiceError('AGENT_UNAVAILABLE', err.message), requestId));
    upstream.on('connect', () => {
      let text = `${req.method} ${req.url} HTTP/1.1\r\n`;
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        const name = req.rawHeaders[i]!;
        const lower = name.toLowerCase();
        if (lower === 'authorization' || lower === 'x-api-key' || lower === 'x-request-id') continue;
        text += `${name}: ${req.rawHeaders[i + 1]}\r\n`;
      }
      text += `X-Request-ID: ${requestId}\r\n\r\n`;
      upstream.write(text);
      if (head.length) upstream.write(head);
      socket.pipe(upstream).pipe(socket);
      socket.on('close', () => upstream.destroy());
      upstream.on('close', () => socket.destroy());
    });
  }
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

function toServiceError(err: unknown): ServiceError {
  return err instanceof ServiceError ? err : new ServiceError('INTERNAL_ERROR', err instanceof Error ? err.message : String(err));
}

function sendError(res: ServerResponse, err: unknown, requestId: string): void {
  const se = toServiceError(err);
  const text = JSON.stringify(se.toBody(requestId));
  res.writeHead(se.status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), 'x-request-id': requestId, ...se.headers });
  res.end(text);
}

function rawError(socket: Socket, err: unknown, requestId: string): void {
  const se = toServiceError(err);
  const text = JSON.stringify(se.toBody(requestId));
  if (socket.writable) {
    socket.end(
      `HTTP/1.1 ${se.status} ${se.code}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nx-request-id: ${requestId}\r\nconnection: close\r\n\r\n${text}`,
    );
  } else {
    socket.destroy();
  }
}
