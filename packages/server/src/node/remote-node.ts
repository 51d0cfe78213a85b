import { request } from 'node:http';
import { request as tlsRequest } from 'node:https';
import { isIP, type Socket } from 'node:net';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { Agent as UndiciAgent, type Dispatcher } from 'undici';
import { describeCause, ServiceError } from '@sandboxd/protocol';
import type { ClusterSigner } from '../runtime/cluster-auth.js';
import type { EgressPolicy } from '../runtime/egress-policy.js';
import type { ListeningPort } from '../runtime/listening.js';
import { checkId, checkSpec, ID_RE } from '../runtime/sandbox-paths.js';
import type { ExportStats, LayerSource, LayerUnpacker, RuntimeStatus, SandboxStats } from '../runtime/types.js';
import type { Node, NodeSpec, Taken, TakeAsk } from './types.js';
import { receiveExport, type TlsRequestOptions } from './remote-export.js';
import { STAGES_HEADER } from './warm-ask.js';
import { abandonedCreate } from './warm-key.js';
import { badNodeAnswer, errorFromNode } from './wire-errors.js';

export interface RemoteNodeOptions {
  /** The node's name in the cluster (its tokens name it). */
  id: string;
  /** The node's API, e.g. `http://10.0.0.7:7070`. */
  url: string;
  auth: ClusterSigner;
  log?: (msg: string) => void;
  /** How long the node has to take a connection (default 1 s): past it, it is away. */
  connectTimeoutMs?: number;
  /** A take's answer comes in stages: a node silent for this long (default 3 s) has stopped. */
  stageSilenceMs?: number;
  /** Per call; a create or start boots a container (default 120 s, others 30 s). */
  bootTimeoutMs?: number;
  /**
   * A relayed connection not answered within this (default 0.8 s) makes control ask the node's health
   * (given as long again): a node that answers neither has stopped, and the connection fails then
   * (NODE_UNAVAILABLE), not at its own deadline.
   */
  relayProbeMs?: number;
  callTimeoutMs?: number;
  /** How a snapshot's layer from the node is unpacked here (absent: snapshots are refused). */
  unpack?: LayerUnpacker;
  /** A pause this long in a snapshot's layer on its way ends it (default 60 s). */
  exportIdleMs?: number;
  /** For an https:// node: the CA bundle (PEM) its certificate is checked against (absent: the system's). */
  ca?: string;
  /**
   * Most bytes of a snapshot's layer tar taken from a node, whatever room the snapshot has (default
   * 32 GiB: what a node fetches at most, SANDBOXD_LAYER_FETCH_MAX_GB, so that it could fetch it back).
   */
  exportMaxBytes?: number;
  /** The longest a node may take to answer a snapshot's export: its copy and digest (default 11 min). */
  exportAnswerMs?: number;
  /** Then the tar must come at least this fast, on average (bytes/s; default 5 MB/s, after a grace of exportIdleMs). */
  exportMinBytesPerSecond?: number;
  /**
   * Control's layers: with it, a create or start names the sandbox's layers by id, digest and where
   * to fetch them (the node maps them to its own layers directory); without it (tests of one
   * machine), by this machine's paths.
   */
  layers?: LayerSource;
}


/** How long a node has to take a connection (default of connectTimeoutMs). */
const CONNECT_TIMEOUT_MS = 1000;
/** A node answering in stages that says nothing for this long has stopped (default of stageSilenceMs; it beats every second). */
const STAGE_SILENCE_MS = 3000;
/** Default of relayProbeMs: a stopped node is told within 1.6 s; a live one answers its health in milliseconds. */
const RELAY_PROBE_MS = 800;
/** The longest a silent relayed connection of a node that answers goes between two checks of it. */
const RELAY_PROBE_MAX_MS = 30_000;

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** A create may fetch its layers first: its deadline grows by their size at this rate (bytes/s). */
const LAYER_FETCH_BYTES_PER_SECOND = 20e6;

/** The most control reads of one answer of a node (a status list of 100k sandboxes is ~3 MiB). */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;
const STATUSES: ReadonlySet<unknown> = new Set(['running', 'paused', 'stopped', 'missing']);


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
 * A node's refusal of a take's ask (a 4xx) is no mistake of the create's client: the ask is
 * control's, and a node of an earlier release than control refuses what it does not know. It is
 * the node's outage to the client (503), and says so to the operator.
 */
function refusedAsk(nodeId: string, err: unknown): unknown {
  if (!(err instanceof ServiceError) || err.status >= 500) return err;
  return new ServiceError('RUNTIME_ERROR', `node ${nodeId} could not take the sandbox; try again`, { node: nodeId, retry_after: 5 }).withDetail(
    `node ${nodeId} refused the ask (${err.code}: ${err.message}); a node of an earlier release than control refuses asks it does not know: upgrade the nodes before control`,
  );
}

/**
 * A node of the cluster, driven through its node API (node/node-api.ts): the same contract as the
 * LocalNode it serves there. Every verb is keyed by sandbox id and idempotent, so a call that timed
 * out may be made again. A node that cannot be reached is an outage of that node
 * (NODE_UNAVAILABLE, 503); the node's own errors come back as they were thrown there.
 */
export class RemoteNode implements Node {
  readonly id: string;
  private readonly base: URL;
  private readonly log: (msg: string) => void;
  /** This node's connections (made when first needed, again after close()). */
  private dispatcher: Dispatcher | undefined;
  /** The health check under way (relayed connections waiting at once share it). */
  private probing: Promise<boolean> | undefined;

  constructor(private readonly o: RemoteNodeOptions) {
    this.id = o.id;
    this.base = new URL(o.url);
    if (this.base.protocol !== 'http:' && this.base.protocol !== 'https:') throw new Error(`node url must be http: or https: (${o.url})`);

    this.log = o.log ?? (() => undefined);
  }

  /**
   * `stages`: the node answers in stages (node/warm-ask.ts STAGES_HEADER), and one that has said
   * nothing for STAGE_SILENCE_MS (no headers, then no beat) has stopped: it is given up at once, as
   * a node that cannot be reached, instead of at the call's deadline.
   */
  private async call<T>(method: string, path: string, body?: unknown, timeoutMs = this.o.callTimeoutMs ?? 30_000, stages = false): Promise<T> {
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
  private tlsOptions(): TlsRequestOptions | undefined {
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
  private init(init: RequestInit): RequestInit {
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

  private sandbox(id: string, verb = ''): string {
    checkId(id);
    return `/node/v1/sandboxes/${id}${verb}`;
  }

  /** Whether the node answers, with our token, as the node this client names. */
  async ping(): Promise<void> {
    const h = await this.call<{ node_id?: unknown } | null>('GET', '/node/v1/health');
    if (h?.node_id !== this.id) throw new Error(`the node at ${this.o.url} is ${String(h?.node_id)}, not ${this.id}`);
  }

  /**
   * A running sandbox of the ask's spec from the node's warm pool, or booted there now: the node
   * picks its id (and so its hostname and SANDBOX_ID), so the spec goes without them; the node sets
   * the ask's env and policy before it answers.
   */
  async take(ask: TakeAsk): Promise<Taken> {
    const { id: _id, hostname: _hostname, env, ...rest } = ask.spec;
    const { SANDBOX_ID: _sandboxId, ...own } = env;
    const { body, bytes } = await this.wire({ ...rest, id: '', hostname: '', env: own });
    const { id: _i, hostname: _h, ...wired } = body as Record<string, unknown>;
    // Not cut when the asker goes away: once asked, the node's answer is read, and a sandbox no
    // one waits for any more is destroyed (cut, the answer might be lost with the sandbox running).
    if (ask.signal?.aborted) throw abandonedCreate();
    let r: { id?: unknown; warm?: unknown } | null;
    try {
      r = await this.call('POST', '/node/v1/warm', { spec: wired, pool_id: ask.poolId, label: ask.label, agent_env: ask.env, ...(ask.egress ? { egress: ask.egress } : {}) }, this.bootTimeout(bytes), true);
    } catch (err) {
      throw refusedAsk(this.id, err);
    }
    if (typeof r?.id !== 'string' || !ID_RE.test(r.id) || typeof r.warm !== 'boolean') throw badNodeAnswer(this.id, 'a ready sandbox');
    if (ask.signal?.aborted) {
      await this.destroy(r.id).catch((err: unknown) => this.log(`destroying sandbox ${String(r.id)} of an abandoned take failed: ${String(err)}`));
      throw abandonedCreate();
    }
    return { id: r.id, warm: r.warm };
  }

  async start(spec: NodeSpec): Promise<void> {
    checkSpec(spec);
    const { body, bytes } = await this.wire(spec);
    await this.call('POST', this.sandbox(spec.id, '/start'), body, this.bootTimeout(bytes));
  }

  async receive(spec: NodeSpec): Promise<void> {
    checkSpec(spec);
    const { body, bytes } = await this.wire(spec);
    await this.call('POST', this.sandbox(spec.id, '/receive'), body, this.bootTimeout(bytes));
  }

  /** The node's warm pool forgets `poolId` (a template deleted or rebuilt). */
  async dropWarm(poolId: string): Promise<void> {
    await this.call('DELETE', `/node/v1/warm/${encodeURIComponent(poolId)}`, undefined, 10_000);
  }

  /** The spec as the node takes it: layers by reference (see RemoteNodeOptions.layers). */
  private async wire(spec: NodeSpec): Promise<{ body: unknown; bytes: number }> {
    if (!this.o.layers) {
      const { layerRefs: _refs, ...paths } = spec;
      return { body: paths, bytes: 0 };
    }
    const ids = spec.layerIds;
    if (!ids || ids.length !== spec.lowerDirs.length) throw new ServiceError('INVALID_STATE', "this sandbox's layers are not known by id, so no node can be sent them");
    const layers = await this.o.layers.refs(ids, this.id);
    const { lowerDirs: _paths, layerIds: _ids, layerRefs: _refs, ...rest } = spec;
    return { body: { ...rest, layers }, bytes: layers.reduce((n, l) => n + l.bytes, 0) };
  }

  private bootTimeout(layerBytes: number): number {
    return (this.o.bootTimeoutMs ?? 120_000) + Math.ceil((layerBytes / LAYER_FETCH_BYTES_PER_SECOND) * 1000);
  }

  async pause(id: string): Promise<void> {
    await this.call('POST', this.sandbox(id, '/pause'));
  }

  async resume(id: string): Promise<void> {
    await this.call('POST', this.sandbox(id, '/resume'));
  }

  async stop(id: string): Promise<void> {
    await this.call('POST', this.sandbox(id, '/stop'));
  }

  async destroy(id: string): Promise<void> {
    await this.call('DELETE', this.sandbox(id));
  }

  async status(id: string): Promise<RuntimeStatus> {
    const st = (await this.call<{ status?: unknown } | null>('GET', this.sandbox(id, '/status')))?.status;
    if (!STATUSES.has(st)) throw badNodeAnswer(this.id, `status of ${id}`);
    return st as RuntimeStatus;
  }

  async statuses(ids: string[]): Promise<Map<string, RuntimeStatus>> {
    for (const id of ids) checkId(id);
    const r = (await this.call<{ statuses?: unknown } | null>('POST', '/node/v1/statuses', { ids }))?.statuses;
    if (!r || typeof r !== 'object') throw badNodeAnswer(this.id, 'statuses');
    const byId = r as Record<string, unknown>;
    return new Map(
      ids.map((id) => {
        const st = Object.hasOwn(byId, id) ? byId[id] : 'missing';
        if (!STATUSES.has(st)) throw badNodeAnswer(this.id, `status of ${id}`);
        return [id, st as RuntimeStatus];
      }),
    );
  }

  /** Tells the node that `owner` holds these of its sandboxes unrecorded, for `ttlSeconds` (services/orphans.ts). */
  async claim(owner: string, ids: string[], ttlSeconds: number): Promise<void> {
    await this.call('PUT', `/node/v1/claims/${encodeURIComponent(owner)}`, { ids, ttl_seconds: ttlSeconds }, 10_000);
  }

  /** The ids of the layers the node holds. */
  async layerIds(): Promise<string[]> {
    const ids = (await this.call<{ ids?: unknown } | null>('GET', '/node/v1/layers', undefined, 10_000))?.ids;
    if (!Array.isArray(ids) || ids.length > 100_000 || !ids.every((id) => typeof id === 'string' && /^[0-9a-f]{64}$/.test(id))) throw badNodeAnswer(this.id, 'list of layers');
    return ids as string[];
  }

  async list(): Promise<string[]> {
    const ids = (await this.call<{ ids?: unknown } | null>('GET', '/node/v1/sandboxes'))?.ids;
    if (!Array.isArray(ids) || !ids.every((id) => typeof id === 'string' && ID_RE.test(id))) throw badNodeAnswer(this.id, 'list of sandboxes');
    return ids as string[];
  }

  async stats(id: string): Promise<SandboxStats> {
    const s = await this.call<Record<string, unknown> | null>('GET', this.sandbox(id, '/stats'));
    if (!s || typeof s !== 'object' || !Object.values(s).every((v) => typeof v === 'number' && Number.isFinite(v))) throw badNodeAnswer(this.id, `stats of ${id}`);
    return s as unknown as SandboxStats;
  }

  async listeningPorts(id: string): Promise<ListeningPort[]> {
    const ports = (await this.call<{ ports?: unknown } | null>('GET', this.sandbox(id, '/ports')))?.ports;
    if (!Array.isArray(ports)) throw badNodeAnswer(this.id, `ports of ${id}`);
    return ports as ListeningPort[];
  }

  async setEgress(id: string, policy: EgressPolicy): Promise<void> {
    await this.call('PUT', this.sandbox(id, '/egress'), policy);
  }

  async resetDisk(id: string, diskGb: number): Promise<void> {
    await this.call('POST', this.sandbox(id, '/reset-disk'), { disk_gb: diskGb });
  }

  /**
   * The node copies the sandbox's files and sends them as a layer's tar (node-api.ts), unpacked here
   * into `dest` through the tar guard (node/remote-export.ts).
   */
  async exportLayer(id: string, dest: string, opts: { maxBytes?: number } = {}): Promise<ExportStats> {
    const path = this.sandbox(id, '/layer');
    const unpack = this.o.unpack;
    if (!unpack) throw new ServiceError('INVALID_STATE', 'snapshots of sandboxes on nodes are not taken here (no layer unpacker)');
    return receiveExport({
      nodeId: this.id,
      sandboxId: id,
      url: new URL(path, this.base),
      token: await this.o.auth.tokenFor(this.id),
      tls: this.tlsOptions(),
      dest,
      maxBytes: opts.maxBytes,
      unpack,
      answerMs: this.o.exportAnswerMs,
      idleMs: this.o.exportIdleMs,
      minBytesPerSecond: this.o.exportMinBytesPerSecond,
      capBytes: this.o.exportMaxBytes,
    });
  }

  /**
   * A connection to the sandbox's agent, relayed by its node (`CONNECT <id>.agent:1`): after it
   * resolves, the stream speaks the agent's protocol as its unix socket does.
   */
  async dialAgent(id: string, timeoutMs = 10_000): Promise<Socket> {
    checkId(id);
    const token = await this.o.auth.tokenFor(this.id);
    return new Promise((resolve, reject) => {
      // `timeout` below is the socket's idle time: a node that trickles its answer resets it, so
      // the whole handshake has a deadline of its own too.
      const deadline = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      const tls = this.tlsOptions();
      const req = (tls ? tlsRequest : request)({
        host: this.base.hostname,
        port: this.base.port || (tls ? 443 : 80),
        ...tls,
        method: 'CONNECT',
        path: `${id}.agent:1`,
        headers: { 'proxy-authorization': `Bearer ${token}`, host: `${id}.agent:1` },
        timeout: timeoutMs,
      });
      req.once('connect', (res, socket, head) => {
        clearTimeout(deadline);
        if (res.statusCode !== 200) {
          socket.destroy();
          const code = res.statusCode === 502 ? 'AGENT_UNAVAILABLE' : 'RUNTIME_ERROR';
          reject(new ServiceError(code, `node ${this.id} could not reach the agent of sandbox ${id}`).withDetail(`CONNECT answered ${res.statusCode}`));
          return;
        }
        if (head.length > 0) socket.unshift(head);
        socket.setTimeout(0);
        socket.on('error', () => undefined);
        this.watchRelay(socket as Socket, probeMs);
        // The connection CONNECT hands over is the TCP (or TLS) socket to the node.
        resolve(socket as Socket);
      });
      req.once('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      // A node may take seconds to answer (it waits up to 5 s for an agent that is slow to accept),
      // but one that stopped (a hung process, a frozen machine: the kernel still takes the TCP
      // connection) would hold the client until `timeoutMs`. A slow answer makes control ask the
      // node's health: when that is not answered either, the node has stopped.
      const probeMs = this.o.relayProbeMs ?? RELAY_PROBE_MS;
      const probe = setTimeout(() => {
        void this.answers(probeMs).then((alive) => {
          if (!alive && !req.destroyed) req.destroy(new Error(`the node answered neither the connection nor its health check within ${2 * probeMs} ms`));
        });
      }, probeMs);
      req.once('close', () => {
        clearTimeout(deadline);
        clearTimeout(probe);
      });
      req.once('error', (err) => reject(new ServiceError('NODE_UNAVAILABLE', `node ${this.id} cannot be reached; try again`, { node: this.id, retry_after: 5 }).withDetail(describeCause(err))));
      req.end();
    });
  }

  /**
   * A relayed connection is kept (the gateways keep them alive for the next request): a node that
   * stops later leaves it open and silent. Bytes sent on it that get no answer within `probeMs` make
   * control ask the node's health, again for as long as it stays silent (a command may run long
   * with nothing to say); a node that answers neither has stopped, and the connection ends with
   * NODE_UNAVAILABLE, which the gateway answers as it is. A socket's own counter tells whether
   * anything came back: a listener of its own would start its data flowing before its reader.
   */
  private watchRelay(socket: Socket, probeMs: number): void {
    // One timer at most. While the connection stays silent and the node keeps answering, its health
    // is asked less and less often (up to every RELAY_PROBE_MAX_MS): a command that runs for
    // minutes with nothing to say costs a few checks, not one every probeMs, each a chance that a
    // live node misses one.
    let timer: NodeJS.Timeout | undefined;
    let probing = false;
    let readWhenSent = 0;
    let wait = probeMs;
    const answered = () => socket.destroyed || socket.bytesRead > readWhenSent;
    const arm = (ms: number) => {
      clearTimeout(timer);
      timer = setTimeout(check, ms);
      timer.unref();
    };
    const check = () => {
      timer = undefined;
      if (answered()) return;
      probing = true;
      void this.answers(probeMs).then((alive) => {
        probing = false;
        if (answered()) return;
        if (!alive) {
          socket.destroy(new ServiceError('NODE_UNAVAILABLE', `node ${this.id} stopped answering; try again`, { node: this.id, retry_after: 5 }).withDetail(`a relayed connection and the node's health check went unanswered for ${probeMs + wait} ms`));
          return;
        }
        wait = Math.min(wait * 2, RELAY_PROBE_MAX_MS);
        arm(wait);
      });
    };
    const write = socket.write;
    socket.write = function (this: Socket, ...args: Parameters<Socket['write']>): boolean {
      // Watched from the first write the node has not answered yet (one it answered starts anew).
      if (!socket.destroyed && !probing && (!timer || socket.bytesRead > readWhenSent)) {
        readWhenSent = socket.bytesRead;
        wait = probeMs;
        arm(probeMs);
      }
      return write.apply(this, args);
    } as Socket['write'];
    socket.once('close', () => clearTimeout(timer));
  }

  /** Whether the node answers its health check within `ms` (one check at a time, shared). */
  private answers(ms: number): Promise<boolean> {
    this.probing ??= this.call('GET', '/node/v1/health', undefined, ms)
      .then(
        () => true,
        () => false,
      )
      .finally(() => (this.probing = undefined));
    return this.probing;
  }

  /** OOM kills the node reports, over one event stream kept open (reopened after a failure). */
  watchOom(onKill: (id: string, kills: number) => void): () => void {
    const ac = new AbortController();
    const loop = async () => {
      for (let delay = 500; !ac.signal.aborted; delay = Math.min(delay * 2, 10_000)) {
        try {
          const res = await fetch(
            new URL('/node/v1/oom-events', this.base),
            this.init({
              headers: { authorization: `Bearer ${await this.o.auth.tokenFor(this.id)}` },
              signal: ac.signal,
            }),
          );
          if (!res.ok || !res.body) throw new Error(`answered ${res.status}`);
          delay = 500;
          let buf = '';
          for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
            buf += Buffer.from(chunk).toString('utf8');
            let i: number;
            while ((i = buf.indexOf('\n\n')) >= 0) {
              const event = buf.slice(0, i);
              buf = buf.slice(i + 2);
              const data = /^data: (.*)$/m.exec(event)?.[1];
              if (!data) continue;
              try {
                const e = JSON.parse(data) as { id?: unknown; kills?: unknown };
                if (typeof e.id === 'string' && typeof e.kills === 'number') onKill(e.id, e.kills);
              } catch {
                /* not an event of ours */
              }
            }
            if (buf.length > 64 * 1024) buf = '';
          }
        } catch (err) {
          if (ac.signal.aborted) return;
          this.log(`node ${this.id}: oom events: ${describeCause(err)}; again in ${delay} ms`);
        }
        await new Promise((r) => setTimeout(r, delay));
      }
    };
    void loop();
    return () => ac.abort();
  }

  async close(): Promise<void> {
    // The node keeps its own spares; here only the TLS connections, if any (made again if used).
    const d = this.dispatcher;
    this.dispatcher = undefined;
    await d?.close().catch(() => undefined);
  }
}
