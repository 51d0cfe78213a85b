import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { FsBlobStore } from './blob-store.js';
import type { FsImageStore, ImageRecord } from './image-store.js';
import type { FsLayerStore, Log } from './layer-store.js';
import {
  MEDIA,
  checkPlatform,
  ensureOciLayers,
  parseImageConfig,
  pickPlatform,
  type ImageIndex,
  type ImageManifest,
} from './oci-image.js';
import { parseImageRef, type ImageRef } from './refs.js';

/**
 * The registry that short references (`ubuntu:22.04`) mean, per the Docker reference convention.
 * Deployments without internet set a mirror in the configuration instead.
 */
export const DEFAULT_REGISTRY_URL = 'https://registry-1.docker.io';

export interface RegistryClientOptions {
  /** Base URL, e.g. `http://127.0.0.1:5000` (plain HTTP allowed for a local mirror). */
  url: string;
  username?: string;
  password?: string;
  /** Per request (manifests, tokens, start of a blob download). */
  timeoutMs?: number;
}

interface Challenge {
  scheme: string;
  params: Record<string, string>;
}

/** Distribution API v2 client: anonymous, basic, or bearer-token auth (as Docker Hub uses). */
export class RegistryClient {
  readonly url: string;
  private readonly tokens = new Map<string, string>();

  constructor(private readonly opts: RegistryClientOptions) {
    this.url = opts.url.replace(/\/+$/, '');
  }

  /** Fetches a manifest (or index) by tag or digest; verifies the digest when one was asked for. */
  async manifest(repo: string, reference: string, signal?: AbortSignal): Promise<{ mediaType: string; body: Buffer; digest: string }> {
    const accept = [MEDIA.ociIndex, MEDIA.dockerList, MEDIA.ociManifest, MEDIA.dockerManifest].join(', ');
    const res = await this.get(repo, `manifests/${reference}`, { accept }, signal);
    const body = Buffer.from(await res.arrayBuffer());
    const digest = `sha256:${createHash('sha256').update(body).digest('hex')}`;
    if (reference.startsWith('sha256:') && digest !== reference) {
      throw new Error(`registry returned manifest ${digest} for ${reference}`);
    }
    const mediaType = (res.headers.get('content-type') ?? '').split(';')[0]!.trim() || ((JSON.parse(body.toString()) as { mediaType?: string }).mediaType ?? '');
    return { mediaType, body, digest };
  }

  /** Downloads a blob into the blob store (verified against its digest); a no-op when present. */
  async blob(repo: string, digest: string, blobs: FsBlobStore, size?: number, signal?: AbortSignal): Promise<string> {
    if (await blobs.has(digest)) return blobs.path(digest);
    const res = await this.get(repo, `blobs/${digest}`, {}, signal);
    if (!res.body) throw new Error(`registry sent no body for blob ${digest}`);
    await blobs.put(Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), { sha256: digest, size, signal });
    return blobs.path(digest);
  }

  private async get(repo: string, path: string, headers: Record<string, string>, signal?: AbortSignal): Promise<Response> {
    const url = `${this.url}/v2/${repo}/${path}`;
    for (let attempt = 0; ; attempt++) {
      const auth = this.tokens.get(repo);
      const res = await this.fetch(url, { ...headers, ...(auth ? { authorization: auth } : {}) }, signal);
      if (res.status === 401 && attempt === 0) {
        await res.body?.cancel();
        await this.authenticate(repo, res.headers.get('www-authenticate') ?? '', signal);
        continue;
      }
      if (!res.ok) {
        const text = (await res.text().catch(() => '')).slice(0, 300);
        throw new Error(`GET ${url}: ${res.status} ${res.statusText}${text ? ` ${text}` : ''}`);
      }
      return res;
    }
  }

  private async authenticate(repo: string, header: string, signal?: AbortSignal): Promise<void> {
    const ch = parseChallenge(header);
    const basic = this.opts.username !== undefined ? `Basic ${Buffer.from(`${this.opts.username}:${this.opts.password ?? ''}`).toString('base64')}` : undefined;
    if (ch?.scheme === 'basic') {
      if (!basic) throw new Error(`registry ${this.url} wants a username and password`);
      this.tokens.set(repo, basic);
      return;
    }
    if (ch?.scheme !== 'bearer' || !ch.params.realm) throw new Error(`registry ${this.url} refused access (401) with no usable challenge`);
    const u = new URL(ch.params.realm);
    if (ch.params.service) u.searchParams.set('service', ch.params.service);
    u.searchParams.set('scope', ch.params.scope ?? `repository:${repo}:pull`);
    const res = await this.fetch(u.toString(), basic ? { authorization: basic } : {}, signal);
    if (!res.ok) throw new Error(`token request to ${u.origin}${u.pathname} failed: ${res.status} ${res.statusText}`);
    const j = (await res.json()) as { token?: string; access_token?: string };
    const token = j.token ?? j.access_token;
    if (!token) throw new Error(`token service ${u.origin} returned no token`);
    this.tokens.set(repo, `Bearer ${token}`);
  }

  private async fetch(url: string, headers: Record<string, string>, signal?: AbortSignal): Promise<Response> {
    const timeout = AbortSignal.timeout(this.opts.timeoutMs ?? 30_000);
    const sig = signal ? AbortSignal.any([signal, timeout]) : timeout;
    try {
      return await fetch(url, { headers, signal: sig, redirect: 'follow' });
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new Error(`cannot reach ${new URL(url).origin}: ${cause?.code ?? cause?.message ?? (err as Error).message}`);
    }
  }
}

export function parseChallenge(header: string): Challenge | undefined {
  const m = /^\s*(\w+)\s+(.*)$/.exec(header);
  if (!m) return undefined;
  const params: Record<string, string> = {};
  for (const p of m[2]!.matchAll(/(\w+)="([^"]*)"/g)) params[p[1]!.toLowerCase()] = p[2]!;
  return { scheme: m[1]!.toLowerCase(), params };
}

export interface PullDeps {
  registry: RegistryClient;
  layers: FsLayerStore;
  images: FsImageStore;
  blobs: FsBlobStore;
  log: Log;
  signal?: AbortSignal;
}

/** Pulls `ref` for the host platform and records it in the image store. */
export async function pullImage(ref: string | ImageRef, deps: PullDeps): Promise<ImageRecord> {
  const r = typeof ref === 'string' ? parseImageRef(ref) : ref;
  const { registry, log, signal } = deps;
  log(`pulling ${r.familiar} from ${registry.url}`);
  let m = await registry.manifest(r.repository, r.digest ?? r.tag, signal);
  for (let depth = 0; m.mediaType === MEDIA.ociIndex || m.mediaType === MEDIA.dockerList; depth++) {
    if (depth > 3) throw new Error('nested image indexes too deep');
    const d = pickPlatform(JSON.parse(m.body.toString('utf8')) as ImageIndex, `${r.familiar} on ${registry.url}`);
    m = await registry.manifest(r.repository, d.digest, signal);
  }
  if (m.mediaType !== MEDIA.ociManifest && m.mediaType !== MEDIA.dockerManifest) {
    throw new Error(`${r.familiar}: unsupported manifest type ${m.mediaType || '(none)'}`);
  }
  const manifest = JSON.parse(m.body.toString('utf8')) as ImageManifest;
  const configPath = await registry.blob(r.repository, manifest.config.digest, deps.blobs, manifest.config.size, signal);
  const configBytes = await readFile(configPath);
  const config = parseImageConfig(configBytes);
  checkPlatform(config, r.familiar);
  if (config.diffIds.length !== manifest.layers.length) {
    throw new Error(`${r.familiar}: manifest has ${manifest.layers.length} layers, config ${config.diffIds.length} diff ids`);
  }
  const fetched: string[] = [];
  const layerIds = await ensureOciLayers(
    deps.layers,
    config.diffIds,
    async (i) => {
      const l = manifest.layers[i]!;
      log(`downloading ${l.digest.slice(7, 19)} (${((l.size ?? 0) / 1e6).toFixed(1)} MB)`);
      fetched.push(l.digest);
      return registry.blob(r.repository, l.digest, deps.blobs, l.size, signal);
    },
    log,
    signal,
  );
  // Compressed layer blobs are dead weight once unpacked; the config stays as the image's identity.
  for (const d of fetched) await deps.blobs.remove(d);
  const record: ImageRecord = {
    ref: r.familiar,
    layers: layerIds,
    env: config.env,
    workdir: config.workdir,
    user: config.user,
    entrypoint: config.entrypoint,
    cmd: config.cmd,
    configDigest: manifest.config.digest,
    source: 'pull',
    origin: `${registry.url}/${r.repository}@${m.digest}`,
    createdAt: new Date().toISOString(),
  };
  await deps.images.put(record);
  log(`pulled ${r.familiar}: ${layerIds.length} layers`);
  return record;
}
