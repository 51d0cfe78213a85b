import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { ServiceError } from '@sandboxd/protocol';

export interface ConnectionLimitsOptions {
  /** Open connections from one client address (API and gateway together). */
  perClient: number;
  /** Requests in flight, WebSocket tunnels and event streams of one organization. */
  perOrg: number;
  /** Open connections in all; past it a connection is closed at once (the fd budget). */
  total: number;
}

/**
 * How long a connection refused for its client's cap may live, from its accept, whatever it sends:
 * enough to read a request and send the 429.
 */
const REFUSED_LINGER_MS = 5000;
/**
 * Refused connections one client may have lingering at once; past that, its connections are closed
 * unread. Without this bound the refused connections of one client (each kept alive by a byte
 * every few seconds) filled the total budget and every other client was turned away.
 */
export const REFUSED_PER_CLIENT = 8;

const refusal = Symbol('sandboxd.connectionRefusal');
type MarkedSocket = Socket & { [refusal]?: ServiceError };

/**
 * Caps on what one client (by address) and one organization may hold open, so that no single
 * client or tenant can take the daemon's file descriptors (20000 here) from the others. Counts live
 * in this process: each control or edge replica enforces them on its own connections.
 *
 * A connection over its client's cap is still read, so that it can be answered with a 429 that
 * says which limit was hit, and is closed after that answer (or REFUSED_LINGER_MS); nothing it asks
 * for is done. Past `total`, connections are closed unread.
 */
export class ConnectionLimits {
  private readonly byClient = new Map<string, number>();
  private readonly byOrg = new Map<string, number>();
  private readonly refusedByClient = new Map<string, number>();
  private open = 0;

  constructor(readonly opts: ConnectionLimitsOptions) {}

  /** Counts an accepted socket against its client until it closes (see watch()). */
  admit(socket: Socket): void {
    const s = socket as MarkedSocket;
    if (this.open >= this.opts.total) {
      socket.destroy();
      return;
    }
    const client = clientOf(socket);
    const n = this.byClient.get(client) ?? 0;
    let counts = this.byClient;
    if (n >= this.opts.perClient) {
      if ((this.refusedByClient.get(client) ?? 0) >= REFUSED_PER_CLIENT) {
        socket.destroy();
        return;
      }
      s[refusal] = new ServiceError(
        'RATE_LIMIT_EXCEEDED',
        `too many open connections from ${client}: the limit is ${this.opts.perClient} per client (SANDBOXD_MAX_CONNECTIONS_PER_CLIENT); close some and retry`,
        { retry_after: 1, limit: this.opts.perClient },
        { 'retry-after': '1', connection: 'close' },
      );
      // A deadline, not an idle timeout: a byte every few seconds must not keep it open.
      const linger = setTimeout(() => socket.destroy(), REFUSED_LINGER_MS);
      linger.unref();
      socket.once('close', () => clearTimeout(linger));
      counts = this.refusedByClient;
    }
    counts.set(client, (counts.get(client) ?? 0) + 1);
    this.open++;
    socket.once('close', () => {
      this.open--;
      const left = (counts.get(client) ?? 1) - 1;
      if (left > 0) counts.set(client, left);
      else counts.delete(client);
    });
  }

  /** Counts every connection `server` accepts (before the HTTP parser sees it). */
  watch(server: Server): void {
    server.prependListener('connection', (socket: Socket) => this.admit(socket));
  }

  /**
   * Takes one of the organization's slots for a request, tunnel or stream; the returned release
   * is idempotent. Throws a 429 when the organization holds its cap already.
   */
  acquireOrg(orgId: string): () => void {
    const n = this.byOrg.get(orgId) ?? 0;
    if (n >= this.opts.perOrg) {
      throw new ServiceError(
        'RATE_LIMIT_EXCEEDED',
        `this organization has ${n} requests, tunnels and event streams open: the limit is ${this.opts.perOrg} (SANDBOXD_MAX_CONNECTIONS_PER_ORG); close some and retry`,
        { retry_after: 1, limit: this.opts.perOrg },
        { 'retry-after': '1' },
      );
    }
    this.byOrg.set(orgId, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.byOrg.get(orgId) ?? 1) - 1;
      if (left > 0) this.byOrg.set(orgId, left);
      else this.byOrg.delete(orgId);
    };
  }

  /** Open connections and organization slots in use (tests, metrics). */
  usage(): { open: number; clients: Record<string, number>; orgs: Record<string, number> } {
    return { open: this.open, clients: Object.fromEntries(this.byClient), orgs: Object.fromEntries(this.byOrg) };
  }
}

/** Why the connection a request came on was refused, if it was (answer it with this and close). */
export function refusalOf(socket: Socket | null | undefined): ServiceError | undefined {
  return socket ? (socket as MarkedSocket)[refusal] : undefined;
}

/** The client's address, with IPv4-mapped IPv6 addresses written as IPv4. */
export function clientOf(socket: Socket): string {
  const a = socket.remoteAddress ?? 'unknown';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}
