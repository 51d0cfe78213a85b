import { ApiClient, enc, type CallOptions } from './client.js';
import type { ClientOptions } from './config.js';
import { Paginator } from './pagination.js';
import type { SnapshotInfo, SnapshotPage, TemplateInfo } from './types.js';
import { toSnapshotInfo, toSnapshotPage, toTemplateInfo } from './wire.js';

export interface SnapshotOptions extends ClientOptions, CallOptions {
  /** Reuse a configured client instead of `apiKey`/`baseUrl`. */
  client?: ApiClient;
}

export interface ListSnapshotsOptions extends ClientOptions {
  client?: ApiClient;
  /** Only the snapshots taken of this sandbox. */
  sandboxId?: string;
  /** Page size, 1..1000 (default 100). */
  limit?: number;
  /** Stop after this many snapshots. */
  maxItems?: number;
  signal?: AbortSignal;
}

/** A snapshot, or its id. */
export type SnapshotRef = string | SnapshotInfo;

export function snapshotIdOf(snapshot: SnapshotRef): string {
  return typeof snapshot === 'string' ? snapshot : snapshot.snapshotId;
}

/**
 * Client-side deadline of the calls that copy a filesystem (take, fork, restore, promote): as long
 * as the copy takes, and a deadline that fires while the service goes on would leave its result unseen.
 */
export function copyTimeoutMs(client: ApiClient, options: CallOptions): number {
  return options.requestTimeoutMs ?? Math.max(client.config.requestTimeoutMs, 300_000);
}

function clientOf(options: { client?: ApiClient } & ClientOptions): ApiClient {
  return options.client ?? new ApiClient(options);
}

/**
 * The organization's snapshots: list, inspect, delete, and make templates of them. Take one with
 * `sandbox.snapshot()`; start sandboxes from one with `Sandbox.create({ snapshot })`.
 */
export class Snapshot {
  /** The organization's snapshots (of one sandbox with `sandboxId`), newest first, fetched a page at a time as you iterate. */
  static list(options: ListSnapshotsOptions = {}): Paginator<SnapshotInfo> {
    const client = clientOf(options);
    return new Paginator<SnapshotInfo>((cursor, signal) => Snapshot.listPage({ ...options, client, cursor, signal }), {
      signal: options.signal,
      maxItems: options.maxItems,
    });
  }

  /** One page of the list. */
  static async listPage(options: Omit<ListSnapshotsOptions, 'maxItems'> & { cursor?: string } = {}): Promise<SnapshotPage> {
    const body = await clientOf(options).http.json({
      method: 'GET',
      path: '/v1/snapshots',
      query: { limit: options.limit, cursor: options.cursor, sandbox_id: options.sandboxId },
      signal: options.signal,
      what: 'list snapshots',
    });
    return toSnapshotPage(body);
  }

  static async get(snapshot: SnapshotRef, options: SnapshotOptions = {}): Promise<SnapshotInfo> {
    const id = snapshotIdOf(snapshot);
    const body = await clientOf(options).http.json({
      method: 'GET',
      path: `/v1/snapshots/${enc(id)}`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `get snapshot ${id}`,
    });
    return toSnapshotInfo(body);
  }

  /** Deletes a snapshot (NotFoundError if there is none of that id). */
  static async delete(snapshot: SnapshotRef, options: SnapshotOptions = {}): Promise<{ id: string; status: string }> {
    const id = snapshotIdOf(snapshot);
    const body = await clientOf(options).http.json<Record<string, unknown>>({
      method: 'DELETE',
      path: `/v1/snapshots/${enc(id)}`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `delete snapshot ${id}`,
    });
    return { id: typeof body.id === 'string' ? body.id : id, status: typeof body.status === 'string' ? body.status : 'deleted' };
  }

  /**
   * Makes a template named `alias` of the snapshot (lowercase letters, digits, `.`, `_`, `-`):
   * sandboxes created with `template: alias` start with its filesystem.
   */
  static async toTemplate(snapshot: SnapshotRef, alias: string, options: SnapshotOptions = {}): Promise<TemplateInfo> {
    const id = snapshotIdOf(snapshot);
    const client = clientOf(options);
    const body = await client.http.json({
      method: 'POST',
      path: `/v1/snapshots/${enc(id)}/template`,
      json: { alias },
      signal: options.signal,
      timeoutMs: copyTimeoutMs(client, options),
      what: `make template ${alias} of snapshot ${id}`,
    });
    return toTemplateInfo(body);
  }
}
