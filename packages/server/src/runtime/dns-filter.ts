import { randomInt } from 'node:crypto';
import { createSocket, type RemoteInfo, type Socket as UdpSocket } from 'node:dgram';
import { connect, type Server, type Socket } from 'node:net';
import { answer, MAX_UDP_PAYLOAD, RCODE, readQuery, relayAnswer, upstreamQuery, type DnsQuery } from './dns-wire.js';
import { dnsVerdict, type EgressPolicy } from './egress-policy.js';
import type { Listening } from './netns-listen.js';

/**
 * The DNS of sandboxes whose policy names domains (an allow list, or deny entries of names). Their
 * queries to the host's resolver are routed, like the egress proxy's connections, into the proxy's
 * namespace, where this filter holds a UDP socket and a TCP listener on each resolver's address
 * (so it knows which resolver the sandbox asked). A query for a name the policy does not allow is
 * answered REFUSED at once; an allowed one is asked again, in the filter's own words (its own ID,
 * the name in lowercase, no options), of that resolver from the host, and the answer relayed.
 * With an allow list, only the names the egress proxy would let a connection name resolve, and
 * only for address types (egress-policy.ts `dnsVerdict`): a query for any other name never
 * leaves the host, so it cannot carry data out.
 *
 * Work is bounded per sandbox: the kernel drops its DNS packets past a rate (the sandbox's chain),
 * and here its queries past a rate and its lookups in flight get SERVFAIL at once, so that one
 * sandbox's flood neither holds the daemon nor delays another's lookups.
 */
export interface DnsFilterOptions {
  /** The policy of a sandbox whose DNS is filtered, by its address; undefined for any other. */
  policyOf: (ip: string) => EgressPolicy | undefined;
  onDenied: (ip: string, why: string) => void;
  log: (msg: string) => void;
}

/** Queries a sandbox may make per second, and in a burst. */
const QUERIES_PER_SECOND = 100;
const QUERY_BURST = 200;
/** Lookups in flight upstream, per sandbox and in all; past the total, each sandbox still gets a few. */
const MAX_INFLIGHT_PER_SANDBOX = 32;
const MAX_INFLIGHT = 1024;
const FAIR_SHARE = 4;
/** How long the resolver may take; then the sandbox gets SERVFAIL (its resolver library retries). */
const UPSTREAM_TIMEOUT_MS = 4000;
/** TCP: connections per sandbox, idle time, and the largest query taken (a real one is < 300 bytes). */
const MAX_TCP_PER_SANDBOX = 8;
const TCP_IDLE_MS = 10_000;
const MAX_QUERY_BYTES = 1024;
/** At most one log line per sandbox per this long (a refusal's name and reason). */
const LOG_EVERY_MS = 10_000;

export interface DnsFilterCounts {
  relayed: number;
  refused: number;
  /** SERVFAIL: over a bound, no answer from the resolver, or an answer that did not match. */
  failed: number;
  /** Unreadable packets that got no answer at all. */
  dropped: number;
}

export class DnsFilter {
  private readonly udp: UdpSocket[] = [];
  private readonly servers: Server[] = [];
  private readonly tcp = new Map<string, Set<Socket>>();
  private readonly inflight = new Map<string, number>();
  private total = 0;
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly logged = new Map<string, number>();
  readonly counts: DnsFilterCounts = { relayed: 0, refused: 0, failed: 0, dropped: 0 };

  constructor(private readonly o: DnsFilterOptions) {}

  /** Takes a socket listenInNetns made for the filter (UDP or TCP, on a resolver's address, port 53). */
  attach(l: Listening): void {
    const resolver = l.spec.host;
    if (l.udp) {
      const sock = l.udp;
      this.udp.push(sock);
      sock.on('error', (err) => this.o.log(`dns filter: udp ${resolver}: ${err.message}`));
      sock.on('message', (msg: Buffer, rinfo: RemoteInfo) => this.datagram(sock, resolver, msg, rinfo));
    } else {
      this.servers.push(l.server);
      l.server.on('error', (err) => this.o.log(`dns filter: tcp ${resolver}: ${err.message}`));
      l.server.on('connection', (s: Socket) => this.connection(s, resolver));
    }
  }

  /** Stops listening and ends its TCP connections (the proxy's namespace is going away). */
  close(): void {
    for (const s of this.udp.splice(0)) s.close();
    for (const s of this.servers.splice(0)) s.close();
    for (const set of this.tcp.values()) for (const s of set) s.destroy();
    this.tcp.clear();
  }

  /** Forgets a sandbox (destroyed or stopped): its TCP connections end, its rate starts afresh. */
  forget(ip: string): void {
    for (const s of this.tcp.get(ip) ?? []) s.destroy();
    this.tcp.delete(ip);
    this.buckets.delete(ip);
    this.logged.delete(ip);
  }

  private datagram(sock: UdpSocket, resolver: string, msg: Buffer, rinfo: RemoteInfo): void {
    void this.handle(rinfo.address, resolver, msg, 'udp').then((reply) => {
      if (reply) sock.send(reply, rinfo.port, rinfo.address, () => undefined);
    });
  }

  private connection(s: Socket, resolver: string): void {
    s.on('error', () => undefined);
    const from = s.remoteAddress ?? '';
    if (!this.o.policyOf(from)) return void s.resetAndDestroy();
    let set = this.tcp.get(from);
    if (!set) this.tcp.set(from, (set = new Set()));
    if (set.size >= MAX_TCP_PER_SANDBOX) {
      this.deny(from, 'too many DNS connections');
      if (set.size === 0) this.tcp.delete(from);
      return void s.resetAndDestroy();
    }
    set.add(s);
    s.once('close', () => {
      set.delete(s);
      if (set.size === 0 && this.tcp.get(from) === set) this.tcp.delete(from);
    });
    s.setTimeout(TCP_IDLE_MS, () => s.destroy());
    // Messages with a 2-byte length, answered one at a time, in order (RFC 7766 lets a server).
    let buf: Buffer = Buffer.alloc(0);
    let busy = false;
    const pump = (): void => {
      if (busy || s.destroyed || buf.length < 2) return;
      const n = buf.readUInt16BE(0);
      if (n > MAX_QUERY_BYTES) return void s.destroy();
      if (buf.length < 2 + n) return;
      const msg = buf.subarray(2, 2 + n);
      buf = buf.subarray(2 + n);
      busy = true;
      s.pause();
      void this.handle(from, resolver, msg, 'tcp').then((reply) => {
        busy = false;
        if (s.destroyed) return;
        if (!reply) return void s.destroy();
        const len = Buffer.alloc(2);
        len.writeUInt16BE(reply.length);
        s.write(Buffer.concat([len, reply]));
        s.resume();
        pump();
      });
    };
    s.on('data', (c: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, c]) : c;
      pump();
    });
  }

  private deny(from: string, why: string): void {
    this.o.onDenied(from, why);
    const now = Date.now();
    if ((this.logged.get(from) ?? 0) + LOG_EVERY_MS > now) return;
    this.logged.set(from, now);
    this.o.log(`dns filter: sandbox ${from}: ${why}`);
  }

  /** A rate of QUERIES_PER_SECOND with bursts of QUERY_BURST (a token bucket). */
  private take(from: string): boolean {
    const now = Date.now();
    const b = this.buckets.get(from) ?? { tokens: QUERY_BURST, at: now };
    b.tokens = Math.min(QUERY_BURST, b.tokens + ((now - b.at) / 1000) * QUERIES_PER_SECOND);
    b.at = now;
    this.buckets.set(from, b);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  /** The answer to one message from `from` to `resolver`; undefined: none at all (dropped). */
  private async handle(from: string, resolver: string, msg: Buffer, proto: 'udp' | 'tcp'): Promise<Buffer | undefined> {
    const policy = this.o.policyOf(from);
    if (!policy || msg.length > MAX_QUERY_BYTES) {
      this.counts.dropped++;
      return undefined;
    }
    const r = readQuery(msg);
    if (!r.ok) {
      if (r.id === undefined) {
        this.counts.dropped++;
        return undefined;
      }
      this.counts.refused++;
      this.deny(from, 'a DNS message the filter cannot read');
      return answer(r.id, RCODE.REFUSED, r.question);
    }
    const q = r.query;
    const fail = (why: string) => {
      this.counts.failed++;
      this.deny(from, why);
      return answer(q.id, RCODE.SERVFAIL, q.question, q.rd);
    };
    if (!this.take(from)) return fail('DNS queries over the rate limit');
    const v = dnsVerdict(policy, q.name, q.qtype);
    if (!v.allow) {
      this.counts.refused++;
      this.deny(from, `DNS query refused: ${v.reason}`);
      return answer(q.id, RCODE.REFUSED, q.question, q.rd);
    }
    const mine = this.inflight.get(from) ?? 0;
    if (mine >= MAX_INFLIGHT_PER_SANDBOX || (this.total >= MAX_INFLIGHT && mine >= FAIR_SHARE)) return fail('too many DNS lookups in flight');
    this.inflight.set(from, mine + 1);
    this.total++;
    let got: Buffer | undefined;
    const sent = upstreamQuery(q, randomInt(0, 65536));
    try {
      got = proto === 'udp' ? await exchangeUdp(resolver, sent, q) : await exchangeTcp(resolver, sent, q);
    } finally {
      this.total--;
      const n = (this.inflight.get(from) ?? 1) - 1;
      if (n > 0) this.inflight.set(from, n);
      else this.inflight.delete(from);
    }
    // The policy may have changed while the resolver answered.
    const now = this.o.policyOf(from);
    if (!now || !dnsVerdict(now, q.name, q.qtype).allow) {
      this.counts.refused++;
      this.deny(from, 'DNS query refused: the policy changed');
      return answer(q.id, RCODE.REFUSED, q.question, q.rd);
    }
    if (!got) return fail(`no answer from the resolver for ${q.name}`);
    if (proto === 'udp' && got.length > (q.edns === undefined ? 512 : Math.max(512, Math.min(q.edns, MAX_UDP_PAYLOAD)))) {
      // Larger than the client can take over UDP: truncated, so it asks again over TCP.
      const tc = answer(q.id, RCODE.NOERROR, q.question, q.rd);
      tc[2] = tc[2]! | 0x02;
      return tc;
    }
    this.counts.relayed++;
    return got;
  }
}

/** One query to the resolver over UDP from a socket of its own (a fresh random port); its relayed answer, or undefined. */
function exchangeUdp(resolver: string, sent: Buffer, q: DnsQuery): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const sock = createSocket('udp4');
    let done = false;
    const finish = (b: Buffer | undefined) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.close();
      resolve(b);
    };
    const timer = setTimeout(() => finish(undefined), UPSTREAM_TIMEOUT_MS);
    sock.on('error', () => finish(undefined));
    sock.on('message', (m: Buffer, rinfo: RemoteInfo) => {
      if (rinfo.address !== resolver || rinfo.port !== 53) return;
      const out = relayAnswer(m, sent, q);
      if (out) finish(out);
    });
    sock.send(sent, 53, resolver, (err) => err && finish(undefined));
  });
}

/** The same over TCP (the client asked over TCP: a truncated answer, or a large one). */
function exchangeTcp(resolver: string, sent: Buffer, q: DnsQuery): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const s = connect({ host: resolver, port: 53 });
    let buf: Buffer = Buffer.alloc(0);
    let done = false;
    const finish = (b: Buffer | undefined) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      resolve(b);
    };
    const timer = setTimeout(() => finish(undefined), UPSTREAM_TIMEOUT_MS);
    s.on('error', () => finish(undefined));
    s.on('close', () => finish(undefined));
    s.on('data', (c: Buffer) => {
      buf = Buffer.concat([buf, c]);
      if (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) finish(relayAnswer(buf.subarray(2, 2 + buf.readUInt16BE(0)), sent, q));
    });
    const len = Buffer.alloc(2);
    len.writeUInt16BE(sent.length);
    s.write(Buffer.concat([len, sent]));
  });
}
