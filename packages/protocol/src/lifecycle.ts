import { Type, type Static, type TSchema } from '@sinclair/typebox';

/** Shapes of the lifecycle interface (`/v1/...`): service-spec.md plus api-decisions.md §2. */

export const SANDBOX_STATUSES = ['running', 'paused', 'stopped'] as const;
export type SandboxStatus = (typeof SANDBOX_STATUSES)[number] | 'deleted';

export const Resources = Type.Object({
  vcpu: Type.Integer(),
  memory_mb: Type.Integer(),
  disk_gb: Type.Integer(),
  disk_mb: Type.Optional(Type.Integer()),
});
export type Resources = Static<typeof Resources>;

/**
 * Environment variables as every endpoint takes them: names without '=' or NUL, values without NUL
 * (the agent refuses the same; a create that let one through would fail every later execution).
 */
export const EnvVars = Type.Record(Type.String({ pattern: '^[^=\\u0000]+$' }), Type.String({ pattern: '^[^\\u0000]*$' }), {
  additionalProperties: false,
});

/** Labels a client sets at create and filters its list by (`GET /e2b/v2/sandboxes?metadata=`). */
export const Metadata = Type.Record(Type.String({ minLength: 1, maxLength: 128, pattern: '^[^\\u0000]+$' }), Type.String({ maxLength: 1024, pattern: '^[^\\u0000]*$' }), {
  additionalProperties: false,
  maxProperties: 64,
  description: 'string labels, at most 64 (keys up to 128 characters, values up to 1024)',
});
export type Metadata = Static<typeof Metadata>;

const EgressEntries = (what: string) =>
  Type.Array(Type.String({ minLength: 1, maxLength: 300 }), {
    maxItems: 1000,
    description: `${what}: IPv4 addresses (1.2.3.4), IPv4 CIDRs (10.0.0.0/8), domains (example.com) or wildcard domains (*.example.com, any name below it)`,
  });

/** A sandbox's egress policy, as create, `PUT /network` and every sandbox object carry it. */
export const NetworkPolicy = Type.Object({
  internet_access: Type.Boolean({ description: 'false: nothing leaves the sandbox, not even DNS' }),
  allow_out: EgressEntries('when not empty, the only destinations allowed (domains: HTTP on port 80 and HTTPS on 443, judged by the Host header and the TLS SNI)'),
  deny_out: EgressEntries('refused, whatever allow_out says'),
});
export type NetworkPolicy = Static<typeof NetworkPolicy>;

export const SetNetworkBody = Type.Object(
  {
    internet_access: Type.Optional(Type.Boolean({ description: 'default true' })),
    allow_out: Type.Optional(EgressEntries('default none: everything not denied is allowed')),
    deny_out: Type.Optional(EgressEntries('default none')),
  },
  { additionalProperties: false },
);
export type SetNetworkBody = Static<typeof SetNetworkBody>;

export const NetworkPolicyResult = Type.Object({ ...NetworkPolicy.properties, request_id: Type.Optional(Type.String()) });

/** Volumes (issue 32): a filesystem of its own that outlives sandboxes and that several share. */
export const VOLUME_NAME_PATTERN = '^[a-z0-9][a-z0-9._-]{0,62}$';
export const MAX_VOLUMES_PER_SANDBOX = 16;

export const VolumeMount = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 80, description: "the volume's name or id (one of the organization's)" }),
    path: Type.String({ minLength: 1, maxLength: 1024, description: "where it appears inside the sandbox: absolute, normalized, not '/' and not under /proc, /sys, /dev or /.sb" }),
    read_only: Type.Optional(Type.Boolean({ description: 'default false' })),
  },
  { additionalProperties: false },
);
export type VolumeMount = Static<typeof VolumeMount>;
const VolumeMounts = Type.Array(VolumeMount, { maxItems: MAX_VOLUMES_PER_SANDBOX, description: 'volumes to mount, each at its path' });

/** A volume as a sandbox's answer lists it. */
export const SandboxVolume = Type.Object({ volume_id: Type.String(), name: Type.String(), path: Type.String(), read_only: Type.Boolean() });
export type SandboxVolume = Static<typeof SandboxVolume>;

export const CreateVolumeBody = Type.Object(
  {
    name: Type.String({ pattern: VOLUME_NAME_PATTERN, description: 'unique in the organization: lowercase letters, digits, ".", "_" and "-", up to 63' }),
    size_gb: Type.Integer({ minimum: 1, maximum: 16384, description: 'its size: a hard limit (ENOSPC inside past it); counted in max_total_disk_gb' }),
  },
  { additionalProperties: false },
);
export type CreateVolumeBody = Static<typeof CreateVolumeBody>;

export const Volume = Type.Object({
  object: Type.Literal('volume'),
  id: Type.String(),
  name: Type.String(),
  organization_id: Type.String(),
  size_gb: Type.Integer(),
  used_bytes: Type.Optional(Type.Integer({ description: 'what its filesystem holds (GET of one volume)' })),
  mounted_by: Type.Array(Type.String(), { description: 'the sandboxes (not deleted) that mount it' }),
  node: Type.Optional(Type.String({ description: 'the machine it lives on' })),
  created_at: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type Volume = Static<typeof Volume>;

export const VolumeList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Volume),
  url: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type VolumeList = Static<typeof VolumeList>;

export const DeleteVolumeQuery = Type.Object({
  force: Type.Optional(Type.Boolean({ description: 'delete it even while sandboxes mount it: those sandboxes are deleted first' })),
});
export type DeleteVolumeQuery = Static<typeof DeleteVolumeQuery>;

export const CreateSandboxBody = Type.Object(
  {
    template_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    template_name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    snapshot_id: Type.Optional(
      Type.String({ minLength: 1, maxLength: 200, description: 'create from a snapshot instead of a template: its filesystem, environment and template settings' }),
    ),
    region: Type.Optional(Type.String({ maxLength: 64 })),
    timeout_seconds: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 31_536_000 }), Type.Null()])),
    internet_access: Type.Optional(Type.Boolean()),
    env_vars: Type.Optional(EnvVars),
    on_timeout: Type.Optional(
      Type.Union([Type.Literal('delete'), Type.Literal('pause')], {
        description: 'what the deadline does: delete the sandbox (default), or pause it (then it is kept paused for the retention time, and deleted after)',
      }),
    ),
    idle_timeout_seconds: Type.Optional(
      Type.Union([Type.Integer({ minimum: 1, maximum: 31_536_000 }), Type.Null()], {
        description: 'pause the sandbox after this long with no lifecycle call about it and no request to its public_host (none in flight, no WebSocket open)',
      }),
    ),
    auto_resume: Type.Optional(Type.Boolean({ description: 'a request to its public_host while it is paused resumes it, and is then served' })),
    allow_out: Type.Optional(EgressEntries('with internet access: when not empty, the only destinations allowed')),
    deny_out: Type.Optional(EgressEntries('with internet access: refused, whatever allow_out says')),
    metadata: Type.Optional(Metadata),
    volumes: Type.Optional(VolumeMounts),
  },
  { additionalProperties: true },
);
export type CreateSandboxBody = Static<typeof CreateSandboxBody>;

export const Sandbox = Type.Object({
  object: Type.Literal('sandbox'),
  id: Type.String(),
  organization_id: Type.String(),
  status: Type.String(),
  public_host: Type.String(),
  direct_url: Type.String(),
  template_name: Type.String(),
  template_id: Type.String(),
  region: Type.String(),
  internet_access: Type.Boolean(),
  timeout_seconds: Type.Union([Type.Integer(), Type.Null()]),
  expires_at: Type.Union([Type.String(), Type.Null()]),
  on_timeout: Type.Optional(Type.Union([Type.Literal('delete'), Type.Literal('pause')])),
  idle_timeout_seconds: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
  auto_resume: Type.Optional(Type.Boolean()),
  network: Type.Optional(NetworkPolicy),
  metadata: Type.Optional(Metadata),
  volumes: Type.Optional(Type.Array(SandboxVolume, { description: 'the volumes it mounts (shared, not copies)' })),
  created_at: Type.String(),
  updated_at: Type.String(),
  resources: Resources,
  /**
   * False while the node that holds the sandbox is away (its calls answer 503 NODE_UNAVAILABLE
   * until it is back); one machine's is always there.
   */
  available: Type.Optional(Type.Boolean()),
  node: Type.Optional(Type.String({ description: "the node that holds it (on one machine, the machine's host name): in answers to the operator's keys only" })),
  auth_token: Type.Optional(Type.String()),
  token_expires_at: Type.Optional(Type.String()),
  request_id: Type.Optional(Type.String()),
});
export type Sandbox = Static<typeof Sandbox>;

export const ListSandboxesQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
  status: Type.Optional(Type.String()),
  template: Type.Optional(Type.String()),
  region: Type.Optional(Type.String()),
  cursor: Type.Optional(Type.String({ maxLength: 200 })),
});
export type ListSandboxesQuery = Static<typeof ListSandboxesQuery>;

export const SandboxList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Sandbox),
  has_more: Type.Boolean(),
  next_cursor: Type.Union([Type.String(), Type.Null()]),
  url: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type SandboxList = Static<typeof SandboxList>;

export const SandboxActionResult = Type.Object({
  id: Type.String(),
  status: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type SandboxActionResult = Static<typeof SandboxActionResult>;

export const SetTimeoutBody = Type.Object({
  timeout_seconds: Type.Integer({ minimum: 1, maximum: 31_536_000 }),
});
export const SetTimeoutResult = Type.Object({
  id: Type.String(),
  timeout_seconds: Type.Integer(),
  expires_at: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type SetTimeoutResult = Static<typeof SetTimeoutResult>;

export const TokenResult = Type.Object({
  id: Type.String(),
  auth_token: Type.String(),
  token_expires_at: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type TokenResult = Static<typeof TokenResult>;

export const TemplateResources = Type.Object({
  vcpu: Type.Integer(),
  memory_mb: Type.Integer(),
  disk_gb: Type.Integer(),
});

export const TemplateSummary = Type.Object({
  object: Type.Literal('template'),
  id: Type.String(),
  name: Type.String(),
  display_name: Type.String(),
  description: Type.String(),
  category: Type.String(),
  language: Type.String(),
  default_resources: TemplateResources,
  status: Type.String(),
  is_active: Type.Boolean(),
  is_public: Type.Boolean(),
  build_id: Type.Union([Type.String(), Type.Null()]),
  features: Type.Array(Type.String()),
  tags: Type.Array(Type.String()),
  created_at: Type.String(),
  updated_at: Type.String(),
});
export type TemplateSummary = Static<typeof TemplateSummary>;

/** A template as `GET /v1/templates/{name_or_id}` (and each item of the list) renders it: the summary and how it is made. */
export const Template = Type.Composite([
  TemplateSummary,
  Type.Object({
    env: Type.Record(Type.String(), Type.String(), { description: 'variables every sandbox of the template starts with' }),
    workdir: Type.Union([Type.String(), Type.Null()], { description: 'the working directory of its sandboxes' }),
    layers: Type.Array(Type.String(), { description: 'its filesystem layers (sha256 hex ids), top-most first' }),
    error_message: Type.Union([Type.String(), Type.Null()], { description: 'why its last build failed' }),
    progress: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 100 }), Type.Null()], { description: 'while a built-in template builds: percent done' })),
    request_id: Type.Optional(Type.String()),
  }),
]);
export type Template = Static<typeof Template>;

export const TemplateListQuery = Type.Object({
  category: Type.Optional(Type.String()),
  language: Type.Optional(Type.String()),
});

export const TemplateList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Template),
  request_id: Type.Optional(Type.String()),
});

export const HealthResult = Type.Object({ status: Type.String(), version: Type.String() });

/** GET /v1/sandboxes/{id}/metrics: one sandbox's resource use now (counters since it last started). */
export const SandboxMetrics = Type.Object({
  sandbox_id: Type.String(),
  status: Type.String(),
  timestamp: Type.String(),
  cpu: Type.Object({ usage_seconds: Type.Number({ description: 'CPU time used since the sandbox last started' }), vcpu: Type.Number() }),
  memory: Type.Object({ used_bytes: Type.Number(), limit_bytes: Type.Number() }),
  disk: Type.Object({ used_bytes: Type.Number(), total_bytes: Type.Number() }),
  network: Type.Object({
    rx_bytes: Type.Number({ description: 'received by the sandbox since it last started' }),
    tx_bytes: Type.Number({ description: 'sent by the sandbox since it last started' }),
  }),
  pids: Type.Number(),
  oom_kills: Type.Number(),
  egress_denied: Type.Optional(Type.Number({ description: 'connections (and datagrams) its egress policy refused since the daemon started' })),
  request_id: Type.Optional(Type.String()),
});
export type SandboxMetrics = Static<typeof SandboxMetrics>;

/** `GET /v1/sandboxes/{id}/ports`: what listens inside the sandbox, from the kernel's tables. */
export const SandboxPorts = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(
    Type.Object({
      port: Type.Integer({ minimum: 1, maximum: 65535 }),
      addresses: Type.Array(Type.String(), { description: 'where it listens: 0.0.0.0 or :: for every address, 127.0.0.1 or ::1 for loopback only' }),
      loopback_only: Type.Boolean({ description: 'reachable only from inside the sandbox (and through a preview URL)' }),
    }),
  ),
  request_id: Type.Optional(Type.String()),
});
export type SandboxPorts = Static<typeof SandboxPorts>;

/** `PUT /v1/sandboxes/{id}/ports/{port}`: open a preview to anyone who has its URL, or close it to them. */
export const SetPreviewBody = Type.Object(
  { public: Type.Boolean({ description: 'true: anyone with the URL; false: the sandbox token or a signed link' }) },
  { additionalProperties: false },
);
export type SetPreviewBody = Static<typeof SetPreviewBody>;

/** `GET /v1/sandboxes/{id}/ports/{port}`: the preview URL of a port inside the sandbox. */
export const SandboxPreview = Type.Object({
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
  url: Type.String({ description: 'where the port is served: http://{port}-{id}.{domain} in host mode, a port of the gateway in port mode' }),
  public: Type.Boolean({ description: 'open to anyone with the URL; otherwise a request takes the X-Sandboxd-Token header (the sandbox auth_token) or the cookie a signed link sets' }),
  signed_url: Type.Optional(Type.String({ description: 'private ports: a short-lived link that opens the preview in a browser (it sets a session cookie for this port, 24 h)' })),
  signed_url_expires_at: Type.Optional(Type.String({ format: 'date-time' })),
  request_id: Type.Optional(Type.String()),
});
export type SandboxPreview = Static<typeof SandboxPreview>;

export const SandboxEvent = Type.Object({
  id: Type.String(),
  status: Type.String(),
  at: Type.String(),
  reason: Type.Optional(Type.String()),
});

/**
 * `POST /v1/events/token`: a short-lived token that opens the events streams with `?token=` (for
 * browsers' EventSource, which cannot send headers). API keys are never accepted in a URL.
 */
export const EventsTokenBody = Type.Object(
  { sandbox_id: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'limit the token to this sandbox\'s events' })) },
  { additionalProperties: true },
);
export type EventsTokenBody = Static<typeof EventsTokenBody>;

export const EventsTokenResult = Type.Object({
  token: Type.String(),
  expires_at: Type.String(),
  sandbox_id: Type.Union([Type.String(), Type.Null()]),
  request_id: Type.Optional(Type.String()),
});
export type EventsTokenResult = Static<typeof EventsTokenResult>;

export const EventsQuery = Type.Object({
  token: Type.Optional(Type.String({ maxLength: 4096, description: 'an events token from POST /v1/events/token (never an API key)' })),
});
export type EventsQuery = Static<typeof EventsQuery>;

/** `GET /v1/sandboxes/{id}/metrics/stream`: one sample of SandboxMetrics every `interval` seconds. */
export const MetricsStreamQuery = Type.Object({
  token: Type.Optional(Type.String({ maxLength: 4096, description: 'an events token from POST /v1/events/token (never an API key)' })),
  interval: Type.Optional(Type.Integer({ minimum: 1, maximum: 60, default: 2, description: 'seconds between samples' })),
});
export type MetricsStreamQuery = Static<typeof MetricsStreamQuery>;

export const SANDBOX_EVENT_KINDS = ['created', 'paused', 'resumed', 'stopped', 'started', 'deleted', 'expired', 'oom_killed'] as const;
export type SandboxEventKind = (typeof SANDBOX_EVENT_KINDS)[number];

/** `GET /v1/account`: who the calling key is. */
export const AccountInfo = Type.Object({
  organization: Type.Object({ id: Type.String(), name: Type.String() }),
  key: Type.Object({ id: Type.String(), name: Type.String(), scopes: Type.Array(Type.String()) }),
  operator: Type.Boolean({ description: "whether the key may use the admin API (a key of the operator's organization with the admin scope)" }),
  request_id: Type.Optional(Type.String()),
});
export type AccountInfo = Static<typeof AccountInfo>;

export const API_SCOPES = ['sandboxes:read', 'sandboxes:write', 'templates:read', 'templates:write', 'metrics:read', 'admin'] as const;
export type ApiScope = (typeof API_SCOPES)[number];

/**
 * Scopes a key gets when none are named: its own organization's sandboxes and templates. Not
 * `admin`, nor `metrics:read`: /metrics describes the whole node, every organization's templates
 * and counts.
 */
export const DEFAULT_KEY_SCOPES: readonly ApiScope[] = API_SCOPES.filter((s) => s !== 'admin' && s !== 'metrics:read');

// The admin API (/v1/admin): organizations and API keys, for keys of the operator's organization
// (`default`) that hold the `admin` scope.
const ORG_NAME = Type.String({
  pattern: '^(?![oO][rR][gG]_)[A-Za-z0-9][A-Za-z0-9._-]{0,62}$',
  description: '1-63 letters, digits, ".", "_" or "-", starting with a letter or digit; not starting with "org_" (ids do)',
});
export const CreateOrgBody = Type.Object({ name: ORG_NAME });
export type CreateOrgBody = Static<typeof CreateOrgBody>;
export const CreateKeyBody = Type.Object({
  org: Type.String({ minLength: 1, maxLength: 100, description: "the organization's name or id" }),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'a label for the key' })),
  scopes: Type.Optional(
    Type.Array(Type.Union(API_SCOPES.map((s) => Type.Literal(s))), {
      minItems: 1,
      uniqueItems: true,
      description: 'default: sandboxes:read, sandboxes:write, templates:read, templates:write',
    }),
  ),
  format: Type.Optional(
    Type.Union([Type.Literal('sandboxd'), Type.Literal('e2b')], {
      description: "the secret's shape: `sbd_...` (default), or `e2b_` and 40 hex digits, the shape E2B's clients accept without E2B_VALIDATE_API_KEY=false (the same key otherwise)",
    }),
  ),
});
export type CreateKeyBody = Static<typeof CreateKeyBody>;
export const KeyIdParams = Type.Object({ id: Type.String({ pattern: '^key_[0-9a-f]{16}$' }) });
export type KeyIdParams = Static<typeof KeyIdParams>;
export const AdminKeysQuery = Type.Object({ org: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) });
export type AdminKeysQuery = Static<typeof AdminKeysQuery>;

// Answers of the routes that render their own objects (no response schema on the route: these
// describe them for the OpenAPI document, and http/openapi.test checks real answers against them).
const nullable = <T extends TSchema>(t: T, description?: string) => Type.Union([t, Type.Null()], description ? { description } : {});

/** An organization, as the admin API shows it. */
export const Organization = Type.Object({
  id: Type.String({ description: 'digits only (a decimal number of up to 25 digits); the admin API and CLI accept it, the org_ form and the name' }),
  name: Type.String(),
  created_at: Type.String(),
  request_id: Type.Optional(Type.String()),
});
export type Organization = Static<typeof Organization>;
/** `DELETE /v1/admin/orgs/{nameOrId}`: the organization, and how many of what it made went with it. */
export const DeletedOrganization = Type.Object({
  id: Type.String(),
  name: Type.String(),
  created_at: Type.String(),
  status: Type.Literal('deleted'),
  deleted: Type.Object({
    keys: Type.Integer({ minimum: 0 }),
    sandboxes: Type.Integer({ minimum: 0 }),
    snapshots: Type.Integer({ minimum: 0 }),
    templates: Type.Integer({ minimum: 0 }),
    uploads: Type.Integer({ minimum: 0 }),
  }),
  request_id: Type.Optional(Type.String()),
});
export const OrganizationList = Type.Object({ object: Type.Literal('list'), data: Type.Array(Organization), request_id: Type.Optional(Type.String()) });

/** An API key, as the admin API shows it: never its secret or its hash. */
export const ApiKey = Type.Object({
  id: Type.String({ description: 'key_ and 16 hex digits' }),
  org_id: Type.String(),
  org: nullable(Type.String(), "the organization's name"),
  name: Type.String(),
  scopes: Type.Array(Type.String({ description: API_SCOPES.join(', ') })),
  created_at: Type.String(),
  revoked_at: nullable(Type.String()),
  last_used_at: nullable(Type.String()),
  request_id: Type.Optional(Type.String()),
});
export type ApiKey = Static<typeof ApiKey>;
export const ApiKeyList = Type.Object({ object: Type.Literal('list'), data: Type.Array(ApiKey), request_id: Type.Optional(Type.String()) });
/** `POST /v1/admin/keys` (201): the key and, in this answer only, its secret. */
export const CreatedApiKey = Type.Composite([ApiKey, Type.Object({ secret: Type.String({ description: 'the API key itself (sbd_...): shown once, stored hashed' }) })]);

/** A node of the service, as the admin API shows it (`GET /v1/admin/nodes`). */
export const AdminNode = Type.Object({
  id: Type.String(),
  status: Type.Union([Type.Literal('active'), Type.Literal('cordoned'), Type.Literal('draining')], { description: 'what the operator wants of it: active takes new sandboxes; cordoned and draining take none' }),
  up: Type.Boolean({ description: "whether it serves now: its lease runs (it heartbeats); the all-in-one's machine always" }),
  in_process: Type.Boolean({ description: "the all-in-one daemon's own machine, served in its process: no lease, no URL" }),
  url: nullable(Type.String(), 'its node API (null: in process)'),
  lease_expires_at: nullable(Type.String(), 'past this it is taken as lost'),
  heartbeat_at: nullable(Type.String()),
  heartbeat_age_seconds: nullable(Type.Integer()),
  registered_at: nullable(Type.String()),
  capacity: Type.Object({
    vcpu: Type.Number(),
    memory_mb: Type.Number(),
    disk_gb: Type.Number(),
    max_sandboxes: nullable(Type.Integer(), 'null: no bound of its own (one machine: the organizations\' quotas are the bound)'),
  }),
  committed: Type.Object(
    {
      sandboxes: Type.Integer({ description: 'active and stopped' }),
      active: Type.Integer(),
      stopped: Type.Integer(),
      vcpu: Type.Number(),
      memory_mb: Type.Number(),
      disk_gb: Type.Number(),
    },
    { description: "what the store's sandboxes on it hold (vcpu and memory: the active ones'; disk: every one's)" },
  ),
  reported: Type.Object(
    {
      sandboxes: Type.Integer({ description: 'every sandbox its runtime holds, ready ones of its warm pool included' }),
      warm_ready: Type.Integer(),
      orphans: nullable(Type.Integer(), 'sandboxes it holds that no record and no control replica owns (it destroys each after its grace); null: not counted'),
    },
    { description: 'what it said at its last heartbeat (one machine: now)' },
  ),
});
export type AdminNode = Static<typeof AdminNode>;
export const AdminNodeList = Type.Object({
  object: Type.Literal('list'),
  mode: Type.Union([Type.Literal('cluster'), Type.Literal('all-in-one')], { description: "cluster: the nodes of control's registry; all-in-one: the one machine" }),
  data: Type.Array(AdminNode),
  request_id: Type.Optional(Type.String()),
});
export type AdminNodeList = Static<typeof AdminNodeList>;

/** `POST /v1/admin/nodes/{id}/drain`: the node of a cluster, by its id. */
export const NodeDrainParams = Type.Object({ id: Type.String({ pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', description: "the node's id (SANDBOXD_NODE_ID)" }) });
export type NodeDrainParams = Static<typeof NodeDrainParams>;
export const NodeDrainBody = Type.Object({
  stop_running: Type.Optional(
    Type.Boolean({ description: 'stop its running sandboxes first (as their owners would) and move them stopped; default false: they are listed and left to end by their deadlines or their owners' }),
  ),
});
export type NodeDrainBody = Static<typeof NodeDrainBody>;
const DrainedSandbox = { id: Type.String(), organization_id: Type.String() };
/** What one drain call did: the node takes nothing new, and what it could move in the call's time went to other nodes. */
export const NodeDrainResult = Type.Object({
  object: Type.Literal('node_drain'),
  node_id: Type.String(),
  status: Type.Literal('draining'),
  moved: Type.Array(Type.Object({ ...DrainedSandbox, status: Type.Union([Type.Literal('stopped'), Type.Literal('paused')]), node_id: Type.String({ description: 'the node it is on now' }) }), {
    description: 'moved by this call, in the state it had (a paused one keeps its files, not its processes)',
  }),
  failed: Type.Array(Type.Object({ ...DrainedSandbox, status: Type.String(), error: Type.Object({ code: Type.String(), message: Type.String() }) }), {
    description: 'not moved by this call: each is where it was, as it was; a later call tries again',
  }),
  running: Type.Array(Type.Object({ ...DrainedSandbox, expires_at: nullable(Type.String()) }), { description: 'running on the node, left to end by their deadlines or their owners' }),
  left: Type.Integer({ description: 'stopped and paused sandboxes this call had no time for: call again' }),
  drained: Type.Boolean({ description: 'no sandbox is left on the node' }),
  request_id: Type.Optional(Type.String()),
});
export type NodeDrainResult = Static<typeof NodeDrainResult>;

const Usage = Type.Object({ used: Type.Integer(), limit: nullable(Type.Integer(), 'null: no limit') });
/** `GET /v1/account/limits`: every limit of the caller's organization (null: none) and what it holds against each. */
export const AccountLimitsResult = Type.Object({
  organization_id: Type.String(),
  concurrent_sandboxes: Type.Object({
    used: Type.Integer({ description: 'active sandboxes (being created, running or paused)' }),
    limit: nullable(Type.Integer(), 'null: no limit'),
    stopped: Type.Integer({ description: 'stopped sandboxes (they hold disk, not a place)' }),
  }),
  committed_memory_mb: Usage,
  committed_disk_gb: Usage,
  snapshot_storage_mb: Type.Optional(Type.Object({ used: Type.Integer({ description: "what the organization's snapshots store (their size, rounded up)" }), limit: nullable(Type.Integer(), 'null: no limit') })),
  storage: Type.Optional(
    Type.Object(
      {
        used_gb: Type.Number({ description: 'what max_total_disk_gb holds the organization to: sandbox_disks_gb plus what its snapshots, templates and uploads store' }),
        limit_gb: nullable(Type.Integer(), 'max_total_disk_gb (null: no limit)'),
        sandbox_disks_gb: Type.Integer({ description: 'disk_gb of its sandboxes not deleted and of its running builds: what their disks may grow to' }),
        sandbox_disks_held_bytes: Type.Integer({ description: "what its sandboxes' disks hold now (0 where the disks are on other nodes)" }),
        snapshots_bytes: Type.Integer({ description: 'its snapshot layers, as snapshot_storage_mb counts them' }),
        templates_bytes: Type.Integer({ description: "layers its templates' steps made (not shared bases)" }),
        uploads_bytes: Type.Integer({ description: 'files its uploads reference, each content once, and uploads under way' }),
      },
      { description: 'everything the organization causes to be stored' },
    ),
  ),
  per_sandbox: Type.Object({ vcpu: nullable(Type.Integer()), memory_mb: nullable(Type.Integer()), disk_gb: nullable(Type.Integer()) }),
  sandbox_timeout_seconds: Type.Object({
    default: nullable(Type.Integer(), 'what a create without timeout_seconds gets (null: none)'),
    max: nullable(Type.Integer()),
  }),
  template_builds: nullable(Type.Object({ per_hour: Usage, per_day: Usage, running: Type.Integer() }), 'null: template builds are off'),
  rate_limits: Type.Object({ sandbox_creates_per_minute: Type.Object({ limit: Type.Integer(), used: Type.Integer() }) }),
  request_id: Type.Optional(Type.String()),
});

/** `DELETE /v1/templates/{name_or_id}`. */
export const DeletedResult = Type.Object({ id: Type.String(), status: Type.Literal('deleted'), request_id: Type.Optional(Type.String()) });

const BUILD_STATUS = Type.String({ description: 'building, active or failed' });
const BuildStep = Type.Union(
  [
    Type.Object({ type: Type.Literal('from'), image: Type.String({ description: 'e.g. python:3.11, node:20, ubuntu:22.04, debian:11, alpine:3.18' }) }),
    Type.Object({ type: Type.Literal('apt'), packages: Type.Array(Type.String(), { minItems: 1 }) }),
    Type.Object({ type: Type.Literal('run'), command: Type.String() }),
    Type.Object({
      type: Type.Literal('copy'),
      dest: Type.String({ description: 'absolute path in the image' }),
      src: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())], { description: 'paths given at upload-link' })),
      file_id: Type.Optional(Type.String()),
      file_ids: Type.Optional(Type.Array(Type.String())),
    }),
    Type.Object({ type: Type.Literal('env'), key: Type.String(), value: Type.String() }),
    Type.Object({ type: Type.Literal('workdir'), path: Type.String() }),
    Type.Object({ type: Type.Union([Type.Literal('RUN'), Type.Literal('ENV'), Type.Literal('WORKDIR')]), args: Type.Array(Type.String()) }),
    Type.Object({
      type: Type.Literal('COPY'),
      args: Type.Array(Type.String(), { description: '["src1,src2", "/dest"]' }),
      filesHash: Type.String({ description: 'the files_hash of the tarball uploaded for this step' }),
      owner: Type.Optional(Type.String()),
      permissions: Type.Optional(Type.String()),
    }),
  ],
  { description: 'one step; the first is a from step (or from_image is given)' },
);
/**
 * `POST /v1/templates/build`, both shapes real clients send (api-decisions.md §5). The route checks
 * it itself (a bad one is INVALID_TEMPLATE_DEFINITION): this schema is for the document.
 */
export const TemplateBuildBody = Type.Object(
  {
    alias: Type.Optional(Type.String({ description: 'the template name: 1-63 lowercase letters, digits, ".", "_" or "-"; required, or given as name' })),
    name: Type.Optional(Type.String({ description: 'alias, as newer clients spell it' })),
    cpu: Type.Optional(Type.Integer({ minimum: 1, maximum: 64, description: 'vCPUs of its sandboxes; default 2 (within the organization limits)' })),
    memory: Type.Optional(Type.Integer({ minimum: 128, description: 'MB; default 2048' })),
    diskGB: Type.Optional(Type.Integer({ minimum: 1, description: 'GB; default 10' })),
    from_image: Type.Optional(Type.String({ description: 'the base image, instead of a first from step' })),
    steps: Type.Optional(Type.Array(BuildStep, { maxItems: 200 })),
    skipCache: Type.Optional(Type.Boolean({ description: 'run every step again, ignoring cached layers' })),
    update: Type.Optional(Type.Boolean({ description: 'rebuild an existing alias instead of answering 409' })),
  },
  { additionalProperties: true },
);
/** `POST /v1/templates/build` (202). */
export const BuildStartedResult = Type.Object({
  build_id: Type.String(),
  template_id: Type.String({ description: 'for a new template, the same value as build_id' }),
  status: BUILD_STATUS,
  logs_url: Type.String(),
  request_id: Type.Optional(Type.String()),
});
/** `GET /v1/templates/build/{id}/status`. */
export const BuildStatusResult = Type.Object({
  build_id: Type.String(),
  template_id: Type.String(),
  status: BUILD_STATUS,
  progress: Type.Number({ minimum: 0, maximum: 100 }),
  current_step: nullable(Type.String()),
  started_at: nullable(Type.String()),
  completed_at: nullable(Type.String()),
  error_message: nullable(Type.String()),
  build_duration_ms: nullable(Type.Number()),
  request_id: Type.Optional(Type.String()),
});
/** `GET /v1/templates/build/{id}/logs` as JSON. */
export const BuildLogsResult = Type.Object({
  logs: Type.String({ description: 'the lines since offset' }),
  offset: Type.Integer({ description: 'the offset to ask for next' }),
  status: BUILD_STATUS,
  complete: Type.Boolean({ description: 'the build ended and every line was sent' }),
  request_id: Type.Optional(Type.String()),
});
/** The data of a `log` event of the build logs stream. */
export const BuildLogEvent = Type.Object({
  level: Type.Union([Type.Literal('INFO'), Type.Literal('WARN'), Type.Literal('ERROR')]),
  message: Type.String(),
  timestamp: Type.Null(),
});
/** The data of the `done` event that ends the build logs stream. */
export const BuildDoneEvent = Type.Object({ status: BUILD_STATUS });

const FileMeta = Type.Object({
  path: Type.String({ description: 'relative path, as copy steps name it in src' }),
  size: Type.Integer({ minimum: 0, maximum: 100 * 1024 * 1024 }),
  hash: Type.String({ pattern: '^sha256:[0-9a-fA-F]{64}$' }),
});
/** `POST /v1/templates/files/upload-link`: the spec's files, or one tarball by files_hash. Checked by the route itself. */
export const UploadLinkBody = Type.Union([
  Type.Object({ files: Type.Array(FileMeta, { minItems: 1, maxItems: 100 }) }),
  Type.Object({ files_hash: Type.String({ pattern: '^[A-Za-z0-9:_-]{8,128}$' }), content_length: Type.Integer({ minimum: 0 }) }),
]);
export const UploadLinkResult = Type.Union([
  Type.Object({
    upload_urls: Type.Array(
      Type.Object({
        path: Type.String(),
        file_id: Type.String({ description: 'f_ and the sha256: what copy steps name' }),
        upload_url: Type.String({ description: 'PUT the bytes here, no other credentials; valid for 1 hour' }),
        expires_at: Type.String(),
        present: Type.Boolean({ description: 'the organization uploaded this content before: no PUT is needed' }),
      }),
    ),
    request_id: Type.Optional(Type.String()),
  }),
  Type.Object({
    present: Type.Boolean(),
    files_hash: Type.String(),
    upload_url: nullable(Type.String(), 'null when present'),
    expires_at: Type.String(),
    request_id: Type.Optional(Type.String()),
  }),
]);
/** `PUT` of an upload link. */
export const UploadResult = Type.Object({
  success: Type.Literal(true),
  file_id: Type.String(),
  size: Type.Integer(),
  sha256: Type.String(),
  request_id: Type.Optional(Type.String()),
});

/** Snapshots of a sandbox's filesystem (issue 13). */
export const Snapshot = Type.Object({
  object: Type.Literal('snapshot'),
  snapshot_id: Type.String(),
  id: Type.String({ description: 'the same as snapshot_id' }),
  name: Type.Union([Type.String(), Type.Null()]),
  sandbox_id: Type.String({ description: 'the sandbox it was taken of (it may have been deleted since)' }),
  organization_id: Type.String(),
  template_id: Type.String(),
  template_name: Type.String(),
  parent_snapshot_id: Type.Union([Type.String(), Type.Null()], { description: 'the snapshot the sandbox was created from or restored to, if any' }),
  size: Type.Integer({ description: 'bytes this snapshot stores itself: what changed since its template or its parent' }),
  created_at: Type.String(),
  resources: Resources,
  volumes: Type.Optional(Type.Array(SandboxVolume, { description: 'the volumes its sandbox mounted: a create from it mounts them again (their files are not in the snapshot)' })),
  request_id: Type.Optional(Type.String()),
});
export type Snapshot = Static<typeof Snapshot>;

export const CreateSnapshotBody = Type.Object(
  { name: Type.Optional(Type.String({ minLength: 1, maxLength: 128, pattern: '^[^\\u0000-\\u001f]*$' })) },
  { additionalProperties: false },
);
export type CreateSnapshotBody = Static<typeof CreateSnapshotBody>;

export const ListSnapshotsQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
  cursor: Type.Optional(Type.String({ maxLength: 200 })),
  sandbox_id: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
});
export type ListSnapshotsQuery = Static<typeof ListSnapshotsQuery>;

export const SnapshotList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Snapshot),
  has_more: Type.Boolean(),
  next_cursor: Type.Union([Type.String(), Type.Null()]),
  url: Type.String(),
  request_id: Type.Optional(Type.String()),
});

export const PromoteSnapshotBody = Type.Object(
  { alias: Type.String({ minLength: 1, maxLength: 63, pattern: '^[a-z0-9][a-z0-9._-]*$', description: 'the new template\'s name' }) },
  { additionalProperties: false },
);
export type PromoteSnapshotBody = Static<typeof PromoteSnapshotBody>;

export const RestoreBody = Type.Object({ snapshot_id: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false });
export type RestoreBody = Static<typeof RestoreBody>;

export const MAX_FORKS = 20;

export const ForkBody = Type.Object(
  {
    count: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_FORKS, description: 'how many sandboxes to make (default 1)' })),
    timeout_seconds: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 31_536_000 }), Type.Null()], { description: "default: the source's" })),
    internet_access: Type.Optional(Type.Boolean({ description: "default: the source's" })),
    allow_out: Type.Optional(EgressEntries("default: the source's")),
    deny_out: Type.Optional(EgressEntries("default: the source's")),
    env_vars: Type.Optional(EnvVars),
    on_timeout: Type.Optional(Type.Union([Type.Literal('delete'), Type.Literal('pause')])),
    idle_timeout_seconds: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 31_536_000 }), Type.Null()])),
    auto_resume: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
export type ForkBody = Static<typeof ForkBody>;

export const ForkResult = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(Sandbox),
  source_id: Type.String(),
  request_id: Type.Optional(Type.String()),
});
