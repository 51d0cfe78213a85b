/**
 * The little of the DNS wire format (RFC 1035) the DNS filter needs: a strict reading of a query
 * (one question, plain labels, at most an EDNS OPT record), the query the filter sends upstream in
 * its own words, and the answers it makes itself. Written here rather than taken from a library:
 * the filter works on the question's exact bytes (echoed back, compared with the answer's) and
 * refuses what a general decoder would accept (compression in a query, odd label bytes, extra
 * records).
 */

export const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, REFUSED: 5 } as const;
export const QTYPE = { A: 1, NS: 2, CNAME: 5, SOA: 6, PTR: 12, MX: 15, TXT: 16, AAAA: 28, SRV: 33, OPT: 41, SVCB: 64, HTTPS: 65, ANY: 255 } as const;
const CLASS_IN = 1;
const HEADER = 12;
/** The largest UDP answer the filter asks upstream for (the DNS flag day's safe size). */
export const MAX_UDP_PAYLOAD = 1232;

export interface DnsQuery {
  id: number;
  /** Recursion desired, as the client asked. */
  rd: boolean;
  /** Lowercase, no trailing dot; '' for the root. */
  name: string;
  qtype: number;
  /** The question section exactly as the client sent it (name, type, class). */
  question: Buffer;
  /** The UDP payload size of its EDNS OPT record, if it had one. */
  edns?: number;
}

export type QueryReading = { ok: true; query: DnsQuery } | { ok: false; id?: number; question?: Buffer };

/**
 * A query as the filter accepts it, or why not. `id` (and `question`, when the question itself
 * could be read) come back with a refusal so that the client can match the answer at once; a
 * packet too short for a header, or that is itself an answer, gets nothing (`id` undefined).
 */
export function readQuery(b: Buffer): QueryReading {
  if (b.length < HEADER) return { ok: false };
  const id = b.readUInt16BE(0);
  const flags = b.readUInt16BE(2);
  if (flags & 0x8000) return { ok: false }; // an answer, not a query: never answered
  const opcode = (flags >> 11) & 0xf;
  const [qd, an, ns, ar] = [b.readUInt16BE(4), b.readUInt16BE(6), b.readUInt16BE(8), b.readUInt16BE(10)];
  if (opcode !== 0 || qd !== 1 || an !== 0 || ns !== 0 || ar > 1) return { ok: false, id };
  const labels: string[] = [];
  let off = HEADER;
  for (;;) {
    if (off >= b.length) return { ok: false, id };
    const len = b[off]!;
    if (len === 0) break;
    // A pointer (0xc0) or a reserved label type: a query's one name has nothing to point back to.
    if (len > 63 || off + 1 + len > b.length) return { ok: false, id };
    const label = b.toString('latin1', off + 1, off + 1 + len);
    if (!/^[A-Za-z0-9_-]+$/.test(label)) return { ok: false, id };
    labels.push(label.toLowerCase());
    off += 1 + len;
  }
  off += 1;
  if (off + 4 > b.length || off - HEADER > 255) return { ok: false, id };
  const qtype = b.readUInt16BE(off);
  const qclass = b.readUInt16BE(off + 2);
  off += 4;
  const question = b.subarray(HEADER, off);
  if (qclass !== CLASS_IN) return { ok: false, id, question };
  let edns: number | undefined;
  if (ar === 1) {
    // The root name, type OPT, the payload size (in the class field), TTL, and its options.
    if (off + 11 > b.length || b[off] !== 0 || b.readUInt16BE(off + 1) !== QTYPE.OPT) return { ok: false, id, question };
    edns = b.readUInt16BE(off + 3);
    const rdlen = b.readUInt16BE(off + 9);
    off += 11 + rdlen;
    if (off > b.length) return { ok: false, id, question };
  }
  if (off !== b.length) return { ok: false, id, question };
  return { ok: true, query: { id, rd: (flags & 0x0100) !== 0, name: labels.join('.'), qtype, question, edns } };
}

/**
 * An answer made here: the header with `rcode`, and the client's question when there is one (a
 * stub resolver matches an answer to its query by the ID and the question's bytes).
 */
export function answer(id: number, rcode: number, question?: Buffer, rd = true): Buffer {
  const h = Buffer.alloc(HEADER);
  h.writeUInt16BE(id, 0);
  // QR, the client's RD, RA (the filter relays recursion), the rcode.
  h.writeUInt16BE(0x8000 | (rd ? 0x0100 : 0) | 0x0080 | (rcode & 0xf), 2);
  h.writeUInt16BE(question ? 1 : 0, 4);
  return question ? Buffer.concat([h, question]) : h;
}

/**
 * The query the filter sends upstream for `q`: its own ID, the name in lowercase, the type, class
 * IN, recursion desired, and an OPT record only if the client had one (no options, no flags).
 * Nothing the client chose besides the name and the type reaches the resolver.
 */
export function upstreamQuery(q: DnsQuery, id: number): Buffer {
  const h = Buffer.alloc(HEADER);
  h.writeUInt16BE(id, 0);
  h.writeUInt16BE(0x0100, 2);
  h.writeUInt16BE(1, 4);
  h.writeUInt16BE(q.edns === undefined ? 0 : 1, 10);
  const question = Buffer.from(q.question);
  for (let off = 0; question[off]! !== 0; off += 1 + question[off]!) {
    for (let i = off + 1; i <= off + question[off]!; i++) if (question[i]! >= 0x41 && question[i]! <= 0x5a) question[i] = question[i]! | 0x20;
  }
  const parts = [h, question];
  if (q.edns !== undefined) {
    const opt = Buffer.alloc(11);
    opt.writeUInt16BE(QTYPE.OPT, 1);
    opt.writeUInt16BE(Math.max(512, Math.min(q.edns, MAX_UDP_PAYLOAD)), 3);
    parts.push(opt);
  }
  return Buffer.concat(parts);
}

/**
 * The upstream answer to `sent` made the client's: undefined unless it is an answer to exactly
 * that query (its ID, one question equal to it). The client gets its own ID and question bytes
 * back (the name's case as it sent it); the rest is relayed as the resolver wrote it.
 */
export function relayAnswer(got: Buffer, sent: Buffer, q: DnsQuery): Buffer | undefined {
  const qlen = q.question.length;
  if (got.length < HEADER + qlen || got.readUInt16BE(0) !== sent.readUInt16BE(0)) return undefined;
  if (!(got[2]! & 0x80) || got.readUInt16BE(4) !== 1) return undefined;
  // The name may come back in another case (a resolver may randomize it); type and class may not.
  const name = (b: Buffer) => b.toString('latin1', HEADER, HEADER + qlen - 4).toLowerCase();
  if (name(got) !== name(sent) || !got.subarray(HEADER + qlen - 4, HEADER + qlen).equals(sent.subarray(HEADER + qlen - 4, HEADER + qlen))) return undefined;
  const out = Buffer.from(got);
  out.writeUInt16BE(q.id, 0);
  q.question.copy(out, HEADER);
  return out;
}
