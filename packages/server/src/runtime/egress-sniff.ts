// What the egress proxy reads of a connection before deciding: the first bytes (a TLS
// ClientHello, an HTTP request head), read in time linear in what arrives, and the name they carry.

import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { canonicalName } from './egress-policy.js';

/** How long a connection may take to send its first bytes (ClientHello, request head). */
export const FIRST_BYTES_MS = 10_000;
/** OpenSSL takes ClientHellos of up to 131,396 bytes; a longer one is refused, not read past. */
export const MAX_HELLO = 132 * 1024;

/** Decides when readFirst has enough, in time linear in what arrives (a sandbox may send a byte at a time). */
export interface Scanner {
  /** Takes the next chunk (the ones before are in `all`, joined only when needed); true: enough. */
  feed(chunk: Buffer, all: () => Buffer, total: number): boolean;
}

/** Enough once the first TLS handshake message is whole, or it is not one: records are joined only as each completes. */
export class HelloScanner implements Scanner {
  private need = 5;
  feed(_chunk: Buffer, all: () => Buffer, total: number): boolean {
    if (total < this.need) return false;
    const b = all();
    if (clientHelloState(b) !== 'partial') return true;
    // Wait for the end of the record that is not whole yet (or for the next record's header).
    let off = 0;
    while (off + 5 <= b.length) {
      const end = off + 5 + b.readUInt16BE(off + 3);
      if (end > b.length) {
        this.need = end;
        return false;
      }
      off = end;
    }
    this.need = off + 5;
    return false;
  }
}

/** Enough once an HTTP head has ended (its blank line), looking at each new chunk and the 3 bytes before it. */
export class HeadScanner implements Scanner {
  private tail = Buffer.alloc(0);
  feed(chunk: Buffer): boolean {
    const look = Buffer.concat([this.tail, chunk]);
    if (look.includes('\r\n\r\n')) return true;
    this.tail = look.subarray(Math.max(0, look.length - 3));
    return false;
  }
}

/**
 * Collects a connection's first bytes until the scanner says enough (or `max` bytes arrived, the
 * peer ended, or FIRST_BYTES_MS passed: `timedOut`), pausing the socket afterwards.
 */
export function readFirst(s: Socket, scanner: Scanner, max: number): Promise<{ buf: Buffer; timedOut: boolean }> {
  return new Promise((resolve) => {
    let chunks: Buffer[] = [];
    let total = 0;
    const all = () => {
      if (chunks.length > 1) chunks = [Buffer.concat(chunks)];
      return chunks[0] ?? Buffer.alloc(0);
    };
    const finish = (timedOut: boolean) => {
      clearTimeout(timer);
      s.off('data', onData);
      s.off('end', onEnd);
      s.off('error', onEnd);
      s.pause();
      resolve({ buf: all(), timedOut });
    };
    const onData = (c: Buffer) => {
      chunks.push(c);
      total += c.length;
      if (total >= max || scanner.feed(c, all, total)) finish(false);
    };
    const onEnd = () => finish(false);
    const timer = setTimeout(() => finish(true), FIRST_BYTES_MS);
    s.on('data', onData);
    s.once('end', onEnd);
    s.once('error', onEnd);
  });
}

/**
 * Whether `b` holds a whole TLS ClientHello ('complete'), could still become one ('partial'), or
 * is not one ('other'). The handshake message may span several records.
 */
export function clientHelloState(b: Buffer): 'complete' | 'partial' | 'oversize' | 'other' {
  const hs = handshakeBytes(b);
  if (hs === undefined) return 'other';
  if (hs.length < 4) return 'partial';
  if (hs[0] !== 1) return 'other';
  const len = hs.readUIntBE(1, 3);
  if (len > MAX_HELLO) return 'oversize';
  return hs.length >= 4 + len ? 'complete' : 'partial';
}

/** The handshake layer's bytes from the leading TLS handshake records, or undefined if not TLS. */
function handshakeBytes(b: Buffer): Buffer | undefined {
  const parts: Buffer[] = [];
  let off = 0;
  while (off < b.length) {
    if (b[off] !== 22) return parts.length ? Buffer.concat(parts) : undefined;
    if (off + 5 > b.length) break;
    if (b[off + 1] !== 3) return undefined;
    const len = b.readUInt16BE(off + 3);
    if (len === 0 || len > 16_384 + 2048) return undefined;
    parts.push(b.subarray(off + 5, Math.min(b.length, off + 5 + len)));
    if (off + 5 + len > b.length) break;
    off += 5 + len;
  }
  return Buffer.concat(parts);
}

/**
 * The host_name of a ClientHello's server_name extension, canonical; undefined when it has none,
 * null when the hello or the name cannot be read.
 */
export function sniOf(b: Buffer): string | undefined | null {
  if (clientHelloState(b) !== 'complete') return null;
  const hs = handshakeBytes(b)!;
  const body = hs.subarray(4, 4 + hs.readUIntBE(1, 3));
  let off = 2 + 32; // version, random
  const skip = (lenBytes: number): boolean => {
    if (off + lenBytes > body.length) return false;
    const n = body.readUIntBE(off, lenBytes);
    off += lenBytes + n;
    return off <= body.length;
  };
  if (!skip(1) || !skip(2) || !skip(1)) return null; // session id, cipher suites, compression
  if (off === body.length) return undefined; // no extensions at all
  if (off + 2 > body.length) return null;
  const end = off + 2 + body.readUInt16BE(off);
  if (end > body.length) return null;
  off += 2;
  let found: string | undefined | null;
  while (off + 4 <= end) {
    const type = body.readUInt16BE(off);
    const len = body.readUInt16BE(off + 2);
    if (off + 4 + len > end) return null;
    const ext = body.subarray(off + 4, off + 4 + len);
    off += 4 + len;
    if (type !== 0) continue;
    // One server_name extension, holding one host_name (RFC 6066): anything else is unreadable.
    if (found !== undefined || ext.length < 2 || 2 + ext.readUInt16BE(0) !== ext.length) return null;
    found = null;
    let p = 2;
    while (p < ext.length) {
      if (p + 3 > ext.length) return null;
      const kind = ext[p]!;
      const n = ext.readUInt16BE(p + 1);
      if (p + 3 + n > ext.length) return null;
      if (kind === 0) {
        if (found !== null) return null;
        const name = ext.subarray(p + 3, p + 3 + n).toString('latin1');
        found = /^[A-Za-z0-9._-]{1,253}$/.test(name) ? canonicalName(name) ?? null : null;
        if (found === null) return null;
      }
      p += 3 + n;
    }
    if (found === null) return null;
  }
  if (off !== end) return null;
  return found;
}

/**
 * The host a request names: its absolute-form target's, else its Host header's (port removed).
 * Undefined when it names none; null when what it names cannot be read, or it names two hosts.
 */
export function hostOf(req: Pick<IncomingMessage, 'url' | 'headers'>): string | undefined | null {
  const strip = (h: string): string | null => {
    const m = /^([A-Za-z0-9._-]{1,253})(?::\d{1,5})?$/.exec(h.trim());
    return m ? (canonicalName(m[1]) ?? null) : null;
  };
  const header = typeof req.headers.host === 'string' && req.headers.host !== '' ? strip(req.headers.host) : undefined;
  if (header === null) return null;
  let target: string | undefined;
  if (req.url && !req.url.startsWith('/') && req.url !== '*') {
    let host: string;
    try {
      host = new URL(req.url).host;
    } catch {
      return null;
    }
    const t = strip(host);
    if (t === null) return null;
    target = t;
  }
  if (target && header && target !== header) return null;
  return target ?? header;
}
