import { Type, type Static } from '@sinclair/typebox';
import { MAX_VOLUMES_PER_SANDBOX, SandboxVolume, VolumeMount } from './volumes.js';

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

const VolumeMounts = Type.Array(VolumeMount, { maxItems: MAX_VOLUMES_PER_SANDBOX, description: 'volumes to mount, each at its path' });

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
