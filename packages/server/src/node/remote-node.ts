import type { Socket } from 'node:net';
import { ServiceError } from '@sandboxd/protocol';
import type { EgressPolicy } from '../runtime/egress-policy.js';
import type { ListeningPort } from '../runtime/listening.js';
import { checkId, checkSpec, ID_RE } from '../runtime/sandbox-paths.js';
import type { ExportStats, LayerSource, LayerUnpacker, RuntimeStatus, SandboxStats } from '../runtime/types.js';
import type { Node, NodeSpec, Taken, TakeAsk } from './types.js';
import { NodeCaller, type NodeCallOptions } from './remote-call.js';
import { receiveExport } from './remote-export.js';
import { watchOomEvents } from './remote-oom.js';
import { dialRelayed } from './remote-relay.js';
import { abandonedCreate } from './warm-key.js';
import { badNodeAnswer } from './wire-errors.js';

export interface RemoteNodeOptions extends NodeCallOptions {
  log?: (msg: string) => void;
  /** Per call; a create or start boots a container (default 120 s, others 30 s). */
  bootTimeoutMs?: number;
  /**
   * A relayed connection not answered within this (default 0.8 s) makes control ask the node's health
   * (given as long again): a node that answers neither has stopped, and the connection fails then
   * (NODE_UNAVAILABLE), not at its own deadline.
   */
  relayProbeMs?: number;
  /** How a snapshot's layer from the node is unpacked here (absent: snapshots are refused). */
  unpack?: LayerUnpacker;
  /** A pause this long in a snapshot's layer on its way ends it (default 60 s). */
  exportIdleMs?: number;
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

/** A create may fetch its layers first: its deadline grows by their size at this rate (bytes/s). */
const LAYER_FETCH_BYTES_PER_SECOND = 20e6;

const STATUSES: ReadonlySet<unknown> = new Set(['running', 'paused', 'stopped', 'missing']);

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
  private readonly log: (msg: string) => void;
  /** The node's API, called over HTTP(S) (node/remote-call.ts). */
  private readonly node: NodeCaller;

  constructor(private readonly o: RemoteNodeOptions) {
    this.id = o.id;
    this.node = new NodeCaller(o);

    this.log = o.log ?? (() => undefined);
  }

  private sandbox(id: string, verb = ''): string {
    checkId(id);
    return `/node/v1/sandboxes/${id}${verb}`;
  }

  /** Whether the node answers, with our token, as the node this client names. */
  async ping(): Promise<void> {
    const h = await this.node.call<{ node_id?: unknown } | null>('GET', '/node/v1/health');
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
      r = await this.node.call('POST', '/node/v1/warm', { spec: wired, pool_id: ask.poolId, label: ask.label, agent_env: ask.env, ...(ask.egress ? { egress: ask.egress } : {}) }, this.bootTimeout(bytes), true);
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
    await this.node.call('POST', this.sandbox(spec.id, '/start'), body, this.bootTimeout(bytes));
  }

  async receive(spec: NodeSpec): Promise<void> {
    checkSpec(spec);
    const { body, bytes } = await this.wire(spec);
    await this.node.call('POST', this.sandbox(spec.id, '/receive'), body, this.bootTimeout(bytes));
  }

  /** The node's warm pool forgets `poolId` (a template deleted or rebuilt). */
  async dropWarm(poolId: string): Promise<void> {
    await this.node.call('DELETE', `/node/v1/warm/${encodeURIComponent(poolId)}`, undefined, 10_000);
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
    await this.node.call('POST', this.sandbox(id, '/pause'));
  }

  async resume(id: string): Promise<void> {
    await this.node.call('POST', this.sandbox(id, '/resume'));
  }

  async stop(id: string): Promise<void> {
    await this.node.call('POST', this.sandbox(id, '/stop'));
  }

  async destroy(id: string): Promise<void> {
    await this.node.call('DELETE', this.sandbox(id));
  }

  async status(id: string): Promise<RuntimeStatus> {
    const st = (await this.node.call<{ status?: unknown } | null>('GET', this.sandbox(id, '/status')))?.status;
    if (!STATUSES.has(st)) throw badNodeAnswer(this.id, `status of ${id}`);
    return st as RuntimeStatus;
  }

  async statuses(ids: string[]): Promise<Map<string, RuntimeStatus>> {
    for (const id of ids) checkId(id);
    const r = (await this.node.call<{ statuses?: unknown } | null>('POST', '/node/v1/statuses', { ids }))?.statuses;
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
    await this.node.call('PUT', `/node/v1/claims/${encodeURIComponent(owner)}`, { ids, ttl_seconds: ttlSeconds }, 10_000);
  }

  /** The ids of the layers the node holds. */
  async layerIds(): Promise<string[]> {
    const ids = (await this.node.call<{ ids?: unknown } | null>('GET', '/node/v1/layers', undefined, 10_000))?.ids;
    if (!Array.isArray(ids) || ids.length > 100_000 || !ids.every((id) => typeof id === 'string' && /^[0-9a-f]{64}$/.test(id))) throw badNodeAnswer(this.id, 'list of layers');
    return ids as string[];
  }

  async list(): Promise<string[]> {
    const ids = (await this.node.call<{ ids?: unknown } | null>('GET', '/node/v1/sandboxes'))?.ids;
    if (!Array.isArray(ids) || !ids.every((id) => typeof id === 'string' && ID_RE.test(id))) throw badNodeAnswer(this.id, 'list of sandboxes');
    return ids as string[];
  }

  async stats(id: string): Promise<SandboxStats> {
    const s = await this.node.call<Record<string, unknown> | null>('GET', this.sandbox(id, '/stats'));
    if (!s || typeof s !== 'object' || !Object.values(s).every((v) => typeof v === 'number' && Number.isFinite(v))) throw badNodeAnswer(this.id, `stats of ${id}`);
    return s as unknown as SandboxStats;
  }

  async listeningPorts(id: string): Promise<ListeningPort[]> {
    const ports = (await this.node.call<{ ports?: unknown } | null>('GET', this.sandbox(id, '/ports')))?.ports;
    if (!Array.isArray(ports)) throw badNodeAnswer(this.id, `ports of ${id}`);
    return ports as ListeningPort[];
  }

  async setEgress(id: string, policy: EgressPolicy): Promise<void> {
    await this.node.call('PUT', this.sandbox(id, '/egress'), policy);
  }

  async resetDisk(id: string, diskGb: number): Promise<void> {
    await this.node.call('POST', this.sandbox(id, '/reset-disk'), { disk_gb: diskGb });
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
      url: new URL(path, this.node.base),
      token: await this.node.token(),
      tls: this.node.tlsOptions(),
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
   * resolves, the stream speaks the agent's protocol as its unix socket does (node/remote-relay.ts).
   */
  dialAgent(id: string, timeoutMs = 10_000): Promise<Socket> {
    return dialRelayed(this.node, id, timeoutMs, this.o.relayProbeMs);
  }

  /** OOM kills the node reports, over one event stream kept open (reopened after a failure). */
  watchOom(onKill: (id: string, kills: number) => void): () => void {
    return watchOomEvents(this.node, this.log, onKill);
  }

  close(): Promise<void> {
    return this.node.close();
  }
}
