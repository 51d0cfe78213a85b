import { statfs } from 'node:fs/promises';
import { dirname } from 'node:path';
import { describeCause, ServiceError } from '@sandboxd/protocol';
import type { LayerRef } from '../runtime/types.js';
import type { FsLayerStore, Log } from './layer-store.js';
import { writeContentRecord } from './layer-content.js';
import { unpackLayer } from './layer-tar.js';
import { Agent as UndiciAgent, type Dispatcher } from 'undici';

export interface LayerFetcherOptions {
  /** This node's layers directory. */
  store: FsLayerStore;
  /** The largest layer it takes (bytes of its tar). */
  maxBytes: number;
  /** The longest one fetch may take, start to end. */
  timeoutMs: number;
  /** The longest the sender may send nothing (default 30 s). */
  stallMs?: number;
  /** For https:// layer URLs: the CA bundle (PEM) control's certificate is checked against (absent: the system's). */
  ca?: string;
  /** Told after each layer fetched into the store (the cache then checks its budget). */
  onFetched?: (id: string) => void;
  log?: Log;
}

const ID_RE = /^[0-9a-f]{64}$/;
const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;
/** Most layers one sandbox names (an overlay takes a few hundred at most). */
const MAX_LAYERS = 128;
/** Room a fetch leaves free on the layers' filesystem. */
const SPARE_BYTES = 1024 ** 3;

/** A list of LayerRef as it came over the wire, checked field by field (throws VALIDATION_ERROR). */
export function parseLayerRefs(v: unknown): LayerRef[] {
  const bad = (why: string) => new ServiceError('VALIDATION_ERROR', `layers: ${why}`);
  if (!Array.isArray(v) || v.length === 0 || v.length > MAX_LAYERS) throw bad(`must be a list of 1 to ${MAX_LAYERS} layers`);
  return v.map((r: unknown) => {
    const o = r as Partial<Record<keyof LayerRef, unknown>> | null;
    if (!o || typeof o !== 'object') throw bad('each must be an object');
    if (typeof o.id !== 'string' || !ID_RE.test(o.id)) throw bad('bad layer id');
    if (typeof o.digest !== 'string' || !DIGEST_RE.test(o.digest)) throw bad('bad digest');
    if (typeof o.bytes !== 'number' || !Number.isSafeInteger(o.bytes) || o.bytes < 1024) throw bad('bad size');
    if (typeof o.url !== 'string' || o.url.length > 2048 || !/^https?:\/\//.test(o.url)) throw bad('bad url');
    if (typeof o.token !== 'string' || o.token.length > 4096) throw bad('bad token');
    return { id: o.id, digest: o.digest, bytes: o.bytes, url: o.url, token: o.token };
  });
}

/**
 * A node's layers: those its layers directory has are used as they are; a missing one is fetched
 * from where control said (its layer route, with the token it signed for this node and layer),
 * checked while it streams in (TarGuard, size, digest; layer-tar.ts), unpacked into a temporary
 * directory and renamed into place by the layer store, whose lock makes concurrent asks for one
 * layer (in this process or another) share one download. Everything from the network is taken for
 * hostile: a refused or failed fetch leaves nothing behind.
 */
export class LayerFetcher {
  private readonly log: Log;
  private dispatcher: Dispatcher | undefined;

  constructor(private readonly o: LayerFetcherOptions) {
    this.log = o.log ?? (() => undefined);
  }

  /** This machine's paths of the layers, top-most first, fetching the missing ones (one at a time). */
  async resolve(refs: LayerRef[]): Promise<string[]> {
    const paths: string[] = [];
    for (const ref of refs) {
      paths.push(await this.ensure(ref));
      // The cache's clock (node/layer-cache.ts): a layer in use is the most recently used.
      await this.o.store.markUsed(ref.id).catch((err: unknown) => this.log(`marking layer ${ref.id.slice(0, 12)} used failed: ${String(err)}`));
    }
    return paths;
  }

  async ensure(ref: LayerRef): Promise<string> {
    const store = this.o.store;
    if (await store.has(ref.id)) return store.path(ref.id);
    try {
      let fetched = false;
      const info = await store.ensureLayer(ref.id, (tree) => {
        fetched = true;
        return this.fetchInto(ref, tree);
      }, this.log);
      if (fetched) this.o.onFetched?.(ref.id);
      return info.path;
    } catch (err) {
      if (err instanceof ServiceError) throw err;
      throw new ServiceError('RUNTIME_ERROR', `the node could not fetch layer ${ref.id.slice(0, 12)} of this sandbox's template; try again`).withDetail(describeCause(err));
    }
  }

  private async fetchInto(ref: LayerRef, tree: string) {
    if (ref.bytes > this.o.maxBytes) {
      throw new ServiceError('RUNTIME_ERROR', `layer ${ref.id.slice(0, 12)} is ${mb(ref.bytes)} MB, more than this node takes (SANDBOXD_LAYER_FETCH_MAX_GB)`);
    }
    const fs = await statfs(this.o.store.root);
    if (fs.bavail * fs.bsize < ref.bytes + SPARE_BYTES) {
      throw new ServiceError('RUNTIME_ERROR', `the node's layers directory has no room for layer ${ref.id.slice(0, 12)} (${mb(ref.bytes)} MB)`);
    }
    const started = Date.now();
    const deadline = AbortSignal.timeout(this.o.timeoutMs);
    const stall = new AbortController();
    const signal = AbortSignal.any([deadline, stall.signal]);
    const stallMs = this.o.stallMs ?? 30_000;
    let timer = setTimeout(() => stall.abort(new Error(`the sender sent nothing for ${stallMs / 1000} s`)), stallMs);
    const poke = () => {
      clearTimeout(timer);
      timer = setTimeout(() => stall.abort(new Error(`the sender sent nothing for ${stallMs / 1000} s`)), stallMs);
    };
    try {
      // No redirects: the token is for the address control named, nowhere else.
      const init: RequestInit = { headers: { authorization: `Bearer ${ref.token}` }, redirect: 'error', signal };
      if (this.o.ca && ref.url.startsWith('https:')) {
        this.dispatcher ??= new UndiciAgent({ connect: { ca: this.o.ca, minVersion: 'TLSv1.2' } });
        (init as RequestInit & { dispatcher: Dispatcher }).dispatcher = this.dispatcher;
      }
      const res = await fetch(ref.url, init);
      if (res.status !== 200 || !res.body) {
        await res.body?.cancel().catch(() => undefined);
        throw new Error(`${ref.url} answered ${res.status}`);
      }
      const length = res.headers.get('content-length');
      if (length !== null && Number(length) !== ref.bytes) {
        await res.body.cancel().catch(() => undefined);
        throw new Error(`${ref.url} sends ${length} bytes, not the layer's ${ref.bytes}`);
      }
      const body = res.body as unknown as AsyncIterable<Uint8Array>;
      const timed = async function* () {
        for await (const chunk of body) {
          poke();
          yield chunk;
        }
      };
      const got = await unpackLayer(timed(), tree, { digest: ref.digest, bytes: ref.bytes }, { signal });
      await writeContentRecord(dirname(tree), { digest: ref.digest, bytes: ref.bytes });
      const seconds = (Date.now() - started) / 1000;
      this.log(`fetched layer ${ref.id.slice(0, 12)} (${mb(ref.bytes)} MB) from control in ${seconds.toFixed(1)} s`);
      return { kind: 'fetched', sizeBytes: got.fileBytes, entries: got.entries, extra: { digest: ref.digest, tarBytes: ref.bytes, fetchMs: Date.now() - started, from: new URL(ref.url).host } };
    } catch (err) {
      const why = signal.aborted ? describeCause(signal.reason) : describeCause(err);
      this.log(`fetching layer ${ref.id.slice(0, 12)} from ${new URL(ref.url).host} failed: ${why}`);
      throw new ServiceError('RUNTIME_ERROR', `the node could not fetch layer ${ref.id.slice(0, 12)} of this sandbox's template; try again`).withDetail(why);
    } finally {
      clearTimeout(timer);
    }
  }
}

function mb(bytes: number): string {
  return (bytes / 1e6).toFixed(1);
}
