import { enc, type ApiClient, type CallOptions } from './client.js';
import { copyTimeoutMs, snapshotIdOf, type SnapshotRef } from './snapshot.js';
import { DEFAULT_TEMPLATE, type CreateOptions, type CreateSnapshotOptions, type ForkOptions, type ListOptions } from './sandbox-options.js';
import type { ListeningPort, NetworkPolicy, PreviewUrl, SandboxInfo, SandboxPage, SandboxResources, SnapshotInfo, TimeoutResult } from './types.js';
import { toNetworkPolicy, toSandboxInfo, toSandboxPage, toSandboxResources, toSnapshotInfo } from './wire.js';

// The lifecycle API's calls on `/v1/sandboxes`, each answer parsed; `Sandbox` keeps its `info` up to date from them.

/** The create answer: the sandbox's fields and its first agent token. */
export async function createSandbox(client: ApiClient, options: CreateOptions): Promise<Record<string, unknown>> {
  const json = settingsFields(options);
  if (options.snapshot !== undefined) {
    if (options.template !== undefined || options.templateId !== undefined) throw new TypeError('create from a snapshot or from a template, not both');
    json.snapshot_id = snapshotIdOf(options.snapshot);
  } else if (options.templateId) json.template_id = options.templateId;
  else json.template_name = options.template ?? DEFAULT_TEMPLATE;
  if (options.region !== undefined) json.region = options.region;
  if (options.volumes !== undefined) {
    json.volumes = options.volumes.map((v) => ({ name: typeof v.volume === 'string' ? v.volume : v.volume.id, path: v.path, ...(v.readOnly !== undefined ? { read_only: v.readOnly } : {}) }));
  }
  return client.http.json<Record<string, unknown>>({
    method: 'POST',
    path: '/v1/sandboxes',
    json,
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs ?? Math.max(client.config.requestTimeoutMs, 120_000),
    what: 'create sandbox',
  });
}

export async function listSandboxPage(client: ApiClient, options: Omit<ListOptions, 'maxItems'> & { cursor?: string }): Promise<SandboxPage> {
  const body = await client.http.json({
    method: 'GET',
    path: '/v1/sandboxes',
    query: { limit: options.limit, status: options.status, template: options.template, region: options.region, cursor: options.cursor },
    signal: options.signal,
    what: 'list sandboxes',
  });
  return toSandboxPage(body);
}

export async function fetchSandboxInfo(client: ApiClient, id: string, options: CallOptions): Promise<SandboxInfo> {
  const body = await client.http.json({
    method: 'GET',
    path: `/v1/sandboxes/${enc(id)}`,
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs,
    what: `get sandbox ${id}`,
  });
  return toSandboxInfo(body);
}

/** The status the service answers with, if it gives one. */
export async function sandboxAction(client: ApiClient, id: string, verb: 'pause' | 'resume' | 'stop' | 'start', options: CallOptions): Promise<string | undefined> {
  const body = await client.http.json<Record<string, unknown>>({
    method: 'POST',
    path: `/v1/sandboxes/${enc(id)}/${verb}`,
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs ?? (verb === 'start' ? Math.max(client.config.requestTimeoutMs, 120_000) : undefined),
    what: `${verb} sandbox ${id}`,
  });
  return typeof body.status === 'string' ? body.status : undefined;
}

/** The status the service answers with (`deleted` if it gives none). */
export async function deleteSandbox(client: ApiClient, id: string, options: CallOptions): Promise<string> {
  const body = await client.http.json<Record<string, unknown>>({
    method: 'DELETE',
    path: `/v1/sandboxes/${enc(id)}`,
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs,
    what: `delete sandbox ${id}`,
  });
  return typeof body.status === 'string' ? body.status : 'deleted';
}

export async function fetchResources(client: ApiClient, id: string, options: CallOptions): Promise<SandboxResources> {
  const body = await client.http.json<Record<string, unknown>>({
    method: 'GET',
    path: `/v1/sandboxes/${enc(id)}/metrics`,
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs,
    what: `metrics of ${id}`,
  });
  return toSandboxResources(body);
}

export async function fetchPorts(client: ApiClient, id: string, options: CallOptions): Promise<ListeningPort[]> {
  const body = await client.http.json<Record<string, unknown>>({
    method: 'GET',
    path: `/v1/sandboxes/${enc(id)}/ports`,
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs,
    what: `ports of ${id}`,
  });
  const data = Array.isArray(body.data) ? (body.data as Array<Record<string, unknown>>) : [];
  return data.map((p) => ({
    port: Number(p.port),
    addresses: Array.isArray(p.addresses) ? p.addresses.map(String) : [],
    loopbackOnly: p.loopback_only === true,
  }));
}

export async function previewUrl(client: ApiClient, id: string, port: number, options: CallOptions & { public?: boolean }): Promise<PreviewUrl> {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError('port must be a whole number from 1 to 65535');
  const body = await client.http.json<Record<string, unknown>>({
    method: options.public === undefined ? 'GET' : 'PUT',
    path: `/v1/sandboxes/${enc(id)}/ports/${port}`,
    ...(options.public === undefined ? {} : { json: { public: options.public } }),
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs,
    what: `preview of port ${port} of ${id}`,
  });
  return {
    port: Number(body.port),
    url: String(body.url),
    public: body.public === true,
    ...(typeof body.signed_url === 'string' ? { signedUrl: body.signed_url } : {}),
    ...(typeof body.signed_url_expires_at === 'string' ? { signedUrlExpiresAt: body.signed_url_expires_at } : {}),
  };
}

export async function fetchNetwork(client: ApiClient, id: string, options: CallOptions): Promise<NetworkPolicy> {
  const body = await client.http.json<Record<string, unknown>>({
    method: 'GET',
    path: `/v1/sandboxes/${enc(id)}/network`,
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs,
    what: `network of ${id}`,
  });
  return toNetworkPolicy(body);
}

export async function putNetwork(client: ApiClient, id: string, policy: Partial<NetworkPolicy>, options: CallOptions): Promise<NetworkPolicy> {
  const json: Record<string, unknown> = {};
  if (policy.internetAccess !== undefined) json.internet_access = policy.internetAccess;
  if (policy.allowOut !== undefined) json.allow_out = policy.allowOut;
  if (policy.denyOut !== undefined) json.deny_out = policy.denyOut;
  const body = await client.http.json<Record<string, unknown>>({
    method: 'PUT',
    path: `/v1/sandboxes/${enc(id)}/network`,
    json,
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs,
    what: `set network of ${id}`,
  });
  return toNetworkPolicy(body);
}

export async function takeSnapshot(client: ApiClient, id: string, options: CreateSnapshotOptions): Promise<SnapshotInfo> {
  const body = await client.http.json({
    method: 'POST',
    path: `/v1/sandboxes/${enc(id)}/snapshots`,
    json: options.name === undefined ? {} : { name: options.name },
    signal: options.signal,
    timeoutMs: copyTimeoutMs(client, options),
    what: `snapshot sandbox ${id}`,
  });
  return toSnapshotInfo(body);
}

/** The new sandboxes as the service answers them, each with its token. */
export async function forkSandbox(client: ApiClient, id: string, count: number, options: ForkOptions): Promise<unknown[]> {
  if (!Number.isInteger(count) || count < 1) throw new RangeError('count must be a positive whole number');
  const body = await client.http.json<Record<string, unknown>>({
    method: 'POST',
    path: `/v1/sandboxes/${enc(id)}/fork`,
    json: { count, ...settingsFields(options) },
    signal: options.signal,
    timeoutMs: copyTimeoutMs(client, options),
    what: `fork sandbox ${id}`,
  });
  return Array.isArray(body.data) ? (body.data as unknown[]) : [];
}

export async function restoreSandbox(client: ApiClient, id: string, snapshot: SnapshotRef, options: CallOptions): Promise<SandboxInfo> {
  const snapshotId = snapshotIdOf(snapshot);
  const body = await client.http.json({
    method: 'POST',
    path: `/v1/sandboxes/${enc(id)}/restore`,
    json: { snapshot_id: snapshotId },
    signal: options.signal,
    timeoutMs: copyTimeoutMs(client, options),
    what: `restore sandbox ${id} to ${snapshotId}`,
  });
  return toSandboxInfo(body);
}

export async function putTimeout(client: ApiClient, id: string, seconds: number, options: CallOptions): Promise<TimeoutResult> {
  if (!Number.isInteger(seconds) || seconds <= 0) throw new RangeError('timeout must be a positive whole number of seconds');
  const body = await client.http.json<Record<string, unknown>>({
    method: 'PUT',
    path: `/v1/sandboxes/${enc(id)}/timeout`,
    json: { timeout_seconds: seconds },
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs,
    what: `set timeout of ${id}`,
  });
  const expiresAt = typeof body.expires_at === 'string' ? body.expires_at : new Date(Date.now() + seconds * 1000).toISOString();
  return { id, timeoutSeconds: typeof body.timeout_seconds === 'number' ? body.timeout_seconds : seconds, expiresAt };
}

/** The settings of a create or fork request, those given only. */
function settingsFields(o: ForkOptions): Record<string, unknown> {
  const json: Record<string, unknown> = {};
  if (o.timeoutSeconds !== undefined) json.timeout_seconds = o.timeoutSeconds;
  if (o.internetAccess !== undefined) json.internet_access = o.internetAccess;
  if (o.allowOut !== undefined) json.allow_out = o.allowOut;
  if (o.denyOut !== undefined) json.deny_out = o.denyOut;
  if (o.envVars !== undefined) json.env_vars = o.envVars;
  if (o.onTimeout !== undefined) json.on_timeout = o.onTimeout;
  if (o.idleTimeoutSeconds !== undefined) json.idle_timeout_seconds = o.idleTimeoutSeconds;
  if (o.autoResume !== undefined) json.auto_resume = o.autoResume;
  return json;
}
