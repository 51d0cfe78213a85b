import { ApiClient, enc, type CallOptions } from './client.js';
import type { ClientOptions } from './config.js';
import type { VolumeInfo } from './types.js';
import { toVolumeInfo } from './wire.js';

export interface VolumeOptions extends ClientOptions, CallOptions {
  /** Reuse a configured client instead of `apiKey`/`baseUrl`. */
  client?: ApiClient;
}

/** A volume, its name or its id. */
export type VolumeRef = string | VolumeInfo;

const refOf = (v: VolumeRef): string => (typeof v === 'string' ? v : v.id);
const clientOf = (options: { client?: ApiClient } & ClientOptions): ApiClient => options.client ?? new ApiClient(options);

/**
 * The organization's volumes: filesystems that outlive sandboxes. Any number of its sandboxes mount
 * one at once (`Sandbox.create({ volumes: [{ volume: 'data', path: '/data' }] })`), read-write unless
 * `readOnly`; writes past `sizeGb` fail with ENOSPC inside.
 */
export class Volume {
  /** Makes a volume of `sizeGb` named `name` (unique in the organization: ConflictError otherwise). */
  static async create(name: string, sizeGb: number, options: VolumeOptions = {}): Promise<VolumeInfo> {
    const body = await clientOf(options).http.json({
      method: 'POST',
      path: '/v1/volumes',
      json: { name, size_gb: sizeGb },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `create volume ${name}`,
    });
    return toVolumeInfo(body);
  }

  /** The organization's volumes, by name. */
  static async list(options: VolumeOptions = {}): Promise<VolumeInfo[]> {
    const body = await clientOf(options).http.json<{ data?: unknown[] }>({ method: 'GET', path: '/v1/volumes', signal: options.signal, timeoutMs: options.requestTimeoutMs, what: 'list volumes' });
    return (Array.isArray(body.data) ? body.data : []).map(toVolumeInfo);
  }

  /** One volume, by name or id, with `usedBytes` (NotFoundError if the organization has none such). */
  static async get(volume: VolumeRef, options: VolumeOptions = {}): Promise<VolumeInfo> {
    const ref = refOf(volume);
    const body = await clientOf(options).http.json({ method: 'GET', path: `/v1/volumes/${enc(ref)}`, signal: options.signal, timeoutMs: options.requestTimeoutMs, what: `get volume ${ref}` });
    return toVolumeInfo(body);
  }

  /**
   * Deletes a volume and its files. A volume a sandbox mounts is refused (ConflictError,
   * `VOLUME_IN_USE`) unless `force`, which deletes those sandboxes first.
   */
  static async delete(volume: VolumeRef, options: VolumeOptions & { force?: boolean } = {}): Promise<{ id: string; status: string }> {
    const ref = refOf(volume);
    const body = await clientOf(options).http.json<Record<string, unknown>>({
      method: 'DELETE',
      path: `/v1/volumes/${enc(ref)}`,
      query: options.force ? { force: 'true' } : undefined,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `delete volume ${ref}`,
    });
    return { id: typeof body.id === 'string' ? body.id : ref, status: typeof body.status === 'string' ? body.status : 'deleted' };
  }
}
