import { Type, type TSchema } from '@sinclair/typebox';
import { Env } from './agent-routes.js';

/**
 * What the agent answers, as TypeBox schemas for the OpenAPI document (the agent itself uses the
 * interfaces of agent.ts, which load nothing; agent-responses.test checks that they agree).
 */

const nullable = <T extends TSchema>(t: T, description?: string) => Type.Union([t, Type.Null()], description ? { description } : {});
const timestamp = Type.String({ description: 'ISO 8601 UTC' });

const PROCESS_STATUS = Type.Union([Type.Literal('running'), Type.Literal('completed'), Type.Literal('failed'), Type.Literal('killed'), Type.Literal('timeout')]);

export const AgentHealthResponse = Type.Object({
  status: Type.Literal('healthy'),
  version: Type.String(),
  uptime_seconds: Type.Number(),
  features: Type.Array(Type.String(), { description: 'code_execution, file_operations, commands, ... (terminal where the sandbox can have one)' }),
  languages: Type.Array(Type.String()),
  active_executions: Type.Integer(),
});

export const AgentInfoResponse = Type.Object({
  agent: Type.String(),
  version: Type.String(),
  sandbox_id: Type.String(),
  vm_id: Type.String({ description: 'the sandbox id again (what some clients read)' }),
  started_at: timestamp,
  start_time: timestamp,
  platform: Type.String(),
  node_version: Type.String(),
  workspace: Type.String({ description: 'the default working directory' }),
  languages: Type.Array(Type.String()),
});

const RichOutput = Type.Object({
  type: Type.String({ description: 'image, html or json' }),
  path: Type.String({ description: 'a file in the sandbox; GET /files/download serves it' }),
  mime: Type.String(),
});

/** The answer of /execute, /execute/rich and /execute/ipython: a failure or timeout of the code is a 200 with success false. */
export const ExecuteResponse = Type.Object({
  success: Type.Boolean(),
  stdout: Type.String(),
  stderr: Type.String(),
  exit_code: Type.Integer({ description: '124 on a timeout' }),
  execution_time: Type.Number({ description: 'seconds' }),
  timed_out: Type.Boolean(),
  language: Type.String(),
  timestamp,
  execution_id: Type.Optional(Type.String()),
  context_id: Type.Optional(Type.String({ description: 'the code context it ran in (absent: a fresh process)' })),
  truncated: Type.Optional(Type.Boolean({ description: 'output past the cap (10 MiB a stream by default) was dropped' })),
  killed: Type.Optional(Type.Boolean()),
  result: Type.Optional(Type.String({ description: 'repr() of the last expression (Python)' })),
  png: Type.Optional(Type.String({ description: 'base64 of the last figure' })),
  svg: Type.Optional(Type.String()),
  html: Type.Optional(Type.String()),
  json: Type.Optional(Type.Unknown()),
  markdown: Type.Optional(Type.String()),
  rich_outputs: Type.Optional(Type.Array(RichOutput, { description: '/execute/rich only' })),
  cached: Type.Optional(Type.Boolean({ description: 'served from the execution cache' })),
  kernel_restarted: Type.Optional(Type.Boolean({ description: "the context's kernel died: earlier state is gone" })),
});

export const CommandResponse = Type.Object({
  success: Type.Boolean(),
  stdout: Type.String(),
  stderr: Type.String(),
  exit_code: Type.Integer(),
  execution_time: Type.Number({ description: 'seconds' }),
  timed_out: Type.Boolean(),
  command: Type.String(),
  timestamp,
  pid: Type.Optional(nullable(Type.Integer())),
  truncated: Type.Optional(Type.Boolean()),
  killed: Type.Optional(Type.Boolean()),
});

/** /execute/background and /commands/background. */
export const BackgroundStartedResponse = Type.Object({
  process_id: Type.String({ description: 'proc_ and 16 hex digits' }),
  execution_id: Type.String({ description: 'the same as process_id' }),
  name: Type.String(),
  status: Type.Literal('running'),
  started_at: timestamp,
  start_time: timestamp,
  pid: nullable(Type.Integer()),
  message: Type.String(),
});

/** /execute/async (202). */
export const AsyncStartedResponse = Type.Composite([BackgroundStartedResponse, Type.Object({ callback_url: Type.String() })]);

const CallbackDelivery = Type.Object({
  url: Type.String(),
  status: Type.Union([Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('failed')]),
  attempts: Type.Integer(),
  last_status_code: Type.Optional(Type.Integer()),
  error: Type.Optional(Type.String()),
  delivered_at: Type.Optional(timestamp),
});

export const ProcessInfoResponse = Type.Object({
  process_id: Type.String(),
  execution_id: Type.String(),
  name: Type.String(),
  kind: Type.Union([Type.Literal('execute'), Type.Literal('command')]),
  background: Type.Boolean(),
  status: PROCESS_STATUS,
  language: Type.String(),
  started_at: timestamp,
  start_time: timestamp,
  end_time: nullable(timestamp),
  exit_code: nullable(Type.Integer()),
  duration: nullable(Type.Number(), 'seconds, once ended'),
  pid: nullable(Type.Integer()),
  stdout: Type.Optional(Type.String({ description: 'finished background executions only' })),
  stderr: Type.Optional(Type.String()),
  truncated: Type.Optional(Type.Boolean()),
  callback: Type.Optional(CallbackDelivery),
});

export const ProcessListResponse = Type.Object({ processes: Type.Array(ProcessInfoResponse), count: Type.Integer(), timestamp });

/** One piece of a background process's output: its stream, its offset in the output of both streams, its text. */
export const ProcessOutputChunk = Type.Object({
  stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]),
  offset: Type.Integer({ minimum: 0, description: 'bytes of output (both streams) before this piece' }),
  data: Type.String(),
});

export const ProcessOutputResponse = Type.Object({
  process_id: Type.String(),
  status: PROCESS_STATUS,
  exit_code: nullable(Type.Integer()),
  since: Type.Integer({ minimum: 0, description: 'the offset asked for' }),
  next_offset: Type.Integer({ minimum: 0, description: 'where the next read starts (since= of the next call)' }),
  start_offset: Type.Integer({ minimum: 0, description: 'the oldest byte still kept' }),
  end_offset: Type.Integer({ minimum: 0, description: 'every byte written so far' }),
  lost_bytes: Type.Integer({ minimum: 0, description: 'bytes between since and next_offset no longer kept' }),
  complete: Type.Boolean({ description: 'the process ended and this read reached the end of its output' }),
  chunks: Type.Array(ProcessOutputChunk),
});

/** Server-sent events of GET /processes/{id}/attach. */
export const ProcessLostEvent = Type.Object({
  offset: Type.Integer({ minimum: 0 }),
  bytes: Type.Integer({ minimum: 1, description: 'output from offset that was dropped before this client read it' }),
});
export const ProcessExitEvent = Type.Object({
  status: PROCESS_STATUS,
  exit_code: nullable(Type.Integer()),
  next_offset: Type.Integer({ minimum: 0 }),
});

export const KillResponse = Type.Object({
  process_id: Type.String(),
  status: PROCESS_STATUS,
  message: Type.String(),
});

export const FileReadResponse = Type.Object({
  content: Type.String(),
  path: Type.String(),
  size: Type.Integer({ description: 'bytes' }),
  encoding: Type.Union([Type.Literal('utf8'), Type.Literal('base64')]),
});

/** /files/write and /files/upload. */
export const FileWrittenResponse = Type.Object({ success: Type.Literal(true), path: Type.String(), size: Type.Integer({ description: 'bytes written' }) });

const FileEntry = Type.Object({
  name: Type.String(),
  path: Type.String(),
  size: Type.Integer(),
  is_dir: Type.Boolean(),
  is_directory: Type.Boolean(),
  is_file: Type.Boolean(),
  is_symlink: Type.Boolean(),
  permissions: Type.String({ description: 'ls -l style, e.g. -rw-r--r--' }),
  mode: Type.String({ description: 'octal, e.g. 0644' }),
  modified: timestamp,
  modified_time: timestamp,
});

export const FileListResponse = Type.Object({ files: Type.Array(FileEntry), path: Type.String(), count: Type.Integer() });

export const FileExistsResponse = Type.Object({
  exists: Type.Boolean(),
  path: Type.String(),
  is_dir: Type.Optional(Type.Boolean()),
  is_file: Type.Optional(Type.Boolean()),
  size: Type.Optional(Type.Integer()),
});

/** /files/remove and /files/mkdir. */
export const FileDoneResponse = Type.Object({ success: Type.Literal(true), path: Type.String(), message: Type.String() });

export const EnvResponse = Type.Object({ env_vars: Env, count: Type.Integer(), timestamp });

export const SystemResponse = Type.Object({
  cpu: Type.Object({
    usage_percent: Type.Number(),
    cores: Type.Number(),
    usage_seconds: Type.Number(),
    source: Type.String({ description: 'cgroup, or processes where the cgroup is not readable' }),
  }),
  memory: Type.Object({
    total: Type.Number({ description: 'bytes' }),
    used: Type.Number(),
    free: Type.Number(),
    usage_percent: Type.Number(),
    source: Type.String(),
  }),
  disk: Type.Object({ total: Type.Number({ description: 'bytes' }), used: Type.Number(), free: Type.Number(), usage_percent: Type.Number(), path: Type.String() }),
});

export const MetricsSnapshotResponse = Type.Object({
  timestamp,
  uptime_seconds: Type.Number(),
  total_requests: Type.Integer(),
  total_errors: Type.Integer(),
  error_count: Type.Integer(),
  requests_total: Type.Record(Type.String(), Type.Integer(), { description: 'by request path' }),
  total_executions: Type.Integer(),
  failed_executions: Type.Integer(),
  active_executions: Type.Integer(),
  avg_duration_ms: Type.Number(),
  p95_duration_ms: Type.Number(),
  system: SystemResponse,
  process: Type.Object({ count: Type.Integer({ description: 'processes in the sandbox' }), running: Type.Integer({ description: 'executions running' }) }),
  cache: Type.Object({ size: Type.Integer(), hits: Type.Integer(), misses: Type.Integer(), hit_rate: Type.Number() }),
  agent: Type.Object({
    pid: Type.Integer(),
    rss_bytes: Type.Integer(),
    heap_used_bytes: Type.Integer(),
    heap_total_bytes: Type.Integer(),
    external_bytes: Type.Integer(),
    array_buffers_bytes: Type.Integer(),
  }),
});

export const ProcessTableResponse = Type.Object({
  processes: Type.Array(
    Type.Object({
      pid: Type.Integer(),
      ppid: Type.Integer(),
      name: Type.String(),
      status: Type.String({ description: 'the state letter of /proc/<pid>/stat (R, S, Z, ...)' }),
      command: Type.String(),
    }),
  ),
  count: Type.Integer(),
  timestamp,
});

const CacheCounts = Type.Object({ size: Type.Integer(), hits: Type.Integer(), misses: Type.Integer() });
export const CacheStatsResponse = Type.Object({
  cache: Type.Object({
    size: Type.Integer(),
    hits: Type.Integer(),
    misses: Type.Integer(),
    max_size: Type.Integer(),
    total_hits: Type.Integer(),
    ttl: Type.Integer({ description: 'seconds a cached result is kept' }),
  }),
  programs: CacheCounts,
  results: CacheCounts,
  timestamp,
});

export const CacheClearResponse = Type.Object({ success: Type.Literal(true), message: Type.String(), entries_removed: Type.Integer(), timestamp });

// WebSocket frames: JSON text messages, after the upgrade.

/** An error frame: the error body's fields (code, incident_id, ...) with `error` the message. */
const ErrorFrame = Type.Object({ type: Type.Literal('error'), error: Type.String(), code: Type.String() }, { additionalProperties: true });
const OutputFrame = <T extends string>(...types: T[]) =>
  Type.Object({ type: Type.Union(types.map((t) => Type.Literal(t))), data: Type.String(), timestamp: Type.Optional(timestamp) });

export const ExecuteStreamClientFrame = Type.Union([
  Type.Object({
    type: Type.Literal('execute'),
    code: Type.String(),
    language: Type.Optional(Type.String()),
    timeout: Type.Optional(Type.Number()),
    workdir: Type.Optional(Type.String()),
    working_dir: Type.Optional(Type.String()),
    env: Type.Optional(Env),
    context_id: Type.Optional(Type.String()),
  }),
  Type.Object({ type: Type.Union([Type.Literal('kill'), Type.Literal('cancel')]) }),
]);
export const ExecuteStreamServerFrame = Type.Union([
  OutputFrame('stdout', 'stderr'),
  Type.Object({
    type: Type.Literal('result'),
    exit_code: Type.Integer(),
    execution_time: Type.Number(),
    success: Type.Boolean(),
    timed_out: Type.Boolean(),
    execution_id: Type.Optional(Type.String()),
    context_id: Type.Optional(Type.String()),
    kernel_restarted: Type.Optional(Type.Boolean()),
    result: Type.Optional(Type.String()),
    truncated: Type.Optional(Type.Boolean()),
    png: Type.Optional(Type.String()),
    timestamp: Type.Optional(timestamp),
  }),
  Type.Object({ type: Type.Literal('complete'), success: Type.Boolean() }),
  ErrorFrame,
]);

export const TerminalClientFrame = Type.Union([
  Type.Object({ type: Type.Literal('input'), data: Type.String() }),
  Type.Object({ type: Type.Literal('resize'), cols: Type.Integer({ minimum: 1 }), rows: Type.Integer({ minimum: 1 }) }),
]);
export const TerminalServerFrame = Type.Union([
  OutputFrame('output'),
  Type.Object({ type: Type.Literal('exit'), code: Type.Integer() }),
  ErrorFrame,
]);

export const WatchClientFrame = Type.Union([
  Type.Object({
    action: Type.Literal('watch'),
    path: Type.Optional(Type.String({ description: 'default: the workspace' })),
    ack: Type.Optional(Type.Boolean({ description: 'answer {type: "watching"} once the whole tree is watched' })),
  }),
  Type.Object({ action: Type.Literal('unwatch') }),
]);
export const WatchServerFrame = Type.Union([
  Type.Object({
    type: Type.Literal('change'),
    event: Type.Union([Type.Literal('created'), Type.Literal('modified'), Type.Literal('deleted'), Type.Literal('renamed')]),
    path: Type.String(),
    is_dir: Type.Boolean(),
    old_path: Type.Optional(Type.String({ description: 'renamed only' })),
    timestamp: Type.Optional(timestamp),
  }),
  Type.Object({ type: Type.Literal('watching'), path: Type.String(), timestamp: Type.Optional(timestamp) }),
  Type.Object({ type: Type.Literal('warning'), code: Type.String(), message: Type.String() }),
  ErrorFrame,
]);
