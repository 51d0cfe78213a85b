import { Type, type Static } from '@sinclair/typebox';

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

export const CreateSandboxBody = Type.Object(
  {
    template_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    template_name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    region: Type.Optional(Type.String({ maxLength: 64 })),
    timeout_seconds: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 31_536_000 }), Type.Null()])),
    internet_access: Type.Optional(Type.Boolean()),
    env_vars: Type.Optional(EnvVars),
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
  created_at: Type.String(),
  updated_at: Type.String(),
  resources: Resources,
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

export const TemplateListQuery = Type.Object({
  category: Type.Optional(Type.String()),
  language: Type.Optional(Type.String()),
});

export const TemplateList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(TemplateSummary),
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
  request_id: Type.Optional(Type.String()),
});
export type SandboxMetrics = Static<typeof SandboxMetrics>;

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
});
export type CreateKeyBody = Static<typeof CreateKeyBody>;
export const KeyIdParams = Type.Object({ id: Type.String({ pattern: '^key_[0-9a-f]{16}$' }) });
export type KeyIdParams = Static<typeof KeyIdParams>;
export const AdminKeysQuery = Type.Object({ org: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) });
export type AdminKeysQuery = Static<typeof AdminKeysQuery>;
