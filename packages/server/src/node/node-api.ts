import { chown, lstat, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import type { IncomingMessage } from 'node:http';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import { bearer, type ClusterVerifier } from '../runtime/cluster-auth.js';
import { CANONICAL_ID_OFFSET, ID_RANGE } from '../runtime/ids.js';
import { ID_RE } from '../runtime/sandbox-paths.js';
import type { EgressPolicy } from '../runtime/egress-policy.js';
import { ExportTooLarge } from '../runtime/types.js';
import { parseLayerRefs } from '../images/layer-fetch.js';
import { digestLayerTree, packLayer } from '../images/layer-tar.js';
import { EXPORT_STATS_HEADER, LAYER_BYTES_HEADER, LAYER_DIGEST_HEADER } from '../runtime/layer-export-wire.js';
import type { LocalNode } from './local-node.js';
import type { NodeSpec } from './types.js';
import { parseWarmAsk, STAGES_HEADER } from './warm-ask.js';
import { nodeErrorAnswer } from './wire-errors.js';

export interface NodeApiOptions {
  /** This machine as a node: its runtime, warm pool and layers. */
  node: Pick<LocalNode, 'id' | 'take' | 'dropWarm' | 'start' | 'receive' | 'pause' | 'resume' | 'stop' | 'destroy' | 'status' | 'statuses' | 'list' | 'stats' | 'listeningPorts' | 'setEgress' | 'resetDisk' | 'exportLayer' | 'agentSocket' | 'watchOom' | 'layerIds'>;
  /** The cluster's public key: a node checks tokens, it cannot make them. */
  auth: ClusterVerifier;
  log?: (msg: string) => void;
  /** What control replicas hold here unrecorded (absent: claims are taken and ignored: no collector runs). */
  orphans?: { claim(owner: string, ids: string[], ttlMs: number): void; handedOut?(id: string): void; forget?(id: string): void };
  /**
   * Specs name their layers by reference (a node with a layers directory of its own, which fetches
   * what it lacks); a spec naming paths is refused. false (tests of one machine): specs name this
   * machine's paths.
   */
  byReference: boolean;
  /**
   * A directory of this node's own where a sandbox's files are copied for a snapshot before they go
   * to control as a layer's tar (absent: snapshots are refused here).
   */
  exportsDir?: string;
  /** The API over TLS with this certificate and key (PEM); absent: plain HTTP. */
  https?: { cert: string; key: string };
  /** The longest a snapshot's layer tar may be (its files' bytes, holes included; default: no limit). */
  exportMaxBytes?: number;
}

const STAGE_BEAT_MS = 1000;

/** `work`'s answer in stages (STAGES_HEADER): what the node is alive to say before it is done. */
async function answerInStages(reply: FastifyReply, work: () => Promise<unknown>, log: (msg: string) => void): Promise<void> {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.write(' ');
  const beat = setInterval(() => res.write(' '), STAGE_BEAT_MS);
  try {
    res.end(JSON.stringify({ status: 200, body: await work() }));
  } catch (err) {
    if (!(err instanceof ServiceError)) log(`node api: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    const { status, body } = nodeErrorAnswer(err);
    res.end(JSON.stringify({ status, body }));
  } finally {
    clearInterval(beat);
  }
}

/** The largest body of a call (a create's env_vars may be as large as the public API takes: 10 MiB). */
const NODE_BODY_LIMIT = 16 * 1024 * 1024;

/** The most sandbox ids one claim names (a claim replaces the owner's last one). */
const MAX_CLAIMED = 20_000;

/** How long the relay waits for a sandbox's agent socket to accept before answering 502. */
const AGENT_CONNECT_TIMEOUT_MS = 5000;
/** The CONNECT target naming a sandbox's agent: `<id>.agent:1` (authority form, as HTTP wants it). */
const AGENT_TARGET_RE = /^([a-z0-9][a-z0-9-]{0,62})\.agent:1$/;

/**
 * A node's API: this machine's LocalNode, for control to drive across the network (RemoteNode is
 * its client, with the same contract). Every call carries a token control signed for this node,
 * checked with the cluster's public key (ClusterVerifier); every verb keeps the contract (keyed by
 * sandbox id, idempotent), so control may call again after a timeout. Errors go back as
 * node/wire-errors.ts says, and are thrown again on the control side as they were here.
 *
 * Besides the verbs, the node relays connections to its sandboxes' agents: `CONNECT <id>.agent:1`
 * with the token, answered `200` and then the agent's bytes both ways (HTTP, upgrades, tunnels).
 */
export function nodeApi(o: NodeApiOptions): FastifyInstance {
  const log = o.log ?? (() => undefined);
  const rt = o.node;
  // Over TLS the server is an https.Server: the routes and the CONNECT relay are the same.
  const app = o.https
    ? (Fastify({ bodyLimit: NODE_BODY_LIMIT, https: { cert: o.https.cert, key: o.https.key, minVersion: 'TLSv1.2' } }) as unknown as FastifyInstance)
    : Fastify({ bodyLimit: NODE_BODY_LIMIT });

  app.addHook('onRequest', async (req) => {
    await o.auth.verify(bearer(req.headers.authorization), rt.id);
  });
  app.setErrorHandler((err, _req, reply) => sendError(reply, err, log));
  app.setNotFoundHandler((req, reply) => sendError(reply, new ServiceError('ROUTE_NOT_FOUND', `no node route ${req.method} ${req.url}`), log));

  const idOf = (req: FastifyRequest): string => {
    const id = (req.params as { id?: unknown }).id;
    if (typeof id !== 'string' || !ID_RE.test(id)) throw new ServiceError('VALIDATION_ERROR', 'bad sandbox id');
    return id;
  };
  // A start's spec, its layers by reference (fetched by the node when it lacks them) or by path.
  const specOf = (req: FastifyRequest): NodeSpec => {
    const body = req.body as (NodeSpec & { layers?: unknown }) | undefined;
    if (!body || typeof body !== 'object' || body.id !== idOf(req)) throw new ServiceError('VALIDATION_ERROR', 'the body must be the sandbox spec of the id in the path');
    if (!o.byReference) return body;
    // Paths of control's machine mean nothing here, and must not name this one's files.
    if (body.lowerDirs !== undefined) throw new ServiceError('VALIDATION_ERROR', 'this node takes layers by reference (layers), not by path (lowerDirs)');
    const refs = parseLayerRefs(body.layers);
    const { layers: _refs, ...spec } = body;
    return { ...spec, lowerDirs: [], layerIds: refs.map((r) => r.id), layerRefs: refs };
  };
  // The verb's own result (void) is awaited in the argument: a 204 once it is done.
  const done = (reply: FastifyReply, _done?: void) => reply.code(204).send();

  app.get('/node/v1/health', async () => ({ node_id: rt.id }));
  app.post('/node/v1/sandboxes/:id/start', async (req, reply) => done(reply, await rt.start(specOf(req))));
  app.post('/node/v1/sandboxes/:id/receive', async (req, reply) => {
    const spec = specOf(req);
    await rt.receive(spec);
    // A copy made anew: the grace an earlier one of the id had run through does not carry over.
    o.orphans?.forget?.(spec.id);
    return done(reply);
  });
  app.post('/node/v1/sandboxes/:id/pause', async (req, reply) => done(reply, await rt.pause(idOf(req))));
  app.post('/node/v1/sandboxes/:id/resume', async (req, reply) => done(reply, await rt.resume(idOf(req))));
  app.post('/node/v1/sandboxes/:id/stop', async (req, reply) => done(reply, await rt.stop(idOf(req))));
  app.delete('/node/v1/sandboxes/:id', async (req, reply) => done(reply, await rt.destroy(idOf(req))));
  app.get('/node/v1/sandboxes/:id/status', async (req) => ({ status: await rt.status(idOf(req)) }));
  app.get('/node/v1/sandboxes/:id/stats', async (req) => rt.stats(idOf(req)));
  app.get('/node/v1/sandboxes/:id/ports', async (req) => ({ ports: await rt.listeningPorts(idOf(req)) }));
  app.put('/node/v1/sandboxes/:id/egress', async (req, reply) => {
    const p = req.body as Partial<EgressPolicy> | undefined;
    const strings = (v: unknown) => Array.isArray(v) && v.length <= 1000 && v.every((x) => typeof x === 'string');
    if (!p || typeof p.internet !== 'boolean' || !strings(p.allow) || !strings(p.deny)) throw new ServiceError('VALIDATION_ERROR', 'the body must be an egress policy');
    return done(reply, await rt.setEgress(idOf(req), { internet: p.internet, allow: p.allow!, deny: p.deny! }));
  });
  app.post('/node/v1/sandboxes/:id/reset-disk', async (req, reply) => {
    const diskGb = (req.body as { disk_gb?: unknown } | undefined)?.disk_gb;
    if (typeof diskGb !== 'number' || !(diskGb > 0)) throw new ServiceError('VALIDATION_ERROR', 'disk_gb must be a positive number');
    return done(reply, await rt.resetDisk(idOf(req), diskGb));
  });
  // A snapshot: the sandbox's own files (Runtime.exportLayer) copied into a directory of this node,
  // then sent as that layer's tar (layer-tar/2), its digest and length in headers (control checks
  // both as it unpacks); the copy is removed once sent, or when the answer breaks off.
  app.post('/node/v1/sandboxes/:id/layer', async (req, reply) => {
    const id = idOf(req);
    const maxBytes = (req.body as { max_bytes?: unknown } | undefined)?.max_bytes;
    if (maxBytes !== undefined && (typeof maxBytes !== 'number' || !Number.isSafeInteger(maxBytes) || maxBytes < 0)) throw new ServiceError('VALIDATION_ERROR', 'max_bytes must be a whole number of bytes');
    if (!o.exportsDir) throw new ServiceError('INVALID_STATE', 'this node takes no snapshots (it has no exports directory)');
    await mkdir(o.exportsDir, { recursive: true, mode: 0o700 });
    const tree = await mkdtemp(join(o.exportsDir, `${id}-`));
    const remove = () => void rm(tree, { recursive: true, force: true }).catch((err: unknown) => log(`removing the export ${tree} failed: ${String(err)}`));
    // Control gone (its connection closed: it gave up, or the answer ended): nothing more is read or
    // sent for it. A 'close' comes once: listened to from the start, not from where it matters.
    const gone = new AbortController();
    reply.raw.once('close', () => gone.abort(new Error('control closed the connection')));
    try {
      let stats;
      try {
        stats = await rt.exportLayer(id, tree, maxBytes === undefined ? {} : { maxBytes });
      } catch (err) {
        if (err instanceof ExportTooLarge) throw new ServiceError('LIMIT_EXCEEDED', `sandbox ${id}'s disk holds ${err.used} bytes, over ${String(maxBytes)}`, { id, export_used_bytes: err.used });
        throw err;
      }
      // The tar holds every byte of every file, holes too: a sparse file the disk's count missed is
      // refused here, before it is read for a digest and sent (control refuses it too).
      if (maxBytes !== undefined && stats.bytes > maxBytes) {
        throw new ServiceError('LIMIT_EXCEEDED', `sandbox ${id}'s files hold ${stats.bytes} bytes (holes of sparse files count), over ${maxBytes}`, { id, export_used_bytes: stats.bytes });
      }
      if (o.exportMaxBytes !== undefined && stats.bytes > o.exportMaxBytes) {
        throw new ServiceError('LIMIT_EXCEEDED', `sandbox ${id}'s files hold ${stats.bytes} bytes (holes of sparse files count), over the ${o.exportMaxBytes} a snapshot's layer may have`, { id, limit: 'snapshot_layer_bytes', max: o.exportMaxBytes });
      }
      // The layer's root stands for the sandbox's `/` (root's inside): canonical, like every layer's.
      const top = await lstat(tree);
      if (!(top.uid >= CANONICAL_ID_OFFSET && top.uid < CANONICAL_ID_OFFSET + ID_RANGE)) await chown(tree, CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET);
      // Read whole for the digest (minutes for a large tree): not for a control that left meanwhile.
      gone.signal.throwIfAborted();
      const d = await digestLayerTree(tree, gone.signal);
      gone.signal.throwIfAborted();
      const tar = packLayer(tree);
      tar.once('close', remove);
      gone.signal.addEventListener('abort', () => tar.destroy(), { once: true });
      return reply
        .header('content-type', 'application/x-tar')
        .header(LAYER_DIGEST_HEADER, d.digest)
        .header(LAYER_BYTES_HEADER, String(d.bytes))
        .header(EXPORT_STATS_HEADER, JSON.stringify(stats))
        .send(tar);
    } catch (err) {
      remove();
      throw err;
    }
  });
  // A running sandbox of a spec for control, from this node's warm pool or booted now, with the
  // create's env and policy set; the node gives its id. Control that went away while it waited
  // ends the wait (what it started is kept ready), or destroys what was not handed over yet.
  app.post('/node/v1/warm', async (req, reply) => {
    const ask = parseWarmAsk(req.body, o.byReference);
    const gone = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) gone.abort();
    });
    // Control closes the connection when it gives up (its deadline, or a stopped node's silence):
    // the server keeps a half-closed connection open to answer it, so the end of what control sends
    // is its leaving, too. A node that was stopped reads the ask and that end at once when it goes
    // on, before this handler runs.
    const sock = req.raw.socket;
    const left = () => gone.abort();
    if (sock.destroyed || sock.readableEnded) gone.abort();
    else {
      sock.once('end', left);
      reply.raw.once('close', () => sock.off('end', left));
    }
    const spec: NodeSpec = 'refs' in ask.layers ? { ...ask.spec, layerRefs: ask.layers.refs } : { ...ask.spec, lowerDirs: ask.layers.paths };
    const take = async () => {
      const { id, warm } = await rt.take({ spec, poolId: ask.poolId, label: ask.label, env: ask.agentEnv ?? {}, egress: ask.egress ?? null, signal: gone.signal });
      // Control went away as the sandbox was handed over (it gave up waiting): the answer would
      // reach no one, and the sandbox, holding the create's env, would be no one's until collected.
      if (gone.signal.aborted) {
        log(`sandbox ${id}: control went away as it was handed over; destroyed`);
        await rt.destroy(id).catch((err: unknown) => log(`destroying sandbox ${id}, whose asker left, failed: ${String(err)}`));
        throw new ServiceError('INVALID_STATE', 'the asker went away: the sandbox was destroyed');
      }
      // Whether the answer reaches control is not known here: the collector sees that control
      // claims or records it soon (node/orphans.ts).
      o.orphans?.handedOut?.(id);
      return { id, warm, env_set: true };
    };
    if (req.headers[STAGES_HEADER] !== '1') return take();
    return answerInStages(reply, take, log);
  });
  // A template deleted (or its pool id otherwise done with): its ready sandboxes go.
  app.delete('/node/v1/warm/:pool', async (req, reply) => {
    const poolId = (req.params as { pool?: unknown }).pool;
    if (typeof poolId !== 'string' || !/^[\x21-\x7e]{1,200}$/.test(poolId)) throw new ServiceError('VALIDATION_ERROR', 'bad pool id');
    return done(reply, await rt.dropWarm(poolId));
  });
  app.get('/node/v1/sandboxes', async () => ({ ids: await rt.list() }));
  app.get('/node/v1/layers', async () => ({ ids: await rt.layerIds() }));
  // A control replica's sandboxes here that the store does not record yet (its creates under way,
  // its warm pool): not collected as no one's while the claim lasts (services/orphans.ts).
  app.put('/node/v1/claims/:owner', async (req, reply) => {
    const owner = (req.params as { owner?: unknown }).owner;
    const body = req.body as { ids?: unknown; ttl_seconds?: unknown } | undefined;
    if (typeof owner !== 'string' || !/^[a-zA-Z0-9-]{1,64}$/.test(owner)) throw new ServiceError('VALIDATION_ERROR', 'bad claim owner');
    const ids = body?.ids;
    if (!Array.isArray(ids) || ids.length > MAX_CLAIMED || !ids.every((i) => typeof i === 'string' && ID_RE.test(i))) throw new ServiceError('VALIDATION_ERROR', 'ids must be a list of sandbox ids');
    const ttl = body?.ttl_seconds;
    if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < 1 || ttl > 600) throw new ServiceError('VALIDATION_ERROR', 'ttl_seconds must be an integer from 1 to 600');
    try {
      o.orphans?.claim(owner, ids as string[], ttl * 1000);
    } catch (err) {
      if (err instanceof RangeError) throw new ServiceError('LIMIT_EXCEEDED', err.message);
      throw err;
    }
    return reply.code(204).send();
  });
  app.post('/node/v1/statuses', async (req) => {
    const ids = (req.body as { ids?: unknown } | undefined)?.ids;
    if (!Array.isArray(ids) || ids.length > 100_000 || !ids.every((i) => typeof i === 'string' && ID_RE.test(i))) throw new ServiceError('VALIDATION_ERROR', 'ids must be a list of sandbox ids');
    return { statuses: Object.fromEntries(await rt.statuses(ids as string[])) };
  });
  // What control holds open here (event streams, relayed connections) is the server's no longer:
  // a close ends it, or the server would wait for every control replica to let go first (a node
  // told to stop would stay up, unreachable, until killed with its pool undrained).
  const held = new Set<{ end: () => void }>();
  app.addHook('preClose', async () => {
    for (const h of held) h.end();
    held.clear();
  });
  // OOM kills as they happen, one server-sent event each, for as long as control listens.
  app.get('/node/v1/oom-events', (req, reply) => {
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store' });
    res.write(': oom events\n\n');
    const stop = rt.watchOom((id, kills) => res.write(`data: ${JSON.stringify({ id, kills })}\n\n`));
    const ping = setInterval(() => res.write(': ping\n\n'), 15_000);
    const stream = { end: () => res.destroy() };
    held.add(stream);
    req.raw.on('close', () => {
      held.delete(stream);
      clearInterval(ping);
      stop();
    });
  });

  app.server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const relay = { end: () => socket.destroy() };
    held.add(relay);
    socket.once('close', () => held.delete(relay));
    void relayToAgent(o, req, socket, head).catch((err: unknown) => {
      log(`agent relay: ${String(err)}`);
      socket.destroy();
    });
  });
  return app;
}

async function relayToAgent(o: NodeApiOptions, req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
  client.on('error', () => undefined);
  // The answer, then the connection closed by us: the server handed the socket over (allowHalfOpen,
  // no timeouts), so a client that never closes its side would otherwise hold it for ever.
  const refuse = (status: number, text: string) => {
    client.end(`HTTP/1.1 ${status} ${text}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`, () => client.destroy());
    setTimeout(() => client.destroy(), 1000).unref();
  };
  try {
    await o.auth.verify(bearer(req.headers['proxy-authorization'] ?? req.headers.authorization), o.node.id);
  } catch {
    return refuse(401, 'Unauthorized');
  }
  const m = AGENT_TARGET_RE.exec(req.url ?? '');
  if (!m) return refuse(400, 'Bad Request');
  const upstream: Socket = connect(o.node.agentSocket(m[1]!));
  const timer = setTimeout(() => upstream.destroy(new Error('the agent did not accept in time')), AGENT_CONNECT_TIMEOUT_MS);
  upstream.once('error', () => {
    clearTimeout(timer);
    if (!client.destroyed) refuse(502, 'Bad Gateway');
  });
  upstream.once('connect', () => {
    clearTimeout(timer);
    upstream.removeAllListeners('error');
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) upstream.write(head);
    client.pipe(upstream);
    upstream.pipe(client);
  });
}

function sendError(reply: FastifyReply, err: unknown, log: (msg: string) => void): FastifyReply {
  // Fastify's own refusals of a request (a body too large, not JSON) are the caller's mistake.
  const fe = err as { statusCode?: number; code?: unknown; message?: string };
  if (!(err instanceof ServiceError) && typeof fe.code === 'string' && fe.code.startsWith('FST_') && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    err = new ServiceError(fe.statusCode === 413 ? 'PAYLOAD_TOO_LARGE' : 'VALIDATION_ERROR', fe.message ?? 'bad request');
  }
  const { status, body } = nodeErrorAnswer(err);
  if (!(err instanceof ServiceError)) log(`node api: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  return reply.code(status).send(body);
}
