import { Type, type Static } from '@sinclair/typebox';
import { nullable } from './helpers.js';

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
