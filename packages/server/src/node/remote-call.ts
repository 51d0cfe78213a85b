import { isIP } from 'node:net';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { Agent as UndiciAgent, type Dispatcher } from 'undici';
import { describeCause, ServiceError } from '@sandboxd/protocol';
import type { ClusterSigner } from '../runtime/cluster-auth.js';
import type { TlsRequestOptions } from './remote-export.js';
import { STAGES_HEADER } from './warm-ask.js';
import { badNodeAnswer, errorFromNode } from './wire-errors.js';

/** What a RemoteNode's calls to its node are made with (RemoteNodeOptions has them all). */
export interface NodeCallOptions {
  /** The node's name in the cluster (its tokens name it). */
  id: string;
  /** The node's API, e.g. `http://10.0.0.7:7070`. */
  url: string;
  auth: ClusterSigner;
  /** How long the node has to take a connection (default 1 s): past it, it is away. */
  connectTimeoutMs?: number;
  /** A take's answer comes in stages: a node silent for this long (default 3 s) has stopped. */
  stageSilenceMs?: number;
  callTimeoutMs?: number;
  /** For an https:// node: the CA bundle (PEM) its certificate is checked against (absent: the system's). */
  ca?: string;
}

/** How long a node has to take a connection (default of connectTimeoutMs). */
const CONNECT_TIMEOUT_MS = 1000;
/** A node answering in stages that says nothing for this long has stopped (default of stageSilenceMs; it beats every second). */
const STAGE_SILENCE_MS = 3000;

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The most control reads of one answer of a node (a status list of 100k sandboxes is ~3 MiB). */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

/** The body, at most `max` bytes (read within the call's deadline, which the fetch signal carries); `heard` on each chunk. */
async function readCapped(res: Response, max: number, heard: () => void = () => undefined): Promise<string> {
  if (!res.body) return '';
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    heard();
    n += chunk.length;
    if (n > max) {
      await res.body.cancel().catch(() => undefined);
      throw new Error(`an answer over ${max} bytes`);
    }
    chunks.push(Buffer.from(chunk));
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * The HTTP(S) plumbing of a RemoteNode: its node's API called with a token naming the node, within
 * a deadline, its answer bounded and its errors as the node threw them.
 */
export class NodeCaller {
  readonly id: string;
  readonly base: URL;
  /** This node's connections (made when first needed, again after close()). */
  private dispatcher: Dispatcher | undefined;
  /** The health check under way (relayed connections waiting at once share it). */
  private probing: Promise<boolean> | undefined;

  constructor(private readonly o: NodeCallOptions) {
    this.id = o.id;
    this.base = new URL(o.url);
    if (this.base.protocol !== 'http:' && this.base.protocol !== 'https:') throw new Error(`node url must be http: or https: (${o.url})`);
  }

  /** A token for this node, for a call made here or a connection of its own. */
  token(): Promise<string> {
    return this.o.auth.tokenFor(this.id);
  }

  /**
   * `stages`: the node answers in stages (node/warm-ask.ts STAGES_HEADER), and one that has said
   * nothing for STAGE_SILENCE_MS (no headers, then no beat) has stopped: it is given up at once, as
   * a node that cannot be reached, instead of at the call's deadline.
   */
  async call<T>(method: string, path: string, body?: unknown, timeoutMs = this.o.callTimeoutMs ?? 30_000, stages = false): Promise<T> {
    const headers: Record<string, string> = { authorization: `Bearer ${await this.o.auth.tokenFor(this.id)}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (stages) headers[STAGES_HEADER] = '1';
    let res: Response | undefined;
    let text = '';
    const deadline = AbortSignal.timeout(timeoutMs);
    // Once more at once when the connection failed (not the deadline): a kept-alive connection
    // that died with a network cut fails the first call after it, and every verb is idempotent.
    for (let attempt = 1; ; attempt++) {
      const silent = new AbortController();
      let quiet: NodeJS.Timeout | undefined;
      const heard = () => {
        clearTimeout(quiet);
        if (stages) quiet = setTimeout(() => silent.abort(new Error(`the node said nothing for ${this.o.stageSilenceMs ?? STAGE_SILENCE_MS} ms`)), this.o.stageSilenceMs ?? STAGE_SILENCE_MS);
      };
      try {
        heard();
        res = await fetch(new URL(path, this.base), this.init({ method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.any([deadline, silent.signal]) }));
        heard();
        // Bounded in size and (through the signal) in time: a node must not fill or hold control.
        text = await readCapped(res, MAX_ANSWER_BYTES, heard);
        break;
      } catch (err) {
        if (attempt < 2 && !deadline.aborted && !silent.signal.aborted) continue;
        throw new ServiceError('NODE_UNAVAILABLE', `node ${this.id} cannot be reached; try again`, { node: this.id, retry_after: 5 }).withDetail(`${method} ${path}: ${describeCause(silent.signal.aborted ? silent.signal.reason : err)}`);
      } finally {
        clearTimeout(quiet);
      }
    }
    let status = res.status;
    if (res.ok && stages) {
      // {status, body}: the answer the node would have given at once.
      const staged = parseJson(text) as { status?: unknown; body?: unknown } | undefined;
      if (!staged || typeof staged.status !== 'number') throw badNodeAnswer(this.id, `${method} ${path}: not an answer in stages`);
      status = staged.status;
      text = JSON.stringify(staged.body ?? null);
    }
    if (status >= 200 && status < 300) {
      try {
        return (text ? JSON.parse(text) : undefined) as T;
      } catch {
        throw badNodeAnswer(this.id, `${method} ${path}: not JSON`);
      }
    }
    throw this.failure(status, text);
  }

  /**
   * For an https:// node: its certificate checked against the cluster's CA and against the node's
   * own name (not a CONNECT target's, which names an agent); SNI only for a DNS name.
   */
  tlsOptions(): TlsRequestOptions | undefined {
    if (this.base.protocol !== 'https:') return undefined;
    const nodeHost = this.base.hostname.replace(/^\[|\]$/g, '');
    return {
      ca: this.o.ca,
      ...(isIP(nodeHost) ? {} : { servername: nodeHost }),
      checkServerIdentity: (_host: string, cert: PeerCertificate) => checkServerIdentity(nodeHost, cert),
      minVersion: 'TLSv1.2',
      agent: false,
    };
  }

  /** A fetch's options, with the TLS dispatcher for an https:// node (fetch takes undici's `dispatcher`). */
  init(init: RequestInit): RequestInit {
    // Every call has a deadline of its own (its signal): fetch's own 300 s for an answer's headers
    // would cut a create whose deadline grew with the layers the node fetches first. Over TLS, every
    // call checks the node's certificate (against the cluster's CA when given) and its name: a
    // token goes only to the node it names.
    // A node that does not take the connection within a second is away: the caller (placement)
    // asks another instead of waiting for the call's own deadline.
    this.dispatcher ??= new UndiciAgent({
      headersTimeout: 0,
      bodyTimeout: 0,
      connect: { timeout: this.o.connectTimeoutMs ?? CONNECT_TIMEOUT_MS, ...(this.base.protocol === 'https:' ? { ca: this.o.ca, minVersion: 'TLSv1.2' as const } : {}) },
    });
    return { ...init, dispatcher: this.dispatcher } as RequestInit;
  }

  /** A node's error answer, as the error it threw there (node/wire-errors.ts). */
  private failure(status: number, text: string): Error {
    return errorFromNode(this.id, status, text);
  }

  /** Whether the node answers its health check within `ms` (one check at a time, shared). */
  answers(ms: number): Promise<boolean> {
    this.probing ??= this.call('GET', '/node/v1/health', undefined, ms)
      .then(
        () => true,
        () => false,
      )
      .finally(() => (this.probing = undefined));
    return this.probing;
  }

  async close(): Promise<void> {
    // The node keeps its own spares; here only the TLS connections, if any (made again if used).
    const d = this.dispatcher;
    this.dispatcher = undefined;
    await d?.close().catch(() => undefined);
  }
}
