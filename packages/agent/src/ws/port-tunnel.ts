import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import { connect, Socket } from 'node:net';
import { endianness } from 'node:os';
import type { Duplex } from 'node:stream';
import type { Agent, UpgradeRoute } from '../context.js';
import { logLine } from '../log.js';
import { ServiceError } from '../proto.js';

/** The Upgrade token of a raw TCP tunnel (compared case-insensitively). */
export const TUNNEL_PROTOCOL = 'sandboxd-tcp';
/** How long one connection attempt to an address inside the sandbox may take. */
export const CONNECT_TIMEOUT_MS = 5_000;
const SWITCHING = `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${TUNNEL_PROTOCOL}\r\n\r\n`;
const LISTEN_STATE = '0A';
/** How long a refused client may keep its end open after the error answer. */
const REFUSED_LINGER_MS = 10_000;

/** A listening socket of /proc/net/tcp{,6}. */
export interface ListeningSocket {
  /** Dotted IPv4, or IPv6 in its compressed form (RFC 5952). */
  address: string;
  port: number;
}

/**
 * The sockets in LISTEN state of one /proc/net/tcp or /proc/net/tcp6 table. The kernel prints an
 * address as 32-bit words in hex, each the word's bytes (network order in memory) read in the
 * host's byte order; the port is a plain hex number. Malformed lines are skipped.
 */
export function parseProcNetTcp(text: string, byteOrder: 'LE' | 'BE' = endianness()): ListeningSocket[] {
  const out: ListeningSocket[] = [];
  for (const line of text.split('\n')) {
    const fields = line.trim().split(/\s+/);
    // sl local_address rem_address st ...
    if (fields.length < 4 || !/^\d+:$/.test(fields[0]!) || fields[3]!.toUpperCase() !== LISTEN_STATE) continue;
    const m = /^([0-9A-Fa-f]{8}|[0-9A-Fa-f]{32}):([0-9A-Fa-f]{4})$/.exec(fields[1]!);
    if (!m) continue;
    const hex = m[1]!;
    const bytes = Buffer.alloc(hex.length / 2);
    for (let i = 0; i < hex.length; i += 8) {
      const word = parseInt(hex.slice(i, i + 8), 16);
      if (byteOrder === 'LE') bytes.writeUInt32LE(word, i / 2);
      else bytes.writeUInt32BE(word, i / 2);
    }
    out.push({ address: bytes.length === 4 ? bytes.join('.') : formatIpv6(bytes), port: parseInt(m[2]!, 16) });
  }
  return out;
}

/** 16 bytes as an IPv6 address: lower-case groups, the longest run of two or more zero groups as '::'. */
export function formatIpv6(bytes: Buffer): string {
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i));
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (gs: number[]) => gs.map((g) => g.toString(16)).join(':');
  if (bestLen < 2) return hex(groups);
  return `${hex(groups.slice(0, bestStart))}::${hex(groups.slice(bestStart + bestLen))}`;
}

/**
 * Where to connect for `port`, given the listening sockets: a wildcard address becomes its
 * loopback (0.0.0.0 → 127.0.0.1, :: → ::1), an IPv4-mapped IPv6 address its IPv4 address, any other
 * address is taken as it is; in the tables' order, without repeats, and without 127.0.0.1 (tried
 * before the tables are read).
 */
export function tunnelCandidates(sockets: ListeningSocket[], port: number): string[] {
  const seen = new Set<string>(['127.0.0.1']);
  const out: string[] = [];
  for (const s of sockets) {
    if (s.port !== port) continue;
    let host = s.address;
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(host) ?? /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(host);
    if (mapped) host = mapped.length === 2 ? mapped[1]! : v4FromGroups(mapped[1]!, mapped[2]!);
    if (host === '0.0.0.0') host = '127.0.0.1';
    else if (host === '::') host = '::1';
    if (seen.has(host)) continue;
    seen.add(host);
    out.push(host);
  }
  return out;
}

function v4FromGroups(hi: string, lo: string): string {
  const a = parseInt(hi, 16);
  const b = parseInt(lo, 16);
  return [a >> 8, a & 0xff, b >> 8, b & 0xff].join('.');
}

async function listeningSockets(): Promise<ListeningSocket[]> {
  const out: ListeningSocket[] = [];
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    try {
      out.push(...parseProcNetTcp(await readFile(file, 'utf8')));
    } catch {
      // No IPv6 in this kernel (or no /proc): nothing listens there.
    }
  }
  return out;
}

/** One connection attempt; null when it failed or took longer than CONNECT_TIMEOUT_MS. */
function tryConnect(host: string, port: number): Promise<Socket | null> {
  return new Promise((resolve) => {
    // Half-open so that the target's end does not close our side before the client has it all.
    const target = connect({ host, port, allowHalfOpen: true });
    const fail = () => {
      clearTimeout(timer);
      target.destroy();
      resolve(null);
    };
    const timer = setTimeout(fail, CONNECT_TIMEOUT_MS);
    target.once('error', fail);
    target.once('connect', () => {
      clearTimeout(timer);
      target.removeListener('error', fail);
      // Until the tunnel's own handlers are on, an error must not throw.
      target.on('error', () => target.destroy());
      resolve(target);
    });
  });
}

/** The port of the query: exactly one `port`, a decimal integer 1..65535 without leading zeros. */
export function parseTunnelPort(url: URL): number | null {
  const values = url.searchParams.getAll('port');
  if (values.length !== 1 || !/^[1-9]\d{0,4}$/.test(values[0]!)) return null;
  const port = Number(values[0]);
  return port <= 65535 ? port : null;
}

/** Answers an upgrade with an error and ends the socket (as server.ts does for unknown paths). */
function refuse(socket: Duplex, err: ServiceError, requestId: string): void {
  const body = JSON.stringify(err.toBody(requestId));
  socket.end(
    `HTTP/1.1 ${err.status} ${STATUS_CODES[err.status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `x-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`,
  );
  // Bytes the client sent after its headers are read and dropped: closing with them unread would
  // reset the connection and could lose the answer. A client that never closes is cut after a while.
  socket.resume();
  const timer = setTimeout(() => socket.destroy(), REFUSED_LINGER_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
}

/**
 * Upgrade /ports/tunnel?port=N (Upgrade: sandboxd-tcp): a raw TCP tunnel to port N inside the
 * sandbox, for the gateway's preview URLs. The agent connects to 127.0.0.1:N, else to the addresses
 * that listen on N in the sandbox's /proc/net/tcp{,6}; then answers 101 and pipes bytes both ways.
 * When either side ends, the other is ended once what was sent to it is flushed, and both are
 * destroyed (no half-open tunnels: to the agent, the gateway's close is an end); an error or close
 * of either destroys both. No idle timeout here: the gateway owns them.
 */
export function portTunnelRoute(agent: Pick<Agent, 'stats' | 'helperPath'>): UpgradeRoute {
  return {
    path: '/ports/tunnel',
    handler: (req, socket, head, requestId) => {
      openTunnel(agent, req, socket, head, requestId).catch((err: unknown) => {
        logLine(`/ports/tunnel: request ${requestId}: ${(err as Error)?.stack ?? String(err)}`);
        socket.destroy();
      });
    },
  };
}

async function openTunnel(agent: Pick<Agent, 'stats' | 'helperPath'>, req: IncomingMessage, client: Duplex, head: Buffer, requestId: string): Promise<void> {
  let clientGone = false;
  client.on('error', () => client.destroy());
  client.once('close', () => (clientGone = true));
  const failWith = (err: ServiceError) => {
    agent.stats.totalErrors++;
    refuse(client, err, requestId);
  };

  const upgrade = req.headers.upgrade ?? '';
  if (upgrade.trim().toLowerCase() !== TUNNEL_PROTOCOL) {
    failWith(new ServiceError('VALIDATION_ERROR', `/ports/tunnel needs Upgrade: ${TUNNEL_PROTOCOL}`));
    return;
  }
  const port = parseTunnelPort(new URL(req.url ?? '/', 'http://agent'));
  if (port === null) {
    failWith(new ServiceError('VALIDATION_ERROR', 'port must be one decimal integer from 1 to 65535'));
    return;
  }

  let target = await tryConnect('127.0.0.1', port);
  if (!target && !clientGone) {
    for (const host of tunnelCandidates(await listeningSockets(), port)) {
      if (clientGone) break;
      target = await tryConnect(host, port);
      if (target) break;
    }
  }
  if (clientGone) {
    target?.destroy();
    return;
  }
  if (!target) {
    failWith(new ServiceError('PORT_NOT_LISTENING', `nothing is listening on port ${port} inside the sandbox`));
    return;
  }
  splice(client, target, head, agent.helperPath);
}

function splice(client: Duplex, target: Socket, head: Buffer, helper: string | null): void {
  const teardown = () => {
    client.destroy();
    target.destroy();
  };
  target.on('error', teardown);
  client.on('error', teardown);
  target.once('close', teardown);
  client.once('close', teardown);
  // Each side is ended by the pipe when the other ends; once that end is flushed, the tunnel is over.
  target.once('finish', teardown);
  client.once('finish', teardown);
  target.setNoDelay(true);
  target.setTimeout(0);
  if (client instanceof Socket) client.setTimeout(0);
  client.write(SWITCHING);
  if (head.length > 0) target.write(head);
  const inJs = () => {
    client.pipe(target);
    target.pipe(client);
  };
  inJs();
  if (!helper || !(client instanceof Socket) || fdOf(client) === undefined || fdOf(target) === undefined) return;
  // A tunnel that carries little (a page's small requests) stays here: a helper's start costs more.
  let moved = 0;
  const count = (c: Buffer) => {
    moved += c.length;
    if (moved < IN_KERNEL_AFTER_BYTES) return;
    client.off('data', count);
    target.off('data', count);
    // After this chunk went on through the pipe (its listener runs after this one).
    setImmediate(() => {
      if (client.destroyed || target.destroyed) return;
      client.unpipe(target);
      target.unpipe(client);
      inKernel(helper, client, target, teardown, inJs);
    });
  };
  client.on('data', count);
  target.on('data', count);
}

/** A tunnel that has moved this much either way is handed to the kernel (sbx-helper relay). */
export const IN_KERNEL_AFTER_BYTES = 1024 * 1024;

function fdOf(sock: Socket): number | undefined {
  const fd = (sock as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && fd > 2 ? fd : undefined;
}

type ReadableHandle = { readStop(): number; readStart: () => number; reading?: boolean };

/** Node stops reading the socket (whatever asks it to resume) until the returned release. */
function holdReads(sock: Socket): (resume: boolean) => void {
  const h = (sock as unknown as { _handle: ReadableHandle })._handle;
  h.readStop();
  h.reading = false;
  h.readStart = () => 0;
  return (resume) => {
    delete (h as Partial<ReadableHandle>).readStart;
    h.reading = false;
    if (resume && !sock.destroyed) {
      h.reading = true;
      h.readStart();
    }
  };
}

/**
 * The tunnel's bytes moved in the kernel (splice) by `sbx-helper relay`, which ends once one side's
 * end has been passed on (as the JavaScript relay does); both sockets are then closed. A helper
 * that does not start leaves the JavaScript relay.
 */
function inKernel(helper: string, client: Socket, target: Socket, teardown: () => void, inJs: () => void): void {
  const releaseClient = holdReads(client);
  const releaseTarget = holdReads(target);
  // What Node read already goes first.
  for (let c: Buffer | null; (c = client.read() as Buffer | null) !== null; ) target.write(c);
  for (let c: Buffer | null; (c = target.read() as Buffer | null) !== null; ) client.write(c);
  const flushed = (s: Socket) => new Promise<void>((resolve) => (s.writableLength === 0 ? resolve() : s.write(Buffer.alloc(0), () => resolve())));
  void Promise.all([flushed(client), flushed(target)]).then(() => {
    if (client.destroyed || target.destroyed) return teardown();
    const child = spawn(helper, ['relay', '3', '4'], { stdio: ['ignore', 'ignore', 'ignore', fdOf(client)!, fdOf(target)!] });
    // The helper holds the connections through its copies: a side closed here must end it.
    const stop = () => child.kill('SIGKILL');
    client.once('close', stop);
    target.once('close', stop);
    child.once('error', () => {
      client.off('close', stop);
      target.off('close', stop);
      releaseClient(true);
      releaseTarget(true);
      inJs();
    });
    child.once('exit', teardown);
  });
}
