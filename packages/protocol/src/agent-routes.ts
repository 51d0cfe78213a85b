import { Type, type TSchema } from '@sinclair/typebox';
import { EnvVars } from './lifecycle/index.js';
import { DESKTOP_ROUTES } from './agent-desktop.js';

/** Request schemas of the agent API, shared by the OpenAPI document and the agent's validation. */
export const Env = EnvVars;

/** What code and commands both take: limits, place, environment and input. */
const runFields = {
  timeout: Type.Optional(Type.Number({ minimum: 0, description: 'seconds, default 60' })),
  working_dir: Type.Optional(Type.String()),
  workdir: Type.Optional(Type.String()),
  env: Type.Optional(Env),
  stdin: Type.Optional(Type.String({ description: "written to the program's stdin, then closed (default: /dev/null)" })),
  stdin_encoding: Type.Optional(Type.Union([Type.Literal('utf8'), Type.Literal('base64')])),
};

export const ExecuteBody = Type.Object({
  code: Type.String({ description: 'code to run' }),
  language: Type.Optional(Type.String({ description: 'python (default), javascript, bash, go, or an alias' })),
  ...runFields,
  cache: Type.Optional(Type.Boolean({ description: 'serve and store the result in the execution cache' })),
});

export const AsyncExecuteBody = Type.Composite([
  ExecuteBody,
  Type.Object({
    callback_url: Type.String({ description: 'http(s) URL the result is POSTed to when the code ends (from inside the sandbox)' }),
    callback_headers: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'extra headers of the callback request' })),
    callback_signature_secret: Type.Optional(Type.String({ description: 'HMAC-SHA256 key: X-Sandboxd-Signature: sha256=<hex of the body>' })),
  }),
]);

export const CommandBody = Type.Object({
  command: Type.String(),
  args: Type.Optional(Type.Array(Type.String())),
  ...runFields,
});

export const PathQuery = Type.Object({ path: Type.String() });
export const FileWriteBody = Type.Object({
  path: Type.String(),
  content: Type.String(),
  encoding: Type.Optional(Type.Union([Type.Literal('utf8'), Type.Literal('utf-8'), Type.Literal('base64')])),
  mode: Type.Optional(Type.String({ pattern: '^0?[0-7]{3,4}$' })),
  overwrite: Type.Optional(Type.Boolean()),
});
export const MkdirBody = Type.Object({ path: Type.String() });
export const EnvBody = Type.Object({ env_vars: Env, merge: Type.Optional(Type.Boolean()) });

export interface AgentRouteDoc {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  summary: string;
  body?: TSchema;
  query?: TSchema;
  websocket?: boolean;
  contentType?: string;
}

/** Every route of the agent interface (served at a sandbox's public_host). */
export const AGENT_ROUTES: AgentRouteDoc[] = [
  { method: 'GET', path: '/health', summary: 'agent health' },
  { method: 'GET', path: '/info', summary: 'agent and sandbox identity' },
  { method: 'POST', path: '/execute', summary: 'run code and wait for the result', body: ExecuteBody },
  { method: 'POST', path: '/execute/rich', summary: 'run code; also list rich outputs (figures)', body: ExecuteBody },
  { method: 'POST', path: '/execute/background', summary: 'run code in the background', body: ExecuteBody },
  { method: 'POST', path: '/execute/async', summary: 'run code in the background; POST the result to callback_url (202)', body: AsyncExecuteBody },
  { method: 'POST', path: '/execute/ipython', summary: 'run Python; the last expression comes back as result', body: ExecuteBody },
  { method: 'GET', path: '/execute/processes', summary: 'running and recently finished executions' },
  { method: 'POST', path: '/execute/kill/{process_id}', summary: 'kill an execution and its process group' },
  { method: 'DELETE', path: '/execute/kill', summary: 'kill an execution (query process_id)', query: Type.Object({ process_id: Type.String() }) },
  { method: 'GET', path: '/execute/stream', summary: 'WebSocket: run code, stream stdout/stderr frames', websocket: true },
  {
    method: 'GET',
    path: '/processes/{process_id}/output',
    summary: "a background process's output from an offset (kept while it runs and after)",
    query: Type.Object({
      since: Type.Optional(Type.Integer({ minimum: 0, description: 'offset to read from (next_offset of the last read), default 0' })),
      max_bytes: Type.Optional(Type.Integer({ minimum: 1, maximum: 16777216, description: 'most output to return, default 4 MiB' })),
    }),
  },
  {
    method: 'GET',
    path: '/processes/{process_id}/attach',
    summary: "server-sent events: a background process's output from an offset, then live until it exits",
    query: Type.Object({ since: Type.Optional(Type.Integer({ minimum: 0, description: 'offset to replay from (default 0, or the Last-Event-ID header)' })) }),
  },
  { method: 'POST', path: '/commands/run', summary: 'run a command', body: CommandBody },
  { method: 'POST', path: '/commands/background', summary: 'run a command in the background', body: CommandBody },
  { method: 'GET', path: '/files/read', summary: 'read a text file as JSON', query: PathQuery },
  { method: 'POST', path: '/files/write', summary: 'write a file (text or base64)', body: FileWriteBody },
  { method: 'GET', path: '/files/list', summary: 'list a directory', query: PathQuery },
  { method: 'POST', path: '/files/upload', summary: 'multipart upload (parts: file, path), streamed', contentType: 'multipart/form-data' },
  { method: 'GET', path: '/files/download', summary: 'download a file (streamed bytes)', query: PathQuery },
  { method: 'GET', path: '/files/exists', summary: 'whether a path exists', query: PathQuery },
  { method: 'DELETE', path: '/files/remove', summary: 'remove a file or directory (recursive)', query: PathQuery },
  { method: 'POST', path: '/files/mkdir', summary: 'create a directory with its parents', body: MkdirBody },
  {
    method: 'GET',
    path: '/files/watch',
    summary: 'WebSocket: changes below a directory (created, modified, deleted, renamed)',
    websocket: true,
    query: Type.Object({
      path: Type.Optional(Type.String({ description: 'start watching this directory at once (or send a watch frame)' })),
      ack: Type.Optional(Type.String({ description: '1 or true: send {type: "watching"} once the tree is watched' })),
    }),
  },
  { method: 'GET', path: '/env', summary: 'the sandbox environment set' },
  { method: 'PUT', path: '/env', summary: 'replace the environment set', body: EnvBody },
  { method: 'PATCH', path: '/env', summary: 'merge into the environment set', body: EnvBody },
  { method: 'DELETE', path: '/env/{key}', summary: 'remove one variable' },
  { method: 'GET', path: '/metrics/snapshot', summary: 'request counters and the sandbox cpu, memory, disk' },
  { method: 'GET', path: '/system', summary: 'the sandbox cpu, memory and disk' },
  { method: 'GET', path: '/processes', summary: 'every process running in the sandbox (pid, name, command)' },
  { method: 'GET', path: '/cache/stats', summary: 'execution/compile cache statistics' },
  { method: 'POST', path: '/cache/clear', summary: 'empty the cache' },
  {
    method: 'GET',
    path: '/terminal',
    summary: 'WebSocket: interactive PTY',
    websocket: true,
    query: Type.Object({
      cols: Type.Optional(Type.Integer({ minimum: 1, maximum: 9999, default: 80 })),
      rows: Type.Optional(Type.Integer({ minimum: 1, maximum: 9999, default: 24 })),
    }),
  },
  // The desktop (desktop-capable templates; any other answers 501 DESKTOP_NOT_AVAILABLE).
  ...DESKTOP_ROUTES,
];
