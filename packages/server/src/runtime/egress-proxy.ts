import { createHash } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { Agent, createServer as createHttpServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, type Server, type Socket } from 'node:net';
import type { DnsFilter } from './dns-filter.js';
import { decide, INSPECTED_PORTS, type EgressPolicy } from './egress-policy.js';
import { clientHelloState, FIRST_BYTES_MS, HeadScanner, HelloScanner, hostOf, MAX_HELLO, readFirst, sniOf } from './egress-sniff.js';
import { listenInNetns, type ListenSpec } from './netns-listen.js';
import { proc, procOk } from './proc.js';

/**
 * Where domain rules are decided. A sandbox with domain rules has its TCP connections to the
 * inspected ports (80, 443) marked by nftables and routed (policy routing, from its bridge only)
 * into a network namespace of the runtime's own, where every address is local: a listener there
 * on 0.0.0.0 accepts a connection to any address, and sees that address as its local one. The
 * daemon holds those listeners (made in the namespace, passed over IPC), reads the name the
 * connection carries (TLS SNI, HTTP Host of every request), decides with the sandbox's policy, and
 * connects to the address the sandbox asked for from the host, or resets the connection.
 *
 * A name is trusted only for the address it resolves to (through the host's resolver, the one the
 * sandbox uses): a connection to some address that claims an allowed name is refused.
 *
 * Without the proxy (daemon down) those connections are refused, not let through: the sandbox's
 * chain refuses inspected ports that are not routed to the proxy.
 */
export interface EgressProxyOptions {
  /** The sandboxes' bridge: only packets from it are routed to the proxy. */
  bridge: string;
  subnetCidr: string;
  /** Named netns of the proxy; host end of its veth (the sandbox chains name it). */
  netns: string;
  veth: string;
  policyOf: (ip: string) => EgressPolicy | undefined;
  onDenied: (ip: string, why: string) => void;
  /** IPv4 addresses of a name; default: the host's resolvers (A records). */
  resolve?: (name: string) => Promise<string[]>;
  /** The DNS filter, and the resolvers' addresses it listens on (read when the proxy starts). */
  dns?: { filter: DnsFilter; resolvers: () => string[] };
  log: (msg: string) => void;
}

/** Address of the proxy's end of the veth (a link-local /32, seen by nothing else). */
const NS_ADDR = '169.254.0.2';
const HOST_ADDR = '169.254.0.1';
const RULE_PREF = 5000;
/** Proxied connections at once, per sandbox and in all: past them, new ones are refused. */
const MAX_CONNECTIONS_PER_SANDBOX = 256;
const MAX_CONNECTIONS = 4096;
/** A proxied connection with no traffic either way for this long is closed. */
const IDLE_MS = 10 * 60_000;
const MAX_LOOKUPS_PER_SANDBOX = 16;
const MAX_NAMES = 10_000;
/** Addresses kept per name (this answer's and the one before). */
const MAX_ADDRESSES_PER_NAME = 64;
/** HTTP requests of one connection being judged or answered at once (pipelining); more are refused. */
const MAX_PIPELINED = 8;
/** Past MAX_CONNECTIONS, a sandbox still gets this many: one tenant cannot lock the others out. */
const FAIR_SHARE = 32;

interface Proxied {
  s: Socket;
  /** Upstream connections it opened (TLS and upgrades: one; HTTP: the requests in flight). */
  ups: Set<{ destroy: () => void }>;
  closed: boolean;
  /** The sandbox's destination. */
  address: string;
  port: number;
  /** The names it carries now: SNI, or the Host of each request being judged or answered. */
  names: () => Array<string | undefined>;
}

/** The fwmark and routing table of a bridge's proxy: from its name, so that two runtimes differ. */
export function proxyRouting(bridge: string): { mark: number; table: number } {
  const h = createHash('sha256').update(bridge).digest().readUInt32BE(0);
  return { mark: 0x5bd00000 + (h % 0xffff), table: 100_000 + (h % 100_000) };
}

export class EgressProxy {
  private ready?: Promise<void>;
  private servers: Server[] = [];
  private readonly sockets = new Set<Socket>();
  private readonly conns = new Map<string, Set<Proxied>>();
  private total = 0;
  private readonly lookups = new Map<string, number>();
  private readonly names = new Map<string, { ips: Set<string>; last: string[]; until: number; fetched: number }>();
  private readonly resolver = new Resolver({ timeout: 3000, tries: 2 });
  private readonly routing: { mark: number; table: number };

  constructor(private readonly o: EgressProxyOptions) {
    this.routing = proxyRouting(o.bridge);
  }

  get mark(): number {
    return this.routing.mark;
  }

  /** Sets the proxy up once (again after close); concurrent callers share the work. */
  ensure(): Promise<void> {
    this.ready ??= this.setup().catch((err: unknown) => {
      this.ready = undefined;
      throw err;
    });
    return this.ready;
  }

  get active(): boolean {
    return this.servers.length > 0;
  }

  /** Stops listening, ends proxied connections, removes the netns, veth, rule and routes. */
  async close(): Promise<void> {
    const was = this.ready;
    this.ready = undefined;
    await was?.catch(() => undefined);
    for (const s of this.servers.splice(0)) s.close();
    this.o.dns?.filter.close();
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    await this.removeHostSide();
  }

  private async removeHostSide(): Promise<void> {
    const { mark, table } = this.routing;
    for (let i = 0; i < 10; i++) {
      const r = await proc('ip', ['rule', 'del', 'pref', String(RULE_PREF), 'iif', this.o.bridge, 'fwmark', String(mark), 'lookup', String(table)]);
      if (r.code !== 0) break;
    }
    await proc('ip', ['route', 'flush', 'table', String(table)]);
    if (existsSync(`/run/netns/${this.o.netns}`)) await procOk('ip', ['netns', 'del', this.o.netns]);
    if (existsSync(`/sys/class/net/${this.o.veth}`)) await proc('ip', ['link', 'del', this.o.veth]);
  }

  private async setup(): Promise<void> {
    await this.removeHostSide();
    const { mark, table } = this.routing;
    const ns = this.o.netns;
    await procOk('ip', ['-batch', '-'], {
      input: [`netns add ${ns}`, `link add ${this.o.veth} type veth peer name eth0 netns ${ns}`, `link set ${this.o.veth} up`].join('\n') + '\n',
    });
    try {
      // Replies come back from addresses the host routes elsewhere: no reverse-path check on this link.
      await writeFile(`/proc/sys/net/ipv4/conf/${this.o.veth}/rp_filter`, '0');
      const hostMac = (await readFile(`/sys/class/net/${this.o.veth}/address`, 'utf8')).trim();
      const nsMac = /link\/ether ([0-9a-f:]{17})/.exec(await procOk('ip', ['-n', ns, '-o', 'link', 'show', 'dev', 'eth0']))?.[1];
      if (!nsMac) throw new Error('the egress proxy namespace has no eth0 address');
      // In the namespace, every address is local (the listeners see the sandbox's destination),
      // except the sandboxes' subnet, which is the way back. Static neighbours: no ARP on the link.
      await procOk('ip', ['-n', ns, '-batch', '-'], {
        input:
          [
            'link set lo up',
            'link set eth0 up',
            `addr add ${NS_ADDR}/32 dev eth0`,
            `neigh replace ${HOST_ADDR} lladdr ${hostMac} dev eth0 nud permanent`,
            `route add ${this.o.subnetCidr} via ${HOST_ADDR} dev eth0 onlink table local`,
            'route add local 0.0.0.0/0 dev lo table local',
          ].join('\n') + '\n',
      });
      await procOk('ip', ['-batch', '-'], {
        input:
          [
            `neigh replace ${NS_ADDR} lladdr ${nsMac} dev ${this.o.veth} nud permanent`,
            `route replace default via ${NS_ADDR} dev ${this.o.veth} onlink table ${table}`,
            `rule add pref ${RULE_PREF} iif ${this.o.bridge} fwmark ${mark} lookup ${table}`,
          ].join('\n') + '\n',
      });
      this.servers = await this.listen();
    } catch (err) {
      await this.removeHostSide();
      throw err;
    }
  }

  /**
   * The listeners, made inside the namespace by a short-lived child and passed to this process:
   * the inspected ports on every address, and the DNS filter's UDP and TCP port 53 on each of
   * the host's resolvers' addresses.
   */
  private async listen(): Promise<Server[]> {
    const resolvers = this.o.dns ? this.o.dns.resolvers() : [];
    const specs: ListenSpec[] = [
      ...INSPECTED_PORTS.map((port): ListenSpec => ({ proto: 'tcp', host: '0.0.0.0', port })),
      ...resolvers.flatMap((host): ListenSpec[] => [
        { proto: 'udp', host, port: 53 },
        { proto: 'tcp', host, port: 53 },
      ]),
    ];
    const servers: Server[] = [];
    for (const l of await listenInNetns(this.o.netns, specs)) {
      if (l.spec.port === 53) {
        this.o.dns!.filter.attach(l);
        continue;
      }
      const port = l.spec.port;
      const server = l.server!;
      server.on('connection', (s: Socket) => this.accept(s, port));
      server.on('error', (err) => this.o.log(`egress proxy: listener ${port}: ${err.message}`));
      servers.push(server);
    }
    return servers;
  }

  private track(s: Socket): void {
    this.sockets.add(s);
    s.once('close', () => this.sockets.delete(s));
    s.on('error', () => undefined);
  }

  /**
   * Checks a sandbox's proxied connections against its policy again (it just changed): those it
   * now refuses are cut, as nftables cuts connections to addresses it now refuses.
   */
  revoke(ip: string): void {
    const policy = this.o.policyOf(ip);
    for (const c of this.conns.get(ip) ?? []) {
      if (!policy || c.names().some((n) => !decide(policy, c.address, n).allow)) this.cut(c);
    }
  }

  /** Cuts every proxied connection of a sandbox (it stopped). */
  cutAll(ip: string): void {
    for (const c of this.conns.get(ip) ?? []) this.cut(c);
  }

  private cut(c: Proxied): void {
    c.s.destroy();
    for (const u of c.ups) u.destroy();
  }

  /** Keeps an upstream connection with its sandbox's: closed with it, at once if it already is. */
  private attach(c: Proxied, up: { destroy: () => void; once: (e: 'close', f: () => void) => unknown }): void {
    if (c.closed) {
      up.destroy();
      return;
    }
    c.ups.add(up);
    up.once('close', () => c.ups.delete(up));
  }

  private accept(s: Socket, port: number): void {
    this.track(s);
    const from = s.remoteAddress ?? '';
    if (!this.o.policyOf(from)) {
      // Not (any more) a sandbox with domain rules: nothing to decide with.
      s.resetAndDestroy();
      return;
    }
    let set = this.conns.get(from);
    if (!set) this.conns.set(from, (set = new Set()));
    if (set.size >= MAX_CONNECTIONS_PER_SANDBOX || (this.total >= MAX_CONNECTIONS && set.size >= FAIR_SHARE) || this.total >= 2 * MAX_CONNECTIONS) {
      if (set.size === 0) this.conns.delete(from);
      return this.deny(s, from, 'too many connections through the egress proxy');
    }
    let name: string | undefined;
    const c: Proxied = { s, ups: new Set(), closed: false, address: s.localAddress ?? '', port: s.localPort ?? port, names: () => [name] };
    set.add(c);
    this.total++;
    s.once('close', () => {
      c.closed = true;
      for (const u of c.ups) u.destroy();
      set.delete(c);
      this.total--;
      if (set.size === 0 && this.conns.get(from) === set) this.conns.delete(from);
    });
    s.setTimeout(IDLE_MS, () => s.destroy());
    const handled = port === 443 ? this.acceptTls(c, from, (n) => (name = n)) : this.acceptHttp(c, from);
    handled.catch((err: unknown) => {
      this.o.log(`egress proxy: connection from ${from}: ${String(err)}`);
      s.destroy();
    });
  }

  private deny(s: Socket, from: string, why: string): void {
    this.o.onDenied(from, why);
    if (!s.destroyed) s.resetAndDestroy();
  }

  /** Whether a connection that carries `name` may go to `address` now; the reason when not. */
  private async judge(from: string, address: string, name: string | undefined | null): Promise<string | undefined> {
    const policy = this.o.policyOf(from);
    if (!policy) return 'the sandbox has no domain rules any more';
    const v = decide(policy, address, name);
    if (!v.allow) return v.reason;
    if (v.byName && name) {
      const lookups = this.lookups.get(from) ?? 0;
      if (lookups >= MAX_LOOKUPS_PER_SANDBOX) return 'too many name lookups in flight';
      this.lookups.set(from, lookups + 1);
      try {
        if (!(await this.resolvesTo(name, address))) return `${name} does not resolve to ${address}`;
      } finally {
        const n = (this.lookups.get(from) ?? 1) - 1;
        if (n > 0) this.lookups.set(from, n);
        else this.lookups.delete(from);
      }
      // The policy may have changed while the name was looked up.
      const now = this.o.policyOf(from);
      if (!now || !decide(now, address, name).allow) return 'the policy changed';
    }
    return undefined;
  }

  private async acceptTls(c: Proxied, from: string, named: (n: string | undefined) => void): Promise<void> {
    const { s, address, port } = c;
    const { buf: first } = await readFirst(s, new HelloScanner(), MAX_HELLO + 16_384);
    if (first.length === 0) return void s.destroy();
    const state = clientHelloState(first);
    // TLS whose hello cannot be read whole (slow, oversized, malformed) names something unreadable.
    const name = first[0] === 22 ? (state === 'complete' ? sniOf(first) : null) : undefined;
    named(name ?? undefined);
    const why = await this.judge(from, address, name);
    if (c.closed) return;
    if (why) return this.deny(s, from, why);
    const up = connect({ host: address, port });
    this.attach(c, up);
    this.track(up);
    up.setNoDelay(true);
    s.setNoDelay(true);
    up.write(first);
    s.pipe(up).pipe(s);
    up.on('error', () => s.resetAndDestroy());
    up.on('close', () => s.destroy());
  }

  /** HTTP: every request on the connection is judged by its own Host (keep-alive may change it). */
  private async acceptHttp(c: Proxied, from: string): Promise<void> {
    const { s, address, port } = c;
    // One upstream connection per sandbox connection: requests are never mixed between sandboxes.
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    // Never listening, this server enforces no timeout of its own: a head must come within
    // FIRST_BYTES_MS of the connection, or of the end of the last request in flight.
    const server = createHttpServer({ requestTimeout: 0, headersTimeout: 0, keepAliveTimeout: 0 });
    let headTimer: NodeJS.Timeout | undefined;
    const armHead = () => {
      clearTimeout(headTimer);
      headTimer = setTimeout(() => s.destroy(), FIRST_BYTES_MS);
    };
    armHead();
    // The requests being judged or answered, with their names (revoke checks each).
    const pending = new Map<IncomingMessage, string | undefined>();
    c.names = () => [...pending.values()];
    s.once('close', () => {
      clearTimeout(headTimer);
      agent.destroy();
    });
    const nameOf = (req: IncomingMessage): string | undefined | null => ((req.headersDistinct.host?.length ?? 0) > 1 ? null : hostOf(req));
    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      clearTimeout(headTimer);
      // Node's server reads every pipelined request at once: bounded here, or one connection
      // could queue any number of them (memory, upstream connections) behind a silent server.
      if (pending.size >= MAX_PIPELINED) return this.deny(s, from, 'too many pipelined requests');
      const name = nameOf(req);
      pending.set(req, name ?? undefined);
      res.once('close', () => {
        pending.delete(req);
        if (pending.size === 0 && !s.destroyed) armHead();
      });
      void this.judge(from, address, name)
        .then((why) => {
          if (c.closed) return;
          if (why) return this.deny(s, from, why);
          res.sendDate = false;
          const up = httpRequest({ host: address, port, method: req.method, path: req.url, headers: req.rawHeaders, agent, setHost: false }, (r) => {
            try {
              res.writeHead(r.statusCode ?? 502, r.statusMessage, r.rawHeaders);
            } catch {
              // An answer Node would not write (a bad status or reason): the sandbox gets a reset.
              r.destroy();
              s.resetAndDestroy();
              return;
            }
            r.pipe(res);
            r.on('error', () => s.destroy());
          });
          this.attach(c, up);
          up.on('error', () => s.resetAndDestroy());
          req.pipe(up);
        })
        .catch(() => s.destroy());
    });
    server.on('upgrade', (req: IncomingMessage, client: Socket, head: Buffer) => {
      clearTimeout(headTimer);
      const name = nameOf(req);
      pending.set(req, name ?? undefined);
      void this.upgrade(c, from, req, client, head, name).catch(() => client.destroy());
    });
    // CONNECT would tunnel anywhere: a sandbox's own request to port 80 never needs it.
    server.on('connect', () => this.deny(s, from, 'CONNECT is not allowed through the egress policy'));
    server.on('clientError', () => s.destroy());
    server.emit('connection', s);
  }

  /**
   * A WebSocket upgrade: the checked head goes upstream, and the connection becomes a tunnel only
   * if the server switches protocols. A server that ignores the Upgrade would otherwise go on
   * reading HTTP requests no one checks.
   */
  private async upgrade(c: Proxied, from: string, req: IncomingMessage, client: Socket, head: Buffer, name: string | undefined | null): Promise<void> {
    if (String(req.headers.upgrade ?? '').toLowerCase() !== 'websocket') return this.deny(client, from, 'only WebSocket upgrades pass the egress policy');
    const why = await this.judge(from, c.address, name);
    if (c.closed) return;
    if (why) return this.deny(client, from, why);
    const up = connect({ host: c.address, port: c.port });
    this.attach(c, up);
    this.track(up);
    const lines = [`${req.method} ${req.url} HTTP/${req.httpVersion}`];
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    up.write(lines.join('\r\n') + '\r\n\r\n');
    const { buf } = await readFirst(up, new HeadScanner(), 64 * 1024);
    const status = /^HTTP\/1\.[01] (\d{3}) /.exec(buf.toString('latin1', 0, Math.min(buf.length, 64)))?.[1];
    if (c.closed) return;
    if (status !== '101' || !buf.includes('\r\n\r\n')) {
      up.destroy();
      if (buf.length && /^HTTP\/1\.[01] \d{3} /.test(buf.toString('latin1', 0, 16))) client.end(buf);
      else client.destroy();
      return;
    }
    client.write(buf);
    if (head.length) up.write(head);
    client.pipe(up).pipe(client);
    up.on('error', () => client.destroy());
    up.on('close', () => client.destroy());
  }

  /** Whether `name` resolves to `address` (A records, cached for their TTL, asked again on a miss). */
  private async resolvesTo(name: string, address: string): Promise<boolean> {
    const now = Date.now();
    let entry = this.names.get(name);
    if (entry && entry.until > now && entry.ips.has(address)) {
      // Least recently used goes first: a hit moves the name to the end.
      this.names.delete(name);
      this.names.set(name, entry);
      return true;
    }
    if (entry && now - entry.fetched < 1000 && entry.until > now) return false;
    let ips: string[] = [];
    let ttl = 30;
    try {
      if (this.o.resolve) {
        ips = await this.o.resolve(name);
      } else {
        const answers = await this.resolver.resolve4(name, { ttl: true });
        ips = answers.map((a) => a.address);
        ttl = Math.min(...answers.map((a) => a.ttl), 300);
      }
    } catch {
      ips = [];
    }
    // This answer and the one before it: a name whose answers rotate still matches the one the
    // sandbox got a moment ago, and no name holds more than MAX_ADDRESSES_PER_NAME.
    const last = ips.slice(0, MAX_ADDRESSES_PER_NAME);
    const prev = entry && entry.until > now ? entry.last : [];
    const keep = new Set([...last, ...prev].slice(0, MAX_ADDRESSES_PER_NAME));
    entry = { ips: keep, last, until: now + Math.max(5, ttl) * 1000, fetched: now };
    this.names.delete(name);
    this.names.set(name, entry);
    while (this.names.size > MAX_NAMES) this.names.delete(this.names.keys().next().value as string);
    return keep.has(address);
  }
}
