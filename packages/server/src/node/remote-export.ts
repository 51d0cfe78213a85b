import { request, type IncomingMessage } from 'node:http';
import { request as tlsRequest } from 'node:https';
import type { PeerCertificate } from 'node:tls';
import { describeCause, ServiceError } from '@sandboxd/protocol';
import { EXPORT_STATS_HEADER, LAYER_BYTES_HEADER, LAYER_DIGEST_HEADER, parseExportStats } from '../runtime/layer-export-wire.js';
import { ExportTooLarge, type ExportStats, type LayerUnpacker } from '../runtime/types.js';
import { SNAPSHOT_COPY_TIMEOUT_MS, SNAPSHOT_MAX_ENTRIES } from '../runtime/verbs/export-layer.js';
import { badNodeAnswer, errorFromNode } from './wire-errors.js';

/** A snapshot's layer on its way from a node: a pause in it this long ends it (default). */
const EXPORT_IDLE_MS = 60_000;
/** A snapshot's layer tar from a node: at most this long (default). */
const EXPORT_MAX_BYTES = 32 * 1024 ** 3;
/** A snapshot's layer tar comes at least this fast on average (default, after a grace of the idle time). */
const EXPORT_MIN_BYTES_PER_SECOND = 5e6;

/** What an https:// request to a node sets: its certificate checked against the cluster's CA and the node's own name. */
export interface TlsRequestOptions {
  ca?: string;
  servername?: string;
  checkServerIdentity: (host: string, cert: PeerCertificate) => Error | undefined;
  minVersion: 'TLSv1.2';
  agent: false;
}

/** A POST whose answer is read as a stream: resolves with the answer once its headers are in. */
function postForStream(url: URL, headers: Record<string, string>, body: string, signal: AbortSignal, tls?: TlsRequestOptions): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const options = { method: 'POST', headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) }, signal };
    const req = tls ? tlsRequest(url, { ...options, ...tls }, resolve) : request(url, options, resolve);
    // Kept: an abort after the answer came errors the request too (a rejection then is a no-op).
    req.on('error', reject);
    req.end(body);
  });
}

/** At most `max` bytes of an answer, as text (within the caller's deadline, through its signal). */
async function readStreamCapped(res: IncomingMessage, max: number): Promise<string> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    n += chunk.length;
    if (n > max) {
      res.destroy();
      throw new Error(`an answer over ${max} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export interface ExportRequest {
  nodeId: string;
  sandboxId: string;
  /** The node's `POST /node/v1/sandboxes/<id>/layer`. */
  url: URL;
  token: string;
  tls?: TlsRequestOptions;
  /** An empty directory of this machine. */
  dest: string;
  /** The room the snapshot has: a larger layer is refused (ExportTooLarge) before a byte of it is unpacked. */
  maxBytes?: number;
  unpack: LayerUnpacker;
  /** The longest a node may take to answer: its copy and digest (default 11 min). */
  answerMs?: number;
  /** A pause this long in the tar ends it (default 60 s). */
  idleMs?: number;
  /** Then the tar must come at least this fast, on average (default 5 MB/s after the idle time). */
  minBytesPerSecond?: number;
  /** Most bytes of a layer tar taken from a node, whatever room the snapshot has (default 32 GiB). */
  capBytes?: number;
}

/**
 * A snapshot's layer from a node, unpacked into `dest` through the tar guard, its length and digest
 * checked against what the node declared: a node's tar is hostile input (images/layer-tar.ts).
 * The copy (and its digest) takes its time before the answer; then the tar has a time by its
 * length, and a node that stalls is cut off: aborting ends the request and the body's stream. (One
 * deadline for both cut off a large snapshot whose copy took its time.)
 */
export async function receiveExport(r: ExportRequest): Promise<ExportStats> {
  const cut = new AbortController();
  const answerMs = r.answerMs ?? SNAPSHOT_COPY_TIMEOUT_MS + 60_000;
  let deadline = setTimeout(() => cut.abort(new Error(`no answer in ${answerMs / 1000} s`)), answerMs);
  try {
    return await receive(r, cut, (bytes) => {
      clearTimeout(deadline);
      const sendMs = (r.idleMs ?? EXPORT_IDLE_MS) + Math.ceil((bytes / (r.minBytesPerSecond ?? EXPORT_MIN_BYTES_PER_SECOND)) * 1000);
      deadline = setTimeout(() => cut.abort(new Error(`${bytes} bytes not sent in ${sendMs / 1000} s`)), sendMs);
    });
  } finally {
    clearTimeout(deadline);
  }
}

async function receive(r: ExportRequest, cut: AbortController, sending: (bytes: number) => void): Promise<ExportStats> {
  const { nodeId, sandboxId: id } = r;
  const path = r.url.pathname;
  const signal = cut.signal;
  let res: IncomingMessage;
  try {
    // node:http, not fetch: fetch gives up on an answer's headers after 300 s of its own, and the
    // node's copy may take twice that (answerMs is the deadline here).
    res = await postForStream(r.url, { authorization: `Bearer ${r.token}`, 'content-type': 'application/json' }, JSON.stringify(r.maxBytes === undefined ? {} : { max_bytes: r.maxBytes }), signal, r.tls);
  } catch (err) {
    throw new ServiceError('NODE_UNAVAILABLE', `node ${nodeId} cannot be reached; try again`, { node: nodeId, retry_after: 5 }).withDetail(`POST ${path}: ${describeCause(err)}`);
  }
  const status = res.statusCode ?? 0;
  if (status < 200 || status > 299) {
    const err = errorFromNode(nodeId, status, await readStreamCapped(res, 64 * 1024).catch(() => ''));
    // Only a refusal of the limit asked for is one (ExportTooLarge is a quota's answer upstream).
    const used = err instanceof ServiceError ? err.extra?.export_used_bytes : undefined;
    if (r.maxBytes !== undefined && typeof used === 'number' && Number.isSafeInteger(used) && used > r.maxBytes) throw new ExportTooLarge(used);
    throw err;
  }
  const header = (name: string) => {
    const v = res.headers[name];
    return typeof v === 'string' ? v : null;
  };
  const stats = parseExportStats(header(EXPORT_STATS_HEADER));
  const digest = header(LAYER_DIGEST_HEADER) ?? '';
  const bytes = Number(header(LAYER_BYTES_HEADER));
  // A tar holds the files' bytes, headers per name (a hard link is one, with no inode) and padding.
  const headed = stats ? (stats.names ?? stats.entries) + 16 : 0;
  const most = stats ? stats.bytes + headed * 4096 : 0;
  if (!stats || !/^sha256:[0-9a-f]{64}$/.test(digest) || !Number.isSafeInteger(bytes) || bytes <= 0 || bytes > most || (r.maxBytes !== undefined && stats.allocated > r.maxBytes * 2 + 1024 ** 2)) {
    res.destroy();
    throw badNodeAnswer(nodeId, `POST ${path}: not a layer's answer (${digest.slice(0, 80)}, ${bytes} bytes, ${JSON.stringify(stats)})`);
  }
  // The stats are the node's word: what bounds the tar is the room the snapshot has (a tar holds
  // every byte of a sparse file, which the node's count of its disk does not) and this replica's
  // own limit, checked before a byte of it is unpacked here.
  const room = r.maxBytes === undefined ? undefined : r.maxBytes + headed * 4096;
  if (room !== undefined && bytes > room) {
    res.destroy();
    throw new ExportTooLarge(bytes);
  }
  const cap = r.capBytes ?? EXPORT_MAX_BYTES;
  if (bytes > cap) {
    res.destroy();
    throw new ServiceError('LIMIT_EXCEEDED', `sandbox ${id}'s files make a layer of ${bytes} bytes, over the ${cap} a snapshot may have`, { id, limit: 'snapshot_layer_bytes', max: cap });
  }
  sending(bytes);
  let idle: NodeJS.Timeout | undefined;
  const idleMs = r.idleMs ?? EXPORT_IDLE_MS;
  const alive = () => {
    clearTimeout(idle);
    idle = setTimeout(() => cut.abort(new Error(`sent nothing for ${idleMs / 1000} s`)), idleMs);
  };
  const body = res as AsyncIterable<Buffer>;
  async function* watched(): AsyncIterable<Uint8Array> {
    alive();
    for await (const chunk of body) {
      alive();
      yield chunk;
    }
  }
  let got: { entries: number; fileBytes: number };
  try {
    got = await r.unpack(watched(), r.dest, { digest, bytes }, { signal, maxEntries: SNAPSHOT_MAX_ENTRIES, maxFileBytes: r.maxBytes, canonicalOnly: true });
  } catch (err) {
    res.destroy();
    // Refused as it came (a bad tar, length or digest): the node's fault; cut off: its outage.
    if (!signal.aborted) throw badNodeAnswer(nodeId, `POST ${path}: ${describeCause(err)}`);
    throw new ServiceError('NODE_UNAVAILABLE', `node ${nodeId} broke off sending sandbox ${id}'s files; try again`, { node: nodeId, retry_after: 5 }).withDetail(describeCause(signal.aborted ? signal.reason : err));
  } finally {
    clearTimeout(idle);
  }
  // Counted as it is here: tar writes every byte of a file (no holes), so this replica's disk
  // holds at least the files' bytes, whatever the node said it allocated (the quota counts this).
  if (r.maxBytes !== undefined && got.fileBytes > r.maxBytes) throw new ExportTooLarge(got.fileBytes);
  return { bytes: got.fileBytes, allocated: Math.max(stats.allocated, got.fileBytes), entries: got.entries, frozenMs: stats.frozenMs };
}
