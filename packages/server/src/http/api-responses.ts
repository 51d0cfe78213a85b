import { Type, type TSchema } from '@sinclair/typebox';
import {
  AccountInfo,
  AccountLimitsResult,
  AdminNodeList,
  AgentHealthResponse,
  AgentInfoResponse,
  ApiKey,
  ApiKeyList,
  AsyncStartedResponse,
  BackgroundStartedResponse,
  BuildDoneEvent,
  BuildLogEvent,
  BuildLogsResult,
  BuildStartedResult,
  BuildStatusResult,
  CacheClearResponse,
  CacheStatsResponse,
  CommandResponse,
  CreatedApiKey,
  DeletedResult,
  Volume,
  VolumeList,
  ForkResult,
  EnvResponse,
  EventsTokenResult,
  ExecuteResponse,
  ExecuteStreamClientFrame,
  ExecuteStreamServerFrame,
  FileDoneResponse,
  FileExistsResponse,
  FileListResponse,
  FileReadResponse,
  FileWrittenResponse,
  HealthResult,
  KillResponse,
  MetricsSnapshotResponse,
  Organization,
  DeletedOrganization,
  OrganizationList,
  ProcessListResponse,
  ProcessExitEvent,
  ProcessLostEvent,
  ProcessOutputChunk,
  ProcessOutputResponse,
  ProcessTableResponse,
  Sandbox,
  SandboxActionResult,
  SandboxEvent,
  SandboxList,
  SandboxMetrics,
  SandboxPorts,
  SandboxPreview,
  NetworkPolicyResult,
  NodeDrainResult,
  SetTimeoutResult,
  Snapshot,
  SnapshotList,
  SystemResponse,
  Template,
  TemplateBuildBody,
  TemplateList,
  TerminalClientFrame,
  TerminalServerFrame,
  TokenResult,
  UploadLinkBody,
  UploadLinkResult,
  UploadResult,
  WatchClientFrame,
  WatchServerFrame,
} from '@sandboxd/protocol';
import { DESKTOP_RESPONSES } from './api-desktop.js';

/**
 * What the OpenAPI document says of each operation's success: its status, its body by media type
 * with a schema and examples, and an example of its request body. Keyed as OPERATIONS in
 * api-docs.ts. openapi.test checks that every operation has one, that every example validates
 * against its schema, and that what the routes really answer validates too.
 *
 * The schemas come from the protocol package. A JSON schema given here for a route that declares
 * its own response schema must be that same schema (the route's is what Fastify serializes with);
 * routes without one are described here only, so that a mistake in a description can never drop a
 * field from a real answer.
 */
export type { Payload, SuccessDoc } from './api-doc-types.js';
import type { Payload, SuccessDoc } from './api-doc-types.js';


const json = (schema: TSchema | undefined, example: unknown): Record<string, Payload> => ({ 'application/json': { schema, example } });
const jsonRequest = (example: unknown, schema?: TSchema, required = true): SuccessDoc['request'] => ({ required, content: { 'application/json': { schema, example } } });
const sse = (events: Record<string, TSchema>, example: string): Record<string, Payload> => ({
  'text/event-stream': {
    schema: Type.String({ description: 'server-sent events: `event: <name>` and `data: <JSON>` (see x-events), and `: comment` lines (keep-alives)' }),
    events,
    example,
  },
});
const event = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
const BINARY = Type.String({ format: 'binary' });

// Example values, shaped as the service makes them (sandbox ids: "sb" and 20 lowercase letters or
// digits; the others a prefix and hex), and consistent from one example to the next.
const SBX = 'sbq7k2m9x4v8t1w6z3r5np';
const ORG = '300389842471072417226247';
const TPL = 'tpl_af851e734adfae9a94c3'; // the built-in code-interpreter: tpl_ and sha256("builtin:code-interpreter")
const BUILD = 'tpl_8e41c0b7d2a95f36e1c4'; // a custom template: its build id is its id
const KEY = 'key_5b2e9f0c7a13d468';
const REQ = '0b7e4f2a-9c1d-4e3b-8a56-2f1c7d9e4b30';
const PROC = 'proc_7c1e9a3f5b2d8046';
const CTX = 'ctx_2a9f4c7e1b3d5068';
const HOST = 'http://127.0.0.1:40017';
const AT = '2025-06-02T09:14:07.512Z';
const LATER = '2025-06-02T09:14:09.031Z';
const b64url = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
const SIGNATURE = 'eUK_kiBedbQqdEGIIGyq8I4k5RKl1QmDVZ9fK9Ctp86j82Uu9xhFfNjLClZBEHn4lTDEGL42dDYjdEUMzH6zwg';
const SANDBOX_TOKEN = `${b64url({ alg: 'EdDSA', typ: 'JWT' })}.${b64url({ org: ORG, sub: SBX, iss: 'sandboxd', aud: 'sandbox-agent', iat: 1748855647, jti: 'k3v9q1x7', exp: 1748942047 })}.${SIGNATURE}`;
const EVENTS_TOKEN = `${b64url({ alg: 'EdDSA', typ: 'sandboxd-events+jwt' })}.${b64url({ org: ORG, kid: KEY, use: 'events', sbx: SBX, sub: KEY, iss: 'sandboxd', aud: 'sandboxd-events', iat: 1748855700, jti: 'p2m8w4z6', exp: 1748856000 })}.${SIGNATURE}`;
const SHA = '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08';

const sandbox = {
  object: 'sandbox',
  id: SBX,
  organization_id: ORG,
  status: 'running',
  public_host: HOST,
  direct_url: HOST,
  template_name: 'code-interpreter',
  template_id: TPL,
  region: 'local',
  internet_access: true,
  timeout_seconds: 3600,
  expires_at: '2025-06-02T10:14:07.512Z',
  created_at: AT,
  updated_at: AT,
  resources: { vcpu: 2, memory_mb: 2048, disk_gb: 10, disk_mb: 10240 },
};
const template = {
  object: 'template',
  id: TPL,
  name: 'code-interpreter',
  display_name: 'Code Interpreter',
  description: 'Python 3.11 with numpy, pandas and matplotlib; Node.js 18; Go 1.19; bash. The default template.',
  category: 'data-science',
  language: 'python',
  default_resources: { vcpu: 2, memory_mb: 2048, disk_gb: 10 },
  status: 'active',
  is_active: true,
  is_public: true,
  build_id: null,
  features: ['code_execution', 'file_operations', 'commands', 'rich_outputs'],
  tags: ['python', 'data-science', 'javascript', 'go', 'bash'],
  env: {},
  workdir: '/workspace',
  layers: ['5d1c8a0f3e2b47a69c18d0e7f2a4b6c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e', 'c0ffee5e7a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5'],
  error_message: null,
  created_at: '2025-06-01T08:00:02.118Z',
  updated_at: '2025-06-01T08:00:02.118Z',
};
const SNAP = 'snap_4c9e1f7a2b6d8e03a5f1c7b9';
const volume = {
  object: 'volume',
  id: 'vol-3f9a1c2b7d4e5f60a1b2',
  name: 'datasets',
  organization_id: ORG,
  size_gb: 10,
  mounted_by: [SBX],
  node: 'host-1',
  created_at: AT,
};

const snapshot = {
  object: 'snapshot',
  snapshot_id: SNAP,
  id: SNAP,
  name: 'deps installed',
  sandbox_id: SBX,
  organization_id: ORG,
  template_id: TPL,
  template_name: 'code-interpreter',
  parent_snapshot_id: null,
  size: 104_857_600,
  created_at: LATER,
  resources: { vcpu: 2, memory_mb: 2048, disk_gb: 10, disk_mb: 10240 },
};

const metrics = {
  sandbox_id: SBX,
  status: 'running',
  timestamp: LATER,
  cpu: { usage_seconds: 3.42, vcpu: 2 },
  memory: { used_bytes: 187_392_000, limit_bytes: 2_147_483_648 },
  disk: { used_bytes: 48_238_592, total_bytes: 10_737_418_240 },
  network: { rx_bytes: 1_284_311, tx_bytes: 90_112 },
  pids: 7,
  oom_kills: 0,
  egress_denied: 0,
};
const key = { id: KEY, org_id: ORG, org: 'acme', name: 'ci', scopes: ['sandboxes:read', 'sandboxes:write'], created_at: AT, revoked_at: null, last_used_at: null };
const buildStatus = {
  build_id: BUILD,
  template_id: BUILD,
  status: 'building',
  progress: 33,
  current_step: 'APT cowsay',
  started_at: AT,
  completed_at: null,
  error_message: null,
  build_duration_ms: 41_206,
};

/** The lifecycle API's operations. */
export const RESPONSES: Record<string, SuccessDoc> = {
  'GET /health': { status: 200, description: 'the service runs', content: json(HealthResult, { status: 'ok', version: '0.1.0' }) },
  'GET /metrics': {
    status: 200,
    description: 'the Prometheus text exposition format (version 0.0.4)',
    content: {
      'text/plain': {
        schema: Type.String({ description: 'Prometheus text format' }),
        example:
          '# HELP sandboxd_http_requests_total API requests by route pattern, method and status\n# TYPE sandboxd_http_requests_total counter\nsandboxd_http_requests_total{route="/v1/sandboxes",method="POST",status="201"} 42\n# HELP sandboxd_sandboxes Sandboxes by state\n# TYPE sandboxd_sandboxes gauge\nsandboxd_sandboxes{state="running"} 3\n',
      },
    },
  },
  'POST /v1/sandboxes': {
    status: 201,
    description: 'created and running: its agent answers at public_host with auth_token',
    content: json(Sandbox, { ...sandbox, auth_token: SANDBOX_TOKEN, token_expires_at: '2025-06-03T09:14:07.000Z', request_id: REQ }),
    request: jsonRequest({ template_name: 'code-interpreter', timeout_seconds: 3600, internet_access: true, env_vars: { APP_ENV: 'staging' } }),
  },
  'GET /v1/sandboxes': {
    status: 200,
    description: 'a page of sandboxes, newest first',
    content: json(SandboxList, { object: 'list', data: [sandbox], has_more: true, next_cursor: Buffer.from(JSON.stringify([AT, SBX])).toString('base64url'), url: '/v1/sandboxes', request_id: REQ }),
  },
  'GET /v1/sandboxes/{id}': { status: 200, description: 'the sandbox (never its token)', content: json(Sandbox, { ...sandbox, request_id: REQ }) },
  'DELETE /v1/sandboxes/{id}': { status: 200, description: 'deleted', content: json(SandboxActionResult, { id: SBX, status: 'deleted', request_id: REQ }) },
  'POST /v1/sandboxes/{id}/pause': { status: 200, description: 'paused', content: json(SandboxActionResult, { id: SBX, status: 'paused', request_id: REQ }) },
  'POST /v1/sandboxes/{id}/resume': { status: 200, description: 'running again', content: json(SandboxActionResult, { id: SBX, status: 'running', request_id: REQ }) },
  'POST /v1/sandboxes/{id}/stop': { status: 200, description: 'stopped', content: json(SandboxActionResult, { id: SBX, status: 'stopped', request_id: REQ }) },
  'POST /v1/sandboxes/{id}/start': { status: 200, description: 'booted again', content: json(SandboxActionResult, { id: SBX, status: 'running', request_id: REQ }) },
  'PUT /v1/sandboxes/{id}/timeout': {
    status: 200,
    description: 'the new deadline',
    content: json(SetTimeoutResult, { id: SBX, timeout_seconds: 7200, expires_at: '2025-06-02T11:20:41.907Z', request_id: REQ }),
    request: jsonRequest({ timeout_seconds: 7200 }),
  },
  'POST /v1/sandboxes/{id}/token/refresh': {
    status: 200,
    description: 'a new token for public_host',
    content: json(TokenResult, { id: SBX, auth_token: SANDBOX_TOKEN, token_expires_at: '2025-06-03T09:14:07.000Z', request_id: REQ }),
  },
  'GET /v1/sandboxes/{id}/metrics': { status: 200, description: 'its resource use now', content: json(SandboxMetrics, { ...metrics, request_id: REQ }) },
  'GET /v1/sandboxes/{id}/ports': {
    status: 200,
    description: 'the ports something listens on, with where',
    content: json(SandboxPorts, {
      object: 'list',
      data: [
        { port: 3000, addresses: ['127.0.0.1'], loopback_only: true },
        { port: 8000, addresses: ['0.0.0.0', '::'], loopback_only: false },
      ],
      request_id: REQ,
    }),
  },
  'GET /v1/sandboxes/{id}/ports/{port}': {
    status: 200,
    description: 'the preview URL of the port',
    content: json(SandboxPreview, {
      port: 3000,
      url: 'http://127.0.0.1:40007',
      public: false,
      signed_url: 'http://127.0.0.1:40007/_sandboxd/auth?token=eyJhbGciOiJFZERTQSIsInR5cCI6InNhbmRib3hkLXByZXZpZXcrand0In0.e30.c2ln',
      signed_url_expires_at: '2025-06-02T09:24:11.000Z',
      request_id: REQ,
    }),
  },
  'PUT /v1/sandboxes/{id}/ports/{port}': {
    status: 200,
    description: 'the preview, public or private as asked',
    content: json(SandboxPreview, { port: 3000, url: 'http://127.0.0.1:40007', public: true, request_id: REQ }),
    request: jsonRequest({ public: true }),
  },
  'GET /v1/sandboxes/{id}/network': {
    status: 200,
    description: 'the egress policy that applies now',
    content: json(NetworkPolicyResult, { internet_access: true, allow_out: ['pypi.org', '*.pythonhosted.org', '140.82.112.0/20'], deny_out: [], request_id: REQ }),
  },
  'PUT /v1/sandboxes/{id}/network': {
    status: 200,
    description: 'the policy as it now applies (entries normalized: lowercase names, CIDRs with their host bits cleared)',
    content: json(NetworkPolicyResult, { internet_access: true, allow_out: ['pypi.org', '*.pythonhosted.org', '140.82.112.0/20'], deny_out: ['203.0.113.7'], request_id: REQ }),
    request: jsonRequest({ allow_out: ['pypi.org', '*.pythonhosted.org', '140.82.112.0/20'], deny_out: ['203.0.113.7'] }),
  },
  'POST /v1/sandboxes/{id}/snapshots': {
    status: 201,
    description: 'the snapshot, taken; a running sandbox runs again',
    content: json(Snapshot, { ...snapshot, request_id: REQ }),
    request: jsonRequest({ name: 'deps installed' }, undefined, false),
  },
  'POST /v1/volumes': {
    status: 201,
    description: 'the volume, made and empty',
    content: json(Volume, { ...volume, used_bytes: 0, mounted_by: [], request_id: REQ }),
    request: jsonRequest({ name: 'datasets', size_gb: 10 }),
  },
  'GET /v1/volumes': { status: 200, description: "the organization's volumes, by name", content: json(VolumeList, { object: 'list', data: [volume], url: '/v1/volumes', request_id: REQ }) },
  'GET /v1/volumes/{nameOrId}': { status: 200, description: 'the volume, with what it holds', content: json(Volume, { ...volume, used_bytes: 52_428_800, request_id: REQ }) },
  'DELETE /v1/volumes/{nameOrId}': { status: 200, description: 'deleted, nothing of it left', content: json(DeletedResult, { id: 'vol-3f9a1c2b7d4e5f60a1b2', status: 'deleted', request_id: REQ }) },
  'GET /v1/snapshots': {
    status: 200,
    description: 'a page of snapshots, newest first',
    content: json(SnapshotList, { object: 'list', data: [snapshot], has_more: false, next_cursor: null, url: '/v1/snapshots', request_id: REQ }),
  },
  'GET /v1/snapshots/{id}': { status: 200, description: 'the snapshot', content: json(Snapshot, { ...snapshot, request_id: REQ }) },
  'DELETE /v1/snapshots/{id}': { status: 200, description: 'deleted', content: json(DeletedResult, { id: SNAP, status: 'deleted', request_id: REQ }) },
  'POST /v1/snapshots/{id}/template': {
    status: 201,
    description: 'the new template, active',
    content: json(Template, {
      ...template,
      id: BUILD,
      name: 'my-env',
      display_name: 'my-env',
      description: `From snapshot ${SNAP} (deps installed) of a code-interpreter sandbox`,
      category: 'custom',
      is_public: false,
      build_id: null,
      tags: ['custom', 'snapshot'],
      request_id: REQ,
    }),
    request: jsonRequest({ alias: 'my-env' }),
  },
  'POST /v1/sandboxes/{id}/fork': {
    status: 201,
    description: 'the new sandboxes, running, each with its own token',
    content: json(ForkResult, {
      object: 'list',
      data: [
        { ...sandbox, id: 'sbf0rk1a2b3c4d5e6f7g8h', auth_token: SANDBOX_TOKEN, token_expires_at: '2025-06-03T09:14:09.000Z' },
        { ...sandbox, id: 'sbf0rk2b3c4d5e6f7g8h9i', auth_token: SANDBOX_TOKEN, token_expires_at: '2025-06-03T09:14:09.000Z' },
      ],
      source_id: SBX,
      request_id: REQ,
    }),
    request: jsonRequest({ count: 2, timeout_seconds: 600 }, undefined, false),
  },
  'POST /v1/sandboxes/{id}/restore': {
    status: 200,
    description: 'the sandbox, with the snapshot\'s files, running again (or stopped, if it was)',
    content: json(Sandbox, { ...sandbox, request_id: REQ }),
    request: jsonRequest({ snapshot_id: SNAP }),
  },
  'GET /v1/sandboxes/{id}/metrics/stream': {
    status: 200,
    description: 'a stream of samples, until the client closes it or the sandbox is gone',
    content: sse(
      { metrics: SandboxMetrics, end: Type.Object({ id: Type.String(), reason: Type.String({ description: 'an error code: NOT_FOUND, SANDBOX_EXPIRED, ...' }) }) },
      `: connected\n\n${event('metrics', metrics)}${event('metrics', { ...metrics, timestamp: '2025-06-02T09:14:11.030Z', cpu: { usage_seconds: 3.61, vcpu: 2 } })}${event('end', { id: SBX, reason: 'NOT_FOUND' })}`,
    ),
  },
  'GET /v1/sandboxes/{id}/events': {
    status: 200,
    description: "the sandbox's events, as they happen, until the client closes the stream",
    content: sse(Object.fromEntries(['created', 'paused', 'resumed', 'stopped', 'started', 'deleted', 'expired', 'oom_killed'].map((k) => [k, SandboxEvent])), `: connected\n\n${event('paused', { id: SBX, status: 'paused', at: AT })}: ping\n\n${event('resumed', { id: SBX, status: 'running', at: LATER })}`),
  },
  'GET /v1/events': {
    status: 200,
    description: "every sandbox's events, as they happen",
    content: sse(
      Object.fromEntries(['created', 'paused', 'resumed', 'stopped', 'started', 'deleted', 'expired', 'oom_killed'].map((k) => [k, SandboxEvent])),
      `: connected\n\n${event('created', { id: SBX, status: 'running', at: AT })}${event('expired', { id: 'sb0m4k8t2x6q9w1z5v3r7c', status: 'deleted', at: LATER, reason: 'expired' })}`,
    ),
  },
  'POST /v1/events/token': {
    status: 200,
    description: 'a token for ?token= on the events streams',
    content: json(EventsTokenResult, { token: EVENTS_TOKEN, expires_at: '2025-06-02T09:20:00.000Z', sandbox_id: SBX, request_id: REQ }),
    request: jsonRequest({ sandbox_id: SBX }, undefined, false),
  },
  'GET /v1/account': {
    status: 200,
    description: "the caller's organization and key",
    content: json(AccountInfo, { organization: { id: ORG, name: 'acme' }, key: { id: KEY, name: 'ci', scopes: ['sandboxes:read', 'sandboxes:write'] }, operator: false, request_id: REQ }),
  },
  'GET /v1/account/limits': {
    status: 200,
    description: "the organization's limits and usage",
    content: json(AccountLimitsResult, {
      organization_id: ORG,
      concurrent_sandboxes: { used: 3, limit: 20, stopped: 1 },
      committed_memory_mb: { used: 6144, limit: 65536 },
      committed_disk_gb: { used: 40, limit: 500 },
      snapshot_storage_mb: { used: 310, limit: 10240 },
      storage: { used_gb: 40.42, limit_gb: 500, sandbox_disks_gb: 40, sandbox_disks_held_bytes: 3221225472, snapshots_bytes: 325058560, templates_bytes: 94371840, uploads_bytes: 31457280 },
      per_sandbox: { vcpu: 8, memory_mb: 16384, disk_gb: 50 },
      sandbox_timeout_seconds: { default: null, max: 86400 },
      template_builds: { per_hour: { used: 1, limit: 10 }, per_day: { used: 4, limit: 50 }, running: 0 },
      rate_limits: { sandbox_creates_per_minute: { limit: 60, used: 2 } },
      request_id: REQ,
    }),
  },
  'POST /v1/admin/nodes/{id}/drain': {
    status: 200,
    description: 'what this call moved, what it could not, what runs there still',
    content: json(NodeDrainResult, {
      object: 'node_drain',
      node_id: 'node-a',
      status: 'draining',
      moved: [{ id: SBX, organization_id: ORG, status: 'stopped', node_id: 'node-b' }],
      failed: [],
      running: [{ id: 'sbx2k9m4q8t1w6z3r5npa7', organization_id: ORG, expires_at: LATER }],
      left: 0,
      drained: false,
      request_id: REQ,
    }),
    request: jsonRequest({ stop_running: false }, undefined, false),
  },
  'GET /v1/admin/nodes': {
    status: 200,
    description: 'the nodes',
    content: {
      'application/json': {
        schema: AdminNodeList,
        examples: {
          cluster: {
            summary: "a cluster's nodes: one up, one lost",
            value: {
              object: 'list',
              mode: 'cluster',
              data: [
                {
                  id: 'node-a',
                  status: 'active',
                  up: true,
                  in_process: false,
                  url: 'http://10.0.0.11:7070',
                  lease_expires_at: LATER,
                  heartbeat_at: AT,
                  heartbeat_age_seconds: 2,
                  registered_at: '2025-05-30T12:00:00.000Z',
                  capacity: { vcpu: 16, memory_mb: 65536, disk_gb: 500, max_sandboxes: 1000 },
                  committed: { sandboxes: 3, active: 2, stopped: 1, vcpu: 4, memory_mb: 4096, disk_gb: 30 },
                  reported: { sandboxes: 5, warm_ready: 2, orphans: 0 },
                },
                {
                  id: 'node-b',
                  status: 'cordoned',
                  up: false,
                  in_process: false,
                  url: 'http://10.0.0.12:7070',
                  lease_expires_at: AT,
                  heartbeat_at: AT,
                  heartbeat_age_seconds: 95,
                  registered_at: '2025-05-30T12:00:00.000Z',
                  capacity: { vcpu: 16, memory_mb: 65536, disk_gb: 500, max_sandboxes: 1000 },
                  committed: { sandboxes: 1, active: 1, stopped: 0, vcpu: 2, memory_mb: 2048, disk_gb: 10 },
                  reported: { sandboxes: 1, warm_ready: 0, orphans: null },
                },
              ],
              request_id: REQ,
            },
          },
          allInOne: {
            summary: 'the all-in-one daemon: its one machine',
            value: {
              object: 'list',
              mode: 'all-in-one',
              data: [
                {
                  id: 'sandbox-host',
                  status: 'active',
                  up: true,
                  in_process: true,
                  url: null,
                  lease_expires_at: null,
                  heartbeat_at: null,
                  heartbeat_age_seconds: null,
                  registered_at: null,
                  capacity: { vcpu: 8, memory_mb: 32096, disk_gb: 250, max_sandboxes: null },
                  committed: { sandboxes: 2, active: 2, stopped: 0, vcpu: 3, memory_mb: 2560, disk_gb: 20 },
                  reported: { sandboxes: 4, warm_ready: 2, orphans: null },
                },
              ],
              request_id: REQ,
            },
          },
        },
      },
    },
  },
  'GET /v1/admin/orgs': {
    status: 200,
    description: 'every organization',
    content: json(OrganizationList, { object: 'list', data: [{ id: 'org_0a1b2c3d4e5f60718293', name: 'default', created_at: '2025-05-30T12:00:00.000Z' }, { id: ORG, name: 'acme', created_at: AT }], request_id: REQ }),
  },
  'POST /v1/admin/orgs': { status: 201, description: 'created', content: json(Organization, { id: ORG, name: 'acme', created_at: AT, request_id: REQ }), request: jsonRequest({ name: 'acme' }) },
  'DELETE /v1/admin/orgs/{nameOrId}': {
    status: 200,
    description: 'deleted, with everything it made',
    content: json(DeletedOrganization, { id: ORG, name: 'acme', created_at: AT, status: 'deleted', deleted: { keys: 2, sandboxes: 3, snapshots: 1, templates: 1, uploads: 4 }, request_id: REQ }),
  },
  'GET /v1/admin/keys': {
    status: 200,
    description: 'the keys, revoked ones included, without their secrets',
    content: json(ApiKeyList, { object: 'list', data: [key, { ...key, id: 'key_c4d1a8e63f0b9275', name: 'old', revoked_at: LATER, last_used_at: AT }], request_id: REQ }),
  },
  'POST /v1/admin/keys': {
    status: 201,
    description: 'created; the secret is shown in this answer only',
    content: json(CreatedApiKey, { ...key, secret: 'sbd_T0zHLHxUUPb8Uti9SGij1MLzqjHH-dYp', request_id: REQ }),
    request: jsonRequest({ org: 'acme', name: 'ci', scopes: ['sandboxes:read', 'sandboxes:write'] }),
  },
  'DELETE /v1/admin/keys/{id}': { status: 200, description: 'revoked', content: json(ApiKey, { ...key, revoked_at: LATER, request_id: REQ }) },
  'GET /v1/templates': { status: 200, description: 'the templates', content: json(TemplateList, { object: 'list', data: [template], request_id: REQ }) },
  'GET /v1/templates/{nameOrId}': { status: 200, description: 'the template', content: json(Template, { ...template, request_id: REQ }) },
  'DELETE /v1/templates/{nameOrId}': { status: 200, description: 'deleted', content: json(DeletedResult, { id: BUILD, status: 'deleted', request_id: REQ }) },
  'POST /v1/templates/build': {
    status: 202,
    description: 'the build started; follow it at logs_url and /status',
    content: json(BuildStartedResult, { build_id: BUILD, template_id: BUILD, status: 'building', logs_url: `/v1/templates/build/${BUILD}/logs`, request_id: REQ }),
    request: {
      content: {
        'application/json': {
          schema: TemplateBuildBody,
          examples: {
            steps: {
              summary: 'the spec shape',
              value: {
                alias: 'py-cowsay',
                cpu: 2,
                memory: 2048,
                diskGB: 10,
                steps: [
                  { type: 'from', image: 'python:3.11' },
                  { type: 'apt', packages: ['cowsay'] },
                  { type: 'run', command: 'pip install requests' },
                  { type: 'copy', src: ['app/main.py'], dest: '/workspace/app/' },
                  { type: 'env', key: 'APP_ENV', value: 'production' },
                  { type: 'workdir', path: '/workspace/app' },
                ],
              },
            },
            newer: {
              summary: 'the shape newer clients send',
              value: {
                name: 'py-cowsay',
                from_image: 'python:3.11',
                steps: [
                  { type: 'RUN', args: ['pip install requests'] },
                  { type: 'COPY', args: ['app/main.py', '/workspace/app/'], filesHash: 'a3f1c9e07b5d2846' },
                  { type: 'ENV', args: ['APP_ENV', 'production'] },
                ],
                update: true,
              },
            },
          },
        },
      },
    },
  },
  'GET /v1/templates/build/{id}/status': { status: 200, description: 'where the build is', content: json(BuildStatusResult, { ...buildStatus, request_id: REQ }) },
  'GET /v1/templates/build/{id}/logs': {
    status: 200,
    description: 'the log since offset as JSON; with Accept: text/event-stream, followed live until the build ends',
    content: {
      ...json(BuildLogsResult, {
        logs: `build ${BUILD}: template "py-cowsay", 3 steps, cpu 2, memory 2048 MB, disk 10 GB\n[1/3] FROM python:3.11\n[2/3] APT cowsay\n`,
        offset: 118,
        status: 'building',
        complete: false,
        request_id: REQ,
      }),
      ...sse(
        { log: BuildLogEvent, done: BuildDoneEvent },
        `${event('log', { level: 'INFO', message: '[2/3] APT cowsay', timestamp: null })}${event('log', { level: 'INFO', message: '[3/3] RUN pip install requests (cached)', timestamp: null })}${event('done', { status: 'active' })}`,
      ),
    },
  },
  'POST /v1/templates/files/upload-link': {
    status: 200,
    description: 'where to PUT each file (present: already uploaded, no PUT needed)',
    content: {
      'application/json': {
        schema: UploadLinkResult,
        examples: {
          files: {
            summary: 'for {files}',
            value: {
              upload_urls: [{ path: 'app/main.py', file_id: `f_${SHA}`, upload_url: 'http://127.0.0.1:8080/v1/templates/files/upload/eyJvIjoib3JnXzNm.Zm9vYmFy', expires_at: '2025-06-02T10:14:07.000Z', present: false }],
              request_id: REQ,
            },
          },
          tarball: {
            summary: 'for {files_hash, content_length}',
            value: { present: false, files_hash: 'a3f1c9e07b5d2846', upload_url: 'http://127.0.0.1:8080/v1/templates/files/upload/eyJvIjoib3JnXzNm.YmFyYmF6', expires_at: '2025-06-02T10:14:07.000Z', request_id: REQ },
          },
        },
      },
    },
    request: {
      content: {
        'application/json': {
          schema: UploadLinkBody,
          examples: {
            files: { summary: 'files by content hash (the spec shape)', value: { files: [{ path: 'app/main.py', size: 1832, hash: `sha256:${SHA}` }] } },
            tarball: { summary: 'one gzip tarball (newer clients)', value: { files_hash: 'a3f1c9e07b5d2846', content_length: 40_960 } },
          },
        },
      },
    },
  },
  'PUT /v1/templates/files/upload/{token}': {
    status: 200,
    description: 'stored: copy steps may name file_id',
    content: json(UploadResult, { success: true, file_id: `f_${SHA}`, size: 1832, sha256: SHA, request_id: REQ }),
    request: { content: { 'application/octet-stream': { schema: BINARY } } },
  },
};

const executeResult = {
  success: true,
  stdout: '4\n',
  stderr: '',
  exit_code: 0,
  execution_time: 0.031,
  timed_out: false,
  language: 'python',
  timestamp: LATER,
  execution_id: PROC,
  context_id: CTX,
};
const started = { process_id: PROC, execution_id: PROC, name: 'python execution', status: 'running', started_at: AT, start_time: AT, pid: 412, message: 'started in the background' };
const env = (vars: Record<string, string>) => ({ env_vars: vars, count: Object.keys(vars).length, timestamp: LATER });
const system = {
  cpu: { usage_percent: 12.5, cores: 2, usage_seconds: 3.42, source: 'cgroup' },
  memory: { total: 2_147_483_648, used: 187_392_000, free: 1_960_091_648, usage_percent: 8.73, source: 'cgroup' },
  disk: { total: 10_737_418_240, used: 48_238_592, free: 10_689_179_648, usage_percent: 0.45, path: '/' },
};

/** The agent API's operations, keyed without the /agent prefix. */
export const AGENT_RESPONSES: Record<string, SuccessDoc> = {
  'GET /health': {
    status: 200,
    description: 'the agent runs',
    content: json(AgentHealthResponse, {
      status: 'healthy',
      version: '0.1.0',
      uptime_seconds: 84.12,
      features: ['code_execution', 'file_operations', 'commands', 'environment', 'metrics', 'processes', 'cache', 'rich_outputs', 'streaming', 'contexts', 'python_kernel', 'javascript_kernel', 'terminal'],
      languages: ['python', 'javascript', 'bash', 'go'],
      active_executions: 0,
    }),
  },
  'GET /info': {
    status: 200,
    description: 'the agent and its sandbox',
    content: json(AgentInfoResponse, {
      agent: 'sandboxd-agent',
      version: '0.1.0',
      sandbox_id: SBX,
      vm_id: SBX,
      started_at: AT,
      start_time: AT,
      platform: 'linux/x64',
      node_version: 'v20.19.2',
      workspace: '/workspace',
      languages: ['python', 'javascript', 'bash', 'go'],
    }),
  },
  'POST /execute': {
    status: 200,
    description: 'the execution ended (or timed out: success false, timed_out true)',
    content: {
      'application/json': {
        schema: ExecuteResponse,
        examples: {
          ok: { summary: 'an expression', value: { ...executeResult, result: '4' } },
          failed: {
            summary: 'code that raises: still a 200',
            value: { ...executeResult, success: false, stdout: '', stderr: 'Traceback (most recent call last):\n  File "<cell>", line 1, in <module>\nZeroDivisionError: division by zero\n', exit_code: 1 },
          },
        },
      },
    },
    request: jsonRequest({ code: 'x = 2\nx + 2', language: 'python', timeout: 30 }),
  },
  'POST /execute/rich': {
    status: 200,
    description: 'the execution ended, with its rich outputs listed',
    content: json(ExecuteResponse, {
      ...executeResult,
      stdout: '',
      png: 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==',
      rich_outputs: [{ type: 'image', path: `/.sb/state/outputs/${PROC}/001-figure.png`, mime: 'image/png' }],
    }),
    request: jsonRequest({ code: 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()', language: 'python' }),
  },
  'POST /execute/background': {
    status: 200,
    description: 'started; GET /execute/processes follows it',
    content: json(BackgroundStartedResponse, started),
    request: jsonRequest({ code: 'import time\nfor i in range(60):\n    print(i, flush=True)\n    time.sleep(1)', language: 'python', timeout: 600 }),
  },
  'POST /execute/async': {
    status: 202,
    description: 'started; the result will be POSTed to callback_url',
    content: json(AsyncStartedResponse, { ...started, callback_url: 'https://ci.example.com/hooks/sandbox', message: 'started; the result will be POSTed to callback_url' }),
    request: jsonRequest({
      code: 'print(sum(range(10**7)))',
      language: 'python',
      callback_url: 'https://ci.example.com/hooks/sandbox',
      callback_headers: { 'X-Job': '1234' },
      callback_signature_secret: 'whsec_4c8e1f',
    }),
  },
  'POST /execute/ipython': {
    status: 200,
    description: 'the execution ended; the last expression is in result',
    content: json(ExecuteResponse, { ...executeResult, stdout: '', result: "{'a': 1}" }),
    request: jsonRequest({ code: "d = {'a': 1}\nd" }),
  },
  'GET /execute/processes': {
    status: 200,
    description: 'running and recently finished executions (the last 100)',
    content: json(ProcessListResponse, {
      processes: [
        {
          process_id: PROC,
          execution_id: PROC,
          name: 'python execution',
          kind: 'execute',
          background: true,
          status: 'running',
          language: 'python',
          started_at: AT,
          start_time: AT,
          end_time: null,
          exit_code: null,
          duration: null,
          pid: 412,
        },
        {
          process_id: 'proc_1f3b5d7092a4c6e8',
          execution_id: 'proc_1f3b5d7092a4c6e8',
          name: 'bash -c echo done; exit 3',
          kind: 'command',
          background: true,
          status: 'failed',
          language: 'shell',
          started_at: AT,
          start_time: AT,
          end_time: LATER,
          exit_code: 3,
          duration: 1.519,
          pid: 415,
          stdout: 'done\n',
          stderr: '',
          truncated: false,
        },
      ],
      count: 2,
      timestamp: LATER,
    }),
  },
  'GET /processes/{process_id}/output': {
    status: 200,
    description: 'the output kept from since; go on from next_offset',
    content: json(ProcessOutputResponse, {
      process_id: PROC,
      status: 'running',
      exit_code: null,
      since: 0,
      next_offset: 35,
      start_offset: 0,
      end_offset: 35,
      lost_bytes: 0,
      complete: false,
      chunks: [
        { stream: 'stdout', offset: 0, data: 'step 1\nstep 2\n' },
        { stream: 'stderr', offset: 14, data: 'warning: slow disk\n' },
        { stream: 'stdout', offset: 33, data: '3\n' },
      ],
    }),
  },
  'GET /processes/{process_id}/attach': {
    status: 200,
    description: 'server-sent events until the process exits: output (its id is the offset to resume from), lost, exit',
    content: sse(
      { output: ProcessOutputChunk, lost: ProcessLostEvent, exit: ProcessExitEvent },
      `: attached\n\nid: 14\n${event('output', { stream: 'stdout', offset: 0, data: 'step 1\nstep 2\n' })}${event('lost', { offset: 14, bytes: 1048576 })}id: 1048597\n${event('output', { stream: 'stdout', offset: 1048590, data: 'done\n' })}${event('exit', { status: 'completed', exit_code: 0, next_offset: 1048597 })}`,
    ),
  },
  'POST /execute/kill/{process_id}': { status: 200, description: 'killed (or it had ended)', content: json(KillResponse, { process_id: PROC, status: 'killed', message: 'process and its children killed' }) },
  'DELETE /execute/kill': { status: 200, description: 'killed (or it had ended)', content: json(KillResponse, { process_id: PROC, status: 'killed', message: 'process and its children killed' }) },
  'GET /execute/stream': {
    status: 101,
    description: 'Switching Protocols: the connection is a WebSocket. Send an execute frame; the output comes as stdout and stderr frames, then result and complete. The socket stays open for more executions until the client closes it.',
    frames: {
      client: { schema: ExecuteStreamClientFrame, example: { type: 'execute', code: 'for i in range(3): print(i)', language: 'python', timeout: 30, workdir: '/workspace' } },
      server: {
        schema: ExecuteStreamServerFrame,
        examples: {
          stdout: { summary: 'output, as it comes', value: { type: 'stdout', data: '0\n1\n2\n', timestamp: AT } },
          result: { summary: 'the execution ended', value: { type: 'result', exit_code: 0, execution_time: 0.018, success: true, timed_out: false, execution_id: PROC, context_id: CTX, timestamp: LATER } },
          complete: { summary: 'the last frame of an execution', value: { type: 'complete', success: true } },
        },
      },
    },
  },
  'POST /commands/run': {
    status: 200,
    description: 'the command ended (a non-zero exit is still a 200)',
    content: json(CommandResponse, { success: true, stdout: 'Python 3.11.2\n', stderr: '', exit_code: 0, execution_time: 0.012, timed_out: false, command: 'python3 --version', timestamp: LATER, pid: 418 }),
    request: jsonRequest({ command: 'python3 --version', timeout: 30, working_dir: '/workspace' }),
  },
  'POST /commands/background': {
    status: 200,
    description: 'started; GET /execute/processes follows it',
    content: json(BackgroundStartedResponse, { ...started, name: 'python3 -m http.server 8000' }),
    request: jsonRequest({ command: 'python3', args: ['-m', 'http.server', '8000'], working_dir: '/workspace' }),
  },
  'GET /files/read': { status: 200, description: 'the file content', content: json(FileReadResponse, { content: 'print("hello")\n', path: '/workspace/hello.py', size: 15, encoding: 'utf8' }) },
  'POST /files/write': {
    status: 200,
    description: 'written',
    content: json(FileWrittenResponse, { success: true, path: '/workspace/hello.py', size: 15 }),
    request: jsonRequest({ path: '/workspace/hello.py', content: 'print("hello")\n', mode: '0644' }),
  },
  'GET /files/list': {
    status: 200,
    description: "the directory's entries",
    content: json(FileListResponse, {
      files: [
        { name: 'data', path: '/workspace/data', size: 0, is_dir: true, is_directory: true, is_file: false, is_symlink: false, permissions: 'drwxr-xr-x', mode: '0755', modified: AT, modified_time: AT },
        { name: 'hello.py', path: '/workspace/hello.py', size: 15, is_dir: false, is_directory: false, is_file: true, is_symlink: false, permissions: '-rw-r--r--', mode: '0644', modified: LATER, modified_time: LATER },
      ],
      path: '/workspace',
      count: 2,
    }),
  },
  'POST /files/upload': {
    status: 200,
    description: 'stored at path (a directory path keeps the file name)',
    content: json(FileWrittenResponse, { success: true, path: '/workspace/data/sales.csv', size: 1_048_576 }),
    request: {
      content: {
        'multipart/form-data': {
          schema: Type.Object({
            file: Type.String({ format: 'binary', description: 'the bytes (one file part)' }),
            path: Type.Optional(Type.String({ description: 'where to put it (or ?path=); a directory keeps the file name' })),
            mode: Type.Optional(Type.String({ description: 'octal file mode, e.g. 0644' })),
          }),
        },
        'application/octet-stream': { schema: Type.String({ format: 'binary', description: 'the raw bytes, with ?path=' }) },
      },
    },
  },
  'GET /files/download': {
    status: 200,
    description: "the file's bytes, streamed, with a Content-Type from its name (application/octet-stream when unknown) and Content-Disposition: attachment",
    content: { '*/*': { schema: BINARY, example: 'print("hello")\n' } },
    more: [{ status: 206, description: 'a Range request (one range): those bytes, with Content-Range', content: { '*/*': { schema: BINARY, example: 'hello' } } }],
  },
  'GET /files/exists': {
    status: 200,
    description: 'whether it exists (false is a 200 too)',
    content: {
      'application/json': {
        schema: FileExistsResponse,
        examples: {
          file: { summary: 'a file', value: { exists: true, path: '/workspace/hello.py', is_dir: false, is_file: true, size: 15 } },
          missing: { summary: 'nothing there', value: { exists: false, path: '/workspace/nope.txt' } },
        },
      },
    },
  },
  'DELETE /files/remove': { status: 200, description: 'removed', content: json(FileDoneResponse, { success: true, path: '/workspace/data', message: 'removed' }) },
  'POST /files/mkdir': {
    status: 200,
    description: 'made (with its parents)',
    content: json(FileDoneResponse, { success: true, path: '/workspace/out/plots', message: 'directory created' }),
    request: jsonRequest({ path: '/workspace/out/plots' }),
  },
  'GET /files/watch': {
    status: 101,
    description: 'Switching Protocols: the connection is a WebSocket. Send a watch frame (or give ?path=); one change frame comes per change below the directory, new subdirectories included.',
    frames: {
      client: { schema: WatchClientFrame, example: { action: 'watch', path: '/workspace', ack: true } },
      server: {
        schema: WatchServerFrame,
        examples: {
          watching: { summary: 'with ack: the whole tree is watched', value: { type: 'watching', path: '/workspace', timestamp: AT } },
          change: { summary: 'a change', value: { type: 'change', event: 'modified', path: '/workspace/hello.py', is_dir: false, timestamp: LATER } },
          renamed: { summary: 'a rename', value: { type: 'change', event: 'renamed', path: '/workspace/new.py', old_path: '/workspace/hello.py', is_dir: false, timestamp: LATER } },
        },
      },
    },
  },
  'GET /env': { status: 200, description: 'the environment set', content: json(EnvResponse, env({ APP_ENV: 'staging', API_URL: 'https://api.example.com' })) },
  'PUT /env': {
    status: 200,
    description: 'the set now (the one given)',
    content: json(EnvResponse, env({ APP_ENV: 'production' })),
    request: jsonRequest({ env_vars: { APP_ENV: 'production' } }),
  },
  'PATCH /env': {
    status: 200,
    description: 'the set now (merged)',
    content: json(EnvResponse, env({ APP_ENV: 'staging', API_URL: 'https://api.example.com', DEBUG: '1' })),
    request: jsonRequest({ env_vars: { DEBUG: '1' } }),
  },
  'DELETE /env/{key}': { status: 200, description: 'the set now (a variable that was not set is no error)', content: json(EnvResponse, env({ APP_ENV: 'staging' })) },
  'GET /metrics/snapshot': {
    status: 200,
    description: 'counters since the agent started, and the resource use now',
    content: json(MetricsSnapshotResponse, {
      timestamp: LATER,
      uptime_seconds: 84.12,
      total_requests: 57,
      total_errors: 2,
      error_count: 2,
      requests_total: { '/execute': 31, '/files/write': 12, '/health': 14 },
      total_executions: 31,
      failed_executions: 3,
      active_executions: 1,
      avg_duration_ms: 42.17,
      p95_duration_ms: 180.4,
      system,
      process: { count: 6, running: 1 },
      cache: { size: 2, hits: 5, misses: 9, hit_rate: 0.357 },
      agent: { pid: 2, rss_bytes: 61_440_000, heap_used_bytes: 9_830_400, heap_total_bytes: 14_680_064, external_bytes: 1_212_416, array_buffers_bytes: 18_432 },
    }),
  },
  'GET /system': { status: 200, description: 'cpu, memory and disk now', content: json(SystemResponse, system) },
  'GET /processes': {
    status: 200,
    description: "the sandbox's processes",
    content: json(ProcessTableResponse, {
      processes: [
        { pid: 1, ppid: 0, name: 'init', status: 'S', command: '/.sb/init -- /.sb/node/lib/ld-linux-x86-64.so.2 --library-path /.sb/node/lib /.sb/node/bin/node /.sb/agent/agent.cjs' },
        { pid: 2, ppid: 1, name: 'ld-linux-x86-64', status: 'S', command: '/.sb/node/lib/ld-linux-x86-64.so.2 --library-path /.sb/node/lib /.sb/node/bin/node /.sb/agent/agent.cjs' },
        { pid: 412, ppid: 2, name: 'python3', status: 'R', command: '/usr/bin/python3 /.sb/agent/sbx_kernel.py' },
      ],
      count: 3,
      timestamp: LATER,
    }),
  },
  'GET /cache/stats': {
    status: 200,
    description: 'the caches: compiled programs and opted-in results',
    content: json(CacheStatsResponse, {
      cache: { size: 2, hits: 5, misses: 9, max_size: 1000, total_hits: 5, ttl: 3600 },
      programs: { size: 1, hits: 3, misses: 1 },
      results: { size: 1, hits: 2, misses: 8 },
      timestamp: LATER,
    }),
  },
  'POST /cache/clear': { status: 200, description: 'emptied', content: json(CacheClearResponse, { success: true, message: 'cache cleared', entries_removed: 2, timestamp: LATER }) },
  'GET /terminal': {
    status: 101,
    description: 'Switching Protocols: the connection is a WebSocket to a shell on a pseudo-terminal. Input and resize frames go in; output frames come out, then exit when the shell ends.',
    frames: {
      client: {
        schema: TerminalClientFrame,
        examples: { input: { summary: 'keys typed', value: { type: 'input', data: 'ls -la\r' } }, resize: { summary: 'the window changed', value: { type: 'resize', cols: 120, rows: 40 } } },
      },
      server: {
        schema: TerminalServerFrame,
        examples: { output: { summary: 'what the terminal shows', value: { type: 'output', data: 'total 8\r\ndrwxr-xr-x 2 root root 4096 Jun  2 09:14 .\r\n', timestamp: LATER } }, exit: { summary: 'the shell ended', value: { type: 'exit', code: 0 } } },
      },
    },
  },
  ...DESKTOP_RESPONSES,
};
