import { Type, type Static } from '@sinclair/typebox';
import { CreateSnapshotBody, EnvVars, MAX_FORKS, MAX_VOLUMES_PER_SANDBOX, Metadata, ServiceError, type CreateSandboxBody, type ForkBody, type Sandbox, type SetNetworkBody } from '@sandboxd/protocol';

/*
 * E2B's control plane as its clients speak it (`e2b` and `@e2b/code-interpreter` on npm, `e2b` on
 * PyPI), mapped onto ours: request bodies in, our sandbox objects (as /v1 renders them) out. No rule lives here; the routes
 * (routes/e2b.ts) call the same services as /v1.
 */

/**
 * The in-sandbox daemon version we answer, which E2B's clients gate features on: 0.6.3 turns on
 * all that the agent serves (closeStdin 0.5.2, octet-stream uploads 0.5.7, file metadata 0.6.2,
 * refused there with a 400, entries in watch events 0.6.3); only 0.6.4's watching of network
 * mounts, which we do not have, stays refused by the client itself.
 */
export const ENVD_VERSION = '0.6.3';
/** E2B's clients show it and send nothing back with it: which of their orchestrators holds the sandbox. */
export const CLIENT_ID = 'sandboxd';
/** What a create without `timeout` gets: E2B's clients document 5 minutes. */
export const DEFAULT_TIMEOUT_SECONDS = 300;

/** E2B's template names that differ from ours. */
const TEMPLATE_ALIASES: Record<string, string> = { 'code-interpreter-v1': 'code-interpreter', 'code-interpreter-beta': 'code-interpreter' };

/** One of our templates (name or id) for an E2B `templateID`: E2B's public names map to our built-ins. */
export function templateRef(templateId: string): string {
  return TEMPLATE_ALIASES[templateId] ?? templateId;
}

const Seconds = Type.Integer({ minimum: 0, maximum: 31_536_000 });
const Destinations = Type.Array(Type.String({ minLength: 1, maxLength: 300 }), { maxItems: 1000 });
/** What E2B's clients send as `network` (create) or the body of PUT /network. */
const Network = Type.Object(
  {
    allowOut: Type.Optional(Destinations),
    denyOut: Type.Optional(Destinations),
    allowPublicTraffic: Type.Optional(Type.Boolean()),
    maskRequestHost: Type.Optional(Type.String({ maxLength: 300 })),
    httpsPorts: Type.Optional(Type.Unknown()),
    egressProxy: Type.Optional(Type.Unknown()),
    rules: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: true },
);

/** A volume in E2B's create (`volumeMounts`): the client sends the volume's name; ours takes a name or an id. */
const E2bVolumeMount = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 80 }), path: Type.String({ minLength: 1, maxLength: 1024 }) },
  { additionalProperties: true },
);

export const E2bCreateBody = Type.Object(
  {
    templateID: Type.String({ minLength: 1, maxLength: 200 }),
    timeout: Type.Optional(Seconds),
    metadata: Type.Optional(Type.Union([Metadata, Type.Null()])),
    envVars: Type.Optional(Type.Union([EnvVars, Type.Null()])),
    secure: Type.Optional(Type.Boolean()),
    allow_internet_access: Type.Optional(Type.Boolean()),
    network: Type.Optional(Network),
    autoPause: Type.Optional(Type.Boolean()),
    autoPauseMemory: Type.Optional(Type.Boolean()),
    autoResume: Type.Optional(Type.Object({ enabled: Type.Boolean() }, { additionalProperties: true })),
    mcp: Type.Optional(Type.Unknown()),
    iam: Type.Optional(Type.Unknown()),
    volumeMounts: Type.Optional(Type.Union([Type.Array(E2bVolumeMount, { maxItems: MAX_VOLUMES_PER_SANDBOX }), Type.Null()])),
  },
  { additionalProperties: true },
);
export type E2bCreateBody = Static<typeof E2bCreateBody>;

export const E2bTimeoutBody = Type.Object({ timeout: Seconds }, { additionalProperties: true });
export const E2bConnectBody = Type.Object({ timeout: Type.Optional(Seconds), memory: Type.Optional(Type.Boolean()) }, { additionalProperties: true });
export const E2bResumeBody = Type.Object({ timeout: Type.Optional(Seconds), autoPause: Type.Optional(Type.Boolean()) }, { additionalProperties: true });
export const E2bPauseBody = Type.Object({ memory: Type.Optional(Type.Boolean()) }, { additionalProperties: true });
export const E2bRefreshBody = Type.Object({ duration: Type.Optional(Type.Integer({ minimum: 0, maximum: 3600 })) }, { additionalProperties: true });
export const E2bNetworkBody = Type.Object(
  { ...Network.properties, allow_internet_access: Type.Optional(Type.Boolean()) },
  { additionalProperties: true },
);
export type E2bNetworkBody = Static<typeof E2bNetworkBody>;

export const E2bForkBody = Type.Object({ timeout: Type.Optional(Seconds), count: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_FORKS })) }, { additionalProperties: true });
export type E2bForkBody = Static<typeof E2bForkBody>;

export const E2bListQuery = Type.Object({
  metadata: Type.Optional(Type.String({ maxLength: 8192 })),
  state: Type.Optional(Type.Union([Type.String({ maxLength: 100 }), Type.Array(Type.String({ maxLength: 100 }), { maxItems: 10 })])),
  template: Type.Optional(Type.String({ maxLength: 200 })),
  startedAfter: Type.Optional(Type.String({ maxLength: 64 })),
  order: Type.Optional(Type.String({ maxLength: 10 })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
  nextToken: Type.Optional(Type.String({ maxLength: 200 })),
});
export type E2bListQuery = Static<typeof E2bListQuery>;

/** `POST /sandboxes/{id}/snapshots`: an optional name, as ours (/v1 CreateSnapshotBody). */
export const E2bSnapshotBody = Type.Object({ ...CreateSnapshotBody.properties }, { additionalProperties: true });
export type E2bSnapshotBody = Static<typeof E2bSnapshotBody>;

export const E2bSnapshotListQuery = Type.Object({
  sandboxID: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
  nextToken: Type.Optional(Type.String({ maxLength: 200 })),
});
export type E2bSnapshotListQuery = Static<typeof E2bSnapshotListQuery>;

export const E2bTemplateParams = Type.Object({ templateID: Type.String({ minLength: 1, maxLength: 200 }) });
export type E2bTemplateParams = Static<typeof E2bTemplateParams>;

export const E2bMetricsQuery = Type.Object({ start: Type.Optional(Type.Integer({ minimum: 0 })), end: Type.Optional(Type.Integer({ minimum: 0 })) });

/** A timeout in seconds as ours: at least a second. */
function seconds(timeout: number): number {
  if (timeout < 1) throw new ServiceError('VALIDATION_ERROR', 'timeout must be at least 1 second');
  return timeout;
}

/**
 * E2B's egress rules as ours. E2B lets allowOut punch holes in denyOut; ours refuses what deny_out
 * names whatever allow_out says, and allow_out alone is an allow-list. So: "deny everything"
 * (0.0.0.0/0) with allowOut is our allow-list; a partial denyOut is our deny_out; holes in a
 * partial denyOut cannot be said in ours and are refused rather than widened or dropped.
 */
export function egressOf(n: Static<typeof Network> | undefined): { allow_out?: string[]; deny_out?: string[]; internet?: false } {
  if (!n) return {};
  for (const field of ['egressProxy', 'rules', 'httpsPorts'] as const) {
    if (n[field] !== undefined && n[field] !== null) throw new ServiceError('VALIDATION_ERROR', `network.${field} is not supported by this server`);
  }
  const allow = n.allowOut ?? [];
  const deny = n.denyOut ?? [];
  const denyAll = deny.some((d) => d === '0.0.0.0/0' || d === '::/0');
  if (denyAll) return allow.length ? { allow_out: allow, deny_out: [] } : { internet: false };
  if (allow.length && deny.length) {
    throw new ServiceError('VALIDATION_ERROR', 'network.allowOut as exceptions to a partial denyOut is not supported: deny 0.0.0.0/0 and list what is allowed, or list only what is denied');
  }
  return { allow_out: [], deny_out: deny };
}

/** An E2B create as ours. */
export function createBodyOf(b: E2bCreateBody): CreateSandboxBody {
  for (const field of ['mcp', 'iam'] as const) {
    if (b[field] !== undefined && b[field] !== null) throw new ServiceError('VALIDATION_ERROR', `${field} is not supported by this server`);
  }
  const egress = egressOf(b.network);
  const internet = b.allow_internet_access !== false && egress.internet !== false;
  if (b.autoResume?.enabled && !b.autoPause) throw new ServiceError('VALIDATION_ERROR', 'autoResume needs autoPause: a sandbox that is killed on its timeout has nothing to resume');
  return {
    template_name: templateRef(b.templateID),
    timeout_seconds: seconds(b.timeout ?? DEFAULT_TIMEOUT_SECONDS),
    internet_access: internet,
    ...(internet && egress.allow_out ? { allow_out: egress.allow_out, deny_out: egress.deny_out } : {}),
    ...(b.envVars ? { env_vars: b.envVars } : {}),
    ...(b.metadata ? { metadata: b.metadata } : {}),
    ...(b.autoPause ? { on_timeout: 'pause' as const } : {}),
    ...(b.autoResume?.enabled ? { auto_resume: true } : {}),
    // Read-write, as E2B's are; the volume service checks names, paths and overlaps (400, 404).
    ...(b.volumeMounts?.length ? { volumes: b.volumeMounts.map((m) => ({ name: m.name, path: m.path })) } : {}),
  };
}

/** A fork as ours: the source's settings but for the timeout. */
export function forkBodyOf(b: E2bForkBody): ForkBody {
  return { count: b.count ?? 1, ...(b.timeout !== undefined ? { timeout_seconds: seconds(b.timeout) } : {}) };
}

/** PUT /network as ours. */
export function networkBodyOf(b: E2bNetworkBody): SetNetworkBody {
  const egress = egressOf(b);
  const internet = b.allow_internet_access !== false && egress.internet !== false;
  return { internet_access: internet, ...(internet ? { allow_out: egress.allow_out ?? [], deny_out: egress.deny_out ?? [] } : {}) };
}

/** `?metadata=` as the clients send it: URL-encoded `k=v&k2=v2`, each key and value encoded once more. */
export function metadataFilter(q: string | undefined): Array<[string, string]> {
  if (!q) return [];
  const out: Array<[string, string]> = [];
  try {
    for (const [k, v] of new URLSearchParams(q)) out.push([decodeURIComponent(k), decodeURIComponent(v)]);
  } catch {
    throw new ServiceError('VALIDATION_ERROR', 'metadata must be URL-encoded key=value pairs joined by &');
  }
  if (out.length > 64) throw new ServiceError('VALIDATION_ERROR', 'metadata: at most 64 pairs');
  return out;
}

export type E2bState = 'running' | 'paused';

/** `?state=` (`running,paused` or repeated) as a set; none: both. */
export function stateFilter(q: string | string[] | undefined): Set<E2bState> {
  const all = (Array.isArray(q) ? q : q === undefined ? [] : [q]).flatMap((s) => s.split(',')).map((s) => s.trim()).filter(Boolean);
  if (all.length === 0) return new Set(['running', 'paused']);
  for (const s of all) if (s !== 'running' && s !== 'paused') throw new ServiceError('VALIDATION_ERROR', 'state must be running or paused');
  return new Set(all as E2bState[]);
}

/** Ours as E2B's two states: a stopped sandbox (files kept, no processes) is E2B's paused without memory. */
export function stateOf(sb: Sandbox): E2bState {
  return sb.status === 'paused' || sb.status === 'stopped' ? 'paused' : 'running';
}

/** A sandbox in `GET /v2/sandboxes` (and what get adds to). */
export function listedOf(sb: Sandbox) {
  return {
    sandboxID: sb.id,
    templateID: sb.template_id,
    alias: sb.template_name,
    clientID: CLIENT_ID,
    startedAt: sb.created_at,
    endAt: sb.expires_at,
    cpuCount: sb.resources.vcpu,
    memoryMB: sb.resources.memory_mb,
    diskSizeMB: sb.resources.disk_gb * 1024,
    metadata: sb.metadata ?? {},
    state: stateOf(sb),
    envdVersion: ENVD_VERSION,
    volumeMounts: (sb.volumes ?? []).map((v) => ({ name: v.name, path: v.path })),
  };
}

/** `GET /sandboxes/{id}`. */
export function detailOf(sb: Sandbox, domain: string | null) {
  const allow = sb.network?.allow_out ?? [];
  return {
    ...listedOf(sb),
    domain,
    allowInternetAccess: sb.internet_access,
    // An allow-list of ours is E2B's "deny everything but".
    network: { allowOut: allow, denyOut: allow.length ? ['0.0.0.0/0'] : (sb.network?.deny_out ?? []) },
    lifecycle: { onTimeout: sb.on_timeout === 'pause' ? 'pause' : 'kill', autoResume: sb.auto_resume ?? false },
  };
}

/** What create, connect and resume answer: what a client needs to reach the sandbox. */
export function connectedOf(sb: Sandbox, accessToken: string, domain: string | null) {
  return {
    sandboxID: sb.id,
    templateID: sb.template_id,
    alias: sb.template_name,
    clientID: CLIENT_ID,
    envdVersion: ENVD_VERSION,
    envdAccessToken: accessToken,
    // The code interpreter's client sends this one (not the other) to the data plane: the same token.
    trafficAccessToken: accessToken,
    domain,
  };
}

/** Whether an E2B `templateID` is one of our snapshot ids (services/snapshots: `snap_` and 24 hex digits), which no template is. */
export function isSnapshotId(id: string): boolean {
  return /^snap_[0-9a-f]{24}$/.test(id);
}

/** A create (createBodyOf) as a create from snapshot `snapshotId`: the snapshot brings its template. */
export function fromSnapshot(body: CreateSandboxBody, snapshotId: string): CreateSandboxBody {
  const { template_name: _template, template_id: _id, ...rest } = body;
  return { ...rest, snapshot_id: snapshotId };
}

/** A snapshot as E2B's clients read it: its id (what `Sandbox.create` takes) and its name, if it has one. */
export function snapshotInfoOf(snap: { id: string; name: string | null }) {
  return { snapshotID: snap.id, names: snap.name ? [snap.name] : [] };
}

/**
 * What `Volume.create(name)` gets when it sends only a name (E2B's volumes have no size; ours are
 * a filesystem of a fixed size, a hard limit counted in max_total_disk_gb): the /v1 API takes any.
 */
export const E2B_VOLUME_SIZE_GB = 10;

export const E2bVolumeBody = Type.Object({ name: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: true });
export type E2bVolumeBody = Static<typeof E2bVolumeBody>;
export const E2bVolumeParams = Type.Object({ volumeID: Type.String({ minLength: 1, maxLength: 200 }) });
export type E2bVolumeParams = Static<typeof E2bVolumeParams>;

/** A volume in `GET /volumes`: `volumeID` is our id (vol-...). */
export function volumeInfoOf(v: { id: string; name: string }) {
  return { volumeID: v.id, name: v.name };
}

/**
 * A volume as create and get answer it. `token` is for E2B's volume content API (files of a volume
 * without a sandbox), which we do not serve: it is empty, so the client sends no credential of
 * ours anywhere with those calls (it adds its Authorization header only for a token that is not
 * empty). No `domain`: the client's own default, as E2B answers outside its custom clusters.
 */
export function volumeAndTokenOf(v: { id: string; name: string }) {
  return { ...volumeInfoOf(v), token: '' };
}
