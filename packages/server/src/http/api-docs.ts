import type { ErrorCode } from '@sandboxd/protocol';
import { desktopOperations } from './api-desktop.js';

/**
 * What the OpenAPI document says of each operation beyond its schemas: the group it is listed in,
 * a summary, a description, and the error codes it answers with (besides the ones every
 * authenticated call may give: AUTHENTICATION_ERROR, TOKEN_EXPIRED, and INTERNAL_ERROR). Keyed by
 * `METHOD path` as the document writes it (agent paths without their /agent prefix); openapi.test
 * checks that every served operation has an entry.
 */
export type { OperationDoc } from './api-doc-types.js';
import type { OperationDoc } from './api-doc-types.js';

/** The groups, in the order /docs lists them. */
export const TAGS: Array<{ name: string; description: string }> = [
  { name: 'sandboxes', description: 'Create sandboxes from templates, list them, change their state, extend their timeout, delete them.' },
  { name: 'snapshots', description: "Save a sandbox's files, create sandboxes from them, fork a sandbox, roll it back, turn a snapshot into a template." },
  { name: 'volumes', description: 'Filesystems that outlive sandboxes: made once, mounted by any number of the organization\'s sandboxes at create (`volumes` of `POST /v1/sandboxes`).' },
  { name: 'events', description: 'Server-sent events of sandbox state changes.' },
  { name: 'templates', description: 'The templates sandboxes are made from: list, inspect, delete.' },
  { name: 'builds', description: 'Build custom templates from steps, upload their files, follow their logs.' },
  { name: 'account', description: "The caller's organization: its limits and usage." },
  { name: 'admin', description: "Organizations, API keys and the nodes: for keys of the operator's organization with the admin scope." },
  { name: 'service', description: 'Health and Prometheus metrics of the service.' },
  { name: 'code', description: "Agent API (at a sandbox's public_host): run code, in stateful contexts or fresh processes." },
  { name: 'commands', description: 'Agent API: run commands, in the foreground or the background.' },
  { name: 'files', description: "Agent API: read, write, list, move and watch the sandbox's files." },
  { name: 'env', description: 'Agent API: the environment variables every later execution and command gets.' },
  { name: 'processes', description: 'Agent API: background executions and every process of the sandbox.' },
  { name: 'streams', description: 'Agent API: WebSocket endpoints (streamed execution, terminal, file changes).' },
  { name: 'system', description: "Agent API: the agent's health, identity, the sandbox's resource use and the execution cache." },
  { name: 'desktop', description: 'Agent API, on desktop templates: screenshots, mouse, keyboard, clipboard, windows, display, recordings, OCR, VNC (docs/desktop.md).' },
];

const SANDBOX_ID: ErrorCode[] = ['NOT_FOUND', 'PERMISSION_DENIED', 'SANDBOX_EXPIRED'];
const ACTION: ErrorCode[] = [...SANDBOX_ID, 'INVALID_STATE', 'RUNTIME_ERROR', 'AGENT_UNAVAILABLE'];
const AGENT: ErrorCode[] = ['SANDBOX_PAUSED', 'SANDBOX_STOPPED', 'AGENT_UNAVAILABLE', 'RATE_LIMIT_EXCEEDED'];
const RUN: ErrorCode[] = [...AGENT, 'VALIDATION_ERROR', 'INVALID_LANGUAGE', 'PAYLOAD_TOO_LARGE'];
const FILE: ErrorCode[] = [...AGENT, 'VALIDATION_ERROR', 'INVALID_PATH', 'FILE_NOT_FOUND', 'PERMISSION_DENIED'];

export const OPERATIONS: Record<string, OperationDoc> = {
  // The lifecycle API.
  'GET /health': { tag: 'service', summary: 'Service health', description: 'Answers `{status: "ok", version}` while the service runs. No credentials.', errors: [] },
  'GET /metrics': {
    tag: 'service',
    summary: 'Prometheus metrics',
    description: 'The service in the Prometheus text format: requests, creates, sandboxes by state, the warm pool, builds, errors, node capacity. Needs `metrics:read`, or is served without credentials on `SANDBOXD_METRICS_LISTEN` instead.',
    errors: ['PERMISSION_DENIED', 'ROUTE_NOT_FOUND'],
  },
  'POST /v1/sandboxes': {
    tag: 'sandboxes',
    summary: 'Create a sandbox',
    description: 'Starts a sandbox from a template (`template_name` or `template_id`) and answers once its agent answers, with the `auth_token` for its `public_host`. Served from the warm pool when one is ready. A sandbox can sleep: `idle_timeout_seconds` pauses it when unused, `on_timeout: "pause"` makes its deadline pause it (kept for the retention time, then deleted), `auto_resume` wakes it on a request to its `public_host`.',
    errors: ['VALIDATION_ERROR', 'TEMPLATE_NOT_FOUND', 'TEMPLATE_NOT_READY', 'VOLUME_NOT_FOUND', 'PERMISSION_DENIED', 'LIMIT_EXCEEDED', 'ORG_QUOTA_EXCEEDED', 'RATE_LIMIT_EXCEEDED', 'INSUFFICIENT_STORAGE', 'RUNTIME_ERROR'],
  },
  'GET /v1/sandboxes': {
    tag: 'sandboxes',
    summary: 'List sandboxes',
    description: "The organization's sandboxes, newest first, a page at a time (`limit`, then `cursor` = the last answer's `next_cursor`); filter by `status`, `template`, `region`.",
    errors: ['VALIDATION_ERROR', 'PERMISSION_DENIED'],
  },
  'GET /v1/sandboxes/{id}': { tag: 'sandboxes', summary: 'Get a sandbox', description: 'One sandbox: state, template, resources, deadlines and its `public_host`.', errors: SANDBOX_ID },
  'DELETE /v1/sandboxes/{id}': {
    tag: 'sandboxes',
    summary: 'Delete a sandbox',
    description: 'Deletes it for every client at once (no route, no token, `GET` answers 404); its container, disk and network leave the host right after the answer.',
    errors: [...SANDBOX_ID, 'INVALID_STATE'],
  },
  'POST /v1/sandboxes/{id}/pause': { tag: 'sandboxes', summary: 'Pause a sandbox', description: 'Freezes every process (memory kept); its URL answers 409 `SANDBOX_PAUSED` until it is resumed (or, with `auto_resume`, wakes it). The `paused` event says `reason: "api"`.', errors: ACTION },
  'POST /v1/sandboxes/{id}/resume': { tag: 'sandboxes', summary: 'Resume a paused sandbox', description: 'Its processes continue where they were frozen.', errors: ACTION },
  'POST /v1/sandboxes/{id}/stop': { tag: 'sandboxes', summary: 'Stop a sandbox', description: 'Ends every process and keeps the filesystem; `start` boots it again.', errors: ACTION },
  'POST /v1/sandboxes/{id}/start': { tag: 'sandboxes', summary: 'Start a stopped sandbox', description: 'A fresh boot on the preserved filesystem, with the same id and URL.', errors: [...ACTION, 'ORG_QUOTA_EXCEEDED', 'INSUFFICIENT_STORAGE'] },
  'PUT /v1/sandboxes/{id}/timeout': {
    tag: 'sandboxes',
    summary: 'Set the timeout',
    description: 'The sandbox is deleted `timeout_seconds` from now (within the organization’s maximum).',
    errors: [...SANDBOX_ID, 'VALIDATION_ERROR', 'LIMIT_EXCEEDED', 'INVALID_STATE'],
  },
  'POST /v1/sandboxes/{id}/token/refresh': { tag: 'sandboxes', summary: 'Refresh the sandbox token', description: 'A new `auth_token` for the sandbox’s URL; older ones stay valid until they expire.', errors: [...SANDBOX_ID, 'INVALID_STATE'] },
  'GET /v1/sandboxes/{id}/metrics': {
    tag: 'sandboxes',
    summary: "A sandbox's resource use",
    description: 'CPU, memory, disk, network received and sent, processes and OOM kills of one sandbox, read when asked.',
    errors: [...SANDBOX_ID, 'INVALID_STATE'],
  },
  'GET /v1/sandboxes/{id}/ports': {
    tag: 'sandboxes',
    summary: 'What listens inside a sandbox',
    description:
      "The TCP ports something listens on inside the sandbox, on any address (loopback included), read from the kernel's tables of its network namespace rather than asked of the sandbox. Empty when it is stopped.",
    errors: [...SANDBOX_ID],
  },
  'GET /v1/sandboxes/{id}/ports/{port}': {
    tag: 'sandboxes',
    summary: "A port's preview URL",
    description:
      'The URL where what listens on `port` inside the sandbox (on any address, loopback included) is served: HTTP, WebSocket and server-sent events pass through. Made on first ask and kept across restarts; private unless made public with PUT. A private preview takes the sandbox `auth_token` in the `X-Sandboxd-Token` header, or a browser opens `signed_url` (valid 10 minutes), which sets a session cookie for this port (24 h) and redirects to `/`. The path `/_sandboxd/auth` of a preview is the gateway\'s. When nothing listens on the port, the URL answers 502 `PORT_NOT_LISTENING`.',
    errors: [...SANDBOX_ID, 'VALIDATION_ERROR', 'LIMIT_EXCEEDED'],
  },
  'PUT /v1/sandboxes/{id}/ports/{port}': {
    tag: 'sandboxes',
    summary: 'Make a preview public or private',
    description: '`{public: true}`: anyone with the URL reaches the port (and wakes the sandbox if it sleeps with auto_resume); `{public: false}`: only with the sandbox token or a signed link. Applies to the next request.',
    errors: [...SANDBOX_ID, 'VALIDATION_ERROR', 'LIMIT_EXCEEDED'],
  },
  'GET /v1/sandboxes/{id}/network': {
    tag: 'sandboxes',
    summary: "A sandbox's egress policy",
    description: '`internet_access`, `allow_out` and `deny_out` as they apply now. Refused connections are counted in `egress_denied` of `GET /v1/sandboxes/{id}/metrics`.',
    errors: [...SANDBOX_ID],
  },
  'PUT /v1/sandboxes/{id}/network': {
    tag: 'sandboxes',
    summary: "Replace a sandbox's egress policy",
    description:
      'Replaces the whole policy (omitted fields take their defaults: `internet_access` true, no lists); new connections follow it within a second, without a restart, and it is kept across stop/start and daemon restarts. An entry is an IPv4 address, an IPv4 CIDR, a domain or a `*.` wildcard domain (any name below it). Deny wins over allow; with an allow list, everything else is refused. Domain entries are judged on the name a connection carries (TLS SNI on port 443, the Host header of every HTTP request on port 80), and that name must resolve to the address connected to; a domain entry opens HTTP and HTTPS to that name, other ports need an address entry. The built-in protections (host, private ranges, metadata, other sandboxes) stay on under every policy. A refused connection is reset at once. A sandbox created with `internet_access: false` has no network: giving it one answers 409.',
    errors: [...SANDBOX_ID, 'VALIDATION_ERROR', 'INVALID_STATE', 'RUNTIME_ERROR'],
  },
  'POST /v1/sandboxes/{id}/snapshots': {
    tag: 'snapshots',
    summary: "Snapshot a sandbox's files",
    description:
      "Saves the sandbox's filesystem (what it changed over its template, or over the snapshot it came from), its environment (create-time `env_vars` and the agent's `/env` set) and its template's settings. A running sandbox is frozen for the copy, so what is saved is one moment of it, and resumes by itself; a paused or stopped one is copied as it is. Processes are not saved: a sandbox made from it starts them fresh. The snapshot belongs to the organization, outlives the sandbox, and counts against `max_snapshot_storage_mb` and `max_total_disk_gb` with its `size`.",
    errors: [...SANDBOX_ID, 'VALIDATION_ERROR', 'INVALID_STATE', 'ORG_QUOTA_EXCEEDED', 'LIMIT_EXCEEDED', 'INSUFFICIENT_STORAGE', 'RUNTIME_ERROR'],
  },
  'POST /v1/volumes': {
    tag: 'volumes',
    summary: 'Create a volume',
    description:
      "A filesystem of `size_gb` (a hard limit: writes past it fail with ENOSPC inside) on the machine, named uniquely in the organization. It counts in `max_total_disk_gb` with its whole size from now until it is deleted. Sandboxes mount it at create (`volumes: [{name, path, read_only?}]`); any number of the organization's sandboxes share it read-write at once, and root in each sees its files as its own.",
    errors: ['VALIDATION_ERROR', 'ALREADY_EXISTS', 'PERMISSION_DENIED', 'ORG_QUOTA_EXCEEDED', 'INSUFFICIENT_STORAGE', 'INVALID_STATE', 'RUNTIME_ERROR'],
  },
  'GET /v1/volumes': { tag: 'volumes', summary: "The organization's volumes", description: 'By name, each with the sandboxes (not deleted) that mount it.', errors: ['PERMISSION_DENIED'] },
  'GET /v1/volumes/{nameOrId}': {
    tag: 'volumes',
    summary: 'One volume',
    description: 'By name or id, with `used_bytes`: what its filesystem holds now. Another organization\'s volume is a 404.',
    errors: ['VOLUME_NOT_FOUND', 'PERMISSION_DENIED'],
  },
  'DELETE /v1/volumes/{nameOrId}': {
    tag: 'volumes',
    summary: 'Delete a volume',
    description:
      'Refused with 409 `VOLUME_IN_USE` while a sandbox (running, paused or stopped) mounts it. With `?force=true`, those sandboxes are deleted first. Its files are gone when it answers: unmounted, its loop device freed, its image removed.',
    errors: ['VOLUME_NOT_FOUND', 'VOLUME_IN_USE', 'PERMISSION_DENIED', 'VALIDATION_ERROR', 'INVALID_STATE'],
  },
  'GET /v1/snapshots': {
    tag: 'snapshots',
    summary: "The organization's snapshots",
    description: 'Newest first, a page at a time (`limit`, `cursor` from `next_cursor`); `sandbox_id` keeps those of one sandbox.',
    errors: ['VALIDATION_ERROR'],
  },
  'GET /v1/snapshots/{id}': { tag: 'snapshots', summary: 'One snapshot', description: 'The snapshot, with the size it stores itself.', errors: ['SNAPSHOT_NOT_FOUND', 'PERMISSION_DENIED'] },
  'DELETE /v1/snapshots/{id}': {
    tag: 'snapshots',
    summary: 'Delete a snapshot',
    description: 'Its storage is freed once nothing else uses it: sandboxes made from it, snapshots taken of those, and templates promoted from it keep what they mount.',
    errors: ['SNAPSHOT_NOT_FOUND', 'PERMISSION_DENIED'],
  },
  'POST /v1/snapshots/{id}/template': {
    tag: 'snapshots',
    summary: 'Promote a snapshot to a template',
    description: "A template of the organization named `alias`: its sandboxes start with the snapshot's files, settings and env set, from the warm pool like any template's. It keeps what it mounts when the snapshot is deleted.",
    errors: ['SNAPSHOT_NOT_FOUND', 'PERMISSION_DENIED', 'VALIDATION_ERROR', 'TEMPLATE_EXISTS'],
  },
  'POST /v1/sandboxes/{id}/fork': {
    tag: 'snapshots',
    summary: 'Fork a sandbox',
    description:
      "`count` (1-20) new running sandboxes with the source's files as they are now (one copy, the source frozen for it), each with its own id, token, disk, network and deadline: the ones given, or the source's. All or none: when one cannot be made, those already made are deleted and the error is answered.",
    errors: [...SANDBOX_ID, 'VALIDATION_ERROR', 'INVALID_STATE', 'ORG_QUOTA_EXCEEDED', 'LIMIT_EXCEEDED', 'RATE_LIMIT_EXCEEDED', 'INSUFFICIENT_STORAGE', 'RUNTIME_ERROR', 'AGENT_UNAVAILABLE'],
  },
  'POST /v1/sandboxes/{id}/restore': {
    tag: 'snapshots',
    summary: 'Roll a sandbox back to a snapshot',
    description:
      "Puts the sandbox's files back to a snapshot of its own lineage (taken of it, or of a sandbox it was forked or made from): everything written since is gone, its processes start again. It keeps its id, URL, token, network and deadline. A paused sandbox runs after it; a stopped one stays stopped and shows the snapshot's files when started.",
    errors: [...ACTION, 'SNAPSHOT_NOT_FOUND', 'VALIDATION_ERROR'],
  },
  'GET /v1/sandboxes/{id}/metrics/stream': {
    tag: 'sandboxes',
    summary: "A sandbox's resource use, live (SSE)",
    description:
      'Server-sent events: a `metrics` event (the same object as `GET /v1/sandboxes/{id}/metrics`) every `interval` seconds (2 by default), read only while the stream is open; an `end` event when the sandbox is gone. Browsers open it with `?token=` from `POST /v1/events/token`.',
    errors: [...SANDBOX_ID],
  },
  'GET /v1/sandboxes/{id}/events': {
    tag: 'events',
    summary: "A sandbox's events (SSE)",
    description: 'Server-sent events of one sandbox: created, paused, resumed, stopped, started, deleted, expired, oom_killed. Browsers open it with `?token=` from `POST /v1/events/token`.',
    errors: [...SANDBOX_ID],
  },
  'GET /v1/events': { tag: 'events', summary: "The organization's events (SSE)", description: 'Server-sent events of every sandbox of the organization.', errors: ['PERMISSION_DENIED'] },
  'POST /v1/events/token': {
    tag: 'events',
    summary: 'An events token',
    description: 'A 5-minute token for `?token=` on the events streams (optionally for one `sandbox_id`), so that a browser never puts an API key in a URL.',
    errors: ['VALIDATION_ERROR', ...SANDBOX_ID],
  },
  'GET /v1/account': {
    tag: 'account',
    summary: 'Who the calling key is',
    description: "The key's organization, its name and scopes, and whether it may use the admin API. Any valid key may ask.",
    errors: [],
  },
  'GET /v1/account/limits': { tag: 'account', summary: 'Limits and usage', description: "Every limit of the caller's organization (null: none) and what it holds against each.", errors: [] },
  'POST /v1/admin/nodes/{id}/drain': {
    tag: 'admin',
    summary: "Drain a cluster's node",
    description:
      "The node takes no new sandbox and empties its warm pool; its stopped and paused sandboxes move to other nodes (their files copied, as a snapshot's are; each keeps its id, token, URL, network and deadline; a paused one's processes start anew). Its running ones are listed and left to end by their deadlines or their owners, unless `stop_running` stops them first (then they move stopped). A call moves what it can in about 20 s and says what is `left`: call again until nothing is; a sandbox that cannot move stays where it was, as it was (`failed`). `sandboxd nodes drain` does this.",
    errors: ['PERMISSION_DENIED', 'VALIDATION_ERROR', 'NOT_FOUND'],
  },
  'GET /v1/admin/nodes': {
    tag: 'admin',
    summary: 'List the nodes',
    description:
      "The machines that hold sandboxes, each with its status, whether it is up (its lease runs) and its last heartbeat, its URL, its capacity, what the store's sandboxes on it hold, and what it reported: the sandboxes its runtime holds, its ready warm-pool sandboxes, and those no one owns (orphans). In a cluster, the nodes of control's registry (`mode: \"cluster\"`); on the all-in-one daemon, its one machine, served in its process (`mode: \"all-in-one\"`, `in_process`, no lease or URL, what it holds read now). The sandboxes' own answers name their node (`node`) for these keys.",
    errors: ['PERMISSION_DENIED'],
  },
  'GET /v1/admin/orgs': { tag: 'admin', summary: 'List organizations', description: 'Every organization.', errors: ['PERMISSION_DENIED'] },
  'POST /v1/admin/orgs': { tag: 'admin', summary: 'Create an organization', description: 'A new organization, to create keys for.', errors: ['PERMISSION_DENIED', 'VALIDATION_ERROR', 'ALREADY_EXISTS'] },
  'DELETE /v1/admin/orgs/{nameOrId}': {
    tag: 'admin',
    summary: 'Delete an organization',
    description:
      "The organization and everything it made: its keys are revoked first (nothing new can be made with them, and the tokens they made stop working), then its sandboxes are deleted (creates under way are waited for, up to 60 s), its snapshots, its templates and its uploads, then the organization. Its layers go once nothing else uses them. The operator's organization (`default`) and the caller's own cannot be deleted. A delete cut short is finished by asking again. `sandboxd orgs delete` does this.",
    errors: ['PERMISSION_DENIED', 'VALIDATION_ERROR', 'ORG_NOT_FOUND', 'INVALID_STATE'],
  },
  'GET /v1/admin/keys': { tag: 'admin', summary: 'List API keys', description: 'Every key (of one organization with `org`), revoked ones included, never a secret.', errors: ['PERMISSION_DENIED', 'VALIDATION_ERROR', 'ORG_NOT_FOUND'] },
  'POST /v1/admin/keys': {
    tag: 'admin',
    summary: 'Create an API key',
    description: 'A key of an organization with the scopes given (default: the sandboxes and templates scopes; `metrics:read` and `admin` only when named). Its `secret` is in this answer only.',
    errors: ['PERMISSION_DENIED', 'VALIDATION_ERROR', 'ORG_NOT_FOUND'],
  },
  'DELETE /v1/admin/keys/{id}': {
    tag: 'admin',
    summary: 'Revoke an API key',
    description: 'At once: the key and the tokens it made stop working. A key cannot revoke itself.',
    errors: ['PERMISSION_DENIED', 'VALIDATION_ERROR', 'KEY_NOT_FOUND', 'INVALID_STATE'],
  },
  'GET /v1/templates': { tag: 'templates', summary: 'List templates', description: "The built-in templates and the organization's own, filtered by `category` or `language`.", errors: ['PERMISSION_DENIED'] },
  'GET /v1/templates/{nameOrId}': { tag: 'templates', summary: 'Get a template', description: 'One template by name or id: status, language, resources, layers.', errors: ['TEMPLATE_NOT_FOUND', 'PERMISSION_DENIED'] },
  'DELETE /v1/templates/{nameOrId}': {
    tag: 'templates',
    summary: 'Delete a template',
    description: "Deletes one of the organization's templates; its layers go once nothing uses them. Built-in templates and templates in use are refused.",
    errors: ['TEMPLATE_NOT_FOUND', 'PERMISSION_DENIED', 'TEMPLATE_IN_USE'],
  },
  'POST /v1/templates/build': {
    tag: 'builds',
    summary: 'Build a template',
    description: 'Starts a build from steps (`from`, `apt`, `run`, `env`, `workdir`, `copy`) in a build sandbox with the same isolation; answers 202 with the build id. Cached by step.',
    errors: ['VALIDATION_ERROR', 'INVALID_TEMPLATE_DEFINITION', 'PERMISSION_DENIED', 'TEMPLATE_EXISTS', 'LIMIT_EXCEEDED', 'QUOTA_EXCEEDED', 'ORG_QUOTA_EXCEEDED', 'INSUFFICIENT_STORAGE'],
  },
  'GET /v1/templates/build/{id}/status': { tag: 'builds', summary: 'Build status', description: 'State, progress, the current step and, once it ended, the result or the error.', errors: ['BUILD_NOT_FOUND', 'PERMISSION_DENIED'] },
  'GET /v1/templates/build/{id}/logs': {
    tag: 'builds',
    summary: 'Build logs',
    description: 'The build’s log from `offset`, as JSON, or followed live as server-sent events (`Accept: text/event-stream`).',
    errors: ['BUILD_NOT_FOUND', 'PERMISSION_DENIED', 'VALIDATION_ERROR'],
  },
  'POST /v1/templates/files/upload-link': {
    tag: 'builds',
    summary: 'A link to upload a build file',
    description: 'A short-lived signed URL to PUT a file (or a tar of a directory) that `copy` steps name by `file_id`; a file already uploaded by the organization is not sent again.',
    errors: ['VALIDATION_ERROR', 'INVALID_FILE_METADATA', 'PERMISSION_DENIED'],
  },
  'PUT /v1/templates/files/upload/{token}': {
    tag: 'builds',
    summary: 'Upload a build file',
    description: "The bytes for an upload link (no other credentials: the link is signed). Size and hash must match what the link was made for. The organization's `max_total_disk_gb` and the host's free space are checked with the size before a byte is stored.",
    errors: ['VALIDATION_ERROR', 'AUTHENTICATION_ERROR', 'PAYLOAD_TOO_LARGE', 'INVALID_FILE_METADATA', 'ORG_QUOTA_EXCEEDED', 'INSUFFICIENT_STORAGE'],
  },
};

/** The agent API's entries (its paths are listed under /agent in the document). */
export const AGENT_OPERATIONS: Record<string, OperationDoc> = {
  'GET /health': { tag: 'system', summary: 'Agent health', description: 'Answers while the agent runs, with its version and the features it has (languages, kernels).', errors: AGENT },
  'GET /info': { tag: 'system', summary: 'Agent and sandbox identity', description: 'The sandbox id, template, limits and the agent’s version.', errors: AGENT },
  'POST /execute': {
    tag: 'code',
    summary: 'Run code',
    description: 'Runs code and answers with its stdout, stderr, exit code, result and rich outputs. Python and JavaScript run in a persistent context (variables live on; `context_id`, or the language’s default), unless `isolated`. A failure or timeout of the code is a 200 with `success: false`.',
    errors: RUN,
  },
  'POST /execute/rich': { tag: 'code', summary: 'Run code, with rich outputs', description: 'As `/execute`, listing figures, images, HTML and other rich outputs.', errors: RUN },
  'POST /execute/background': { tag: 'code', summary: 'Run code in the background', description: 'Starts the code and answers with its `process_id`; follow it in `/execute/processes`.', errors: RUN },
  'POST /execute/async': {
    tag: 'code',
    summary: 'Run code; POST the result to a URL',
    description: 'Starts the code (202) and POSTs the result to `callback_url` when it ends, signed with HMAC-SHA256 when a secret is given, retried on network errors, 429 and 5xx.',
    errors: RUN,
  },
  'POST /execute/ipython': { tag: 'code', summary: 'Run Python, IPython style', description: 'Python in the default context; the last expression comes back as `result`.', errors: RUN },
  'GET /execute/processes': { tag: 'processes', summary: 'Background executions', description: 'Running and recently finished background executions, with their output so far and their callbacks.', errors: AGENT },
  'GET /processes/{process_id}/output': {
    tag: 'processes',
    summary: "A background process's output",
    description:
      "What a background process (`/commands/background`, `/execute/background`, `/execute/async`) wrote, from an offset, while it runs and after it ends. Both streams share one sequence of byte offsets; each keeps its last `SANDBOXD_PROCESS_OUTPUT_RING_KB` (default 1 MiB), so a read from an offset older than what is kept says how much it missed in `lost_bytes`. Call again with `since=next_offset` until `complete`.",
    errors: [...AGENT, 'VALIDATION_ERROR', 'PROCESS_NOT_FOUND', 'INVALID_STATE'],
  },
  'GET /processes/{process_id}/attach': {
    tag: 'processes',
    summary: 'Attach to a background process',
    description:
      "Server-sent events: the output kept from `since` (or the `Last-Event-ID` header), then the output as it comes, then `exit`. Any number of clients may attach; a slow one never slows the process: it reads on from what is kept, and a `lost` event says how many bytes it missed. Each `output` event's id is the offset to resume from.",
    errors: [...AGENT, 'VALIDATION_ERROR', 'PROCESS_NOT_FOUND', 'INVALID_STATE'],
  },
  'POST /execute/kill/{process_id}': { tag: 'processes', summary: 'Kill an execution', description: 'Kills a background execution and its process group.', errors: [...AGENT, 'PROCESS_NOT_FOUND'] },
  'DELETE /execute/kill': { tag: 'processes', summary: 'Kill an execution (query)', description: 'As `POST /execute/kill/{process_id}`, with `process_id` in the query.', errors: [...AGENT, 'PROCESS_NOT_FOUND', 'VALIDATION_ERROR'] },
  'GET /execute/stream': { tag: 'streams', summary: 'Run code, streamed (WebSocket)', description: 'Send `{code, language, ...}`; receive stdout and stderr frames as they come, then `complete`.', errors: AGENT },
  'POST /commands/run': { tag: 'commands', summary: 'Run a command', description: 'Runs a shell command (or `command` with `args`, no shell) and answers with its output and exit code.', errors: RUN },
  'POST /commands/background': { tag: 'commands', summary: 'Run a command in the background', description: 'Starts the command and answers with its `process_id`.', errors: RUN },
  'GET /files/read': { tag: 'files', summary: 'Read a text file', description: 'A text file’s content as JSON (binary files: use `/files/download`).', errors: [...FILE, 'NOT_A_FILE', 'BINARY_FILE', 'FILE_TOO_LARGE'] },
  'POST /files/write': { tag: 'files', summary: 'Write a file', description: 'Writes text or base64 content, making parent directories; atomic.', errors: [...FILE, 'NOT_A_FILE', 'DISK_FULL', 'PAYLOAD_TOO_LARGE'] },
  'GET /files/list': { tag: 'files', summary: 'List a directory', description: 'Names, types, sizes and modes of a directory’s entries.', errors: [...FILE, 'NOT_A_DIRECTORY'] },
  'POST /files/upload': { tag: 'files', summary: 'Upload a file', description: 'Streams a multipart upload (parts `file` and `path`) to disk; any size within the sandbox’s disk.', errors: [...FILE, 'DISK_FULL', 'UNSUPPORTED_MEDIA_TYPE'] },
  'GET /files/download': { tag: 'files', summary: 'Download a file', description: 'The file’s bytes, streamed.', errors: [...FILE, 'NOT_A_FILE'] },
  'GET /files/exists': { tag: 'files', summary: 'Whether a path exists', description: 'Whether it exists, and whether it is a directory.', errors: [...AGENT, 'VALIDATION_ERROR', 'INVALID_PATH'] },
  'DELETE /files/remove': { tag: 'files', summary: 'Remove a file or directory', description: 'Removes it, recursively for a directory.', errors: FILE },
  'POST /files/mkdir': { tag: 'files', summary: 'Make a directory', description: 'Makes a directory and its parents.', errors: [...FILE, 'ALREADY_EXISTS', 'NOT_A_DIRECTORY'] },
  'GET /files/watch': { tag: 'streams', summary: 'Watch files (WebSocket)', description: 'Changes below a directory (created, modified, deleted, renamed), new subdirectories included.', errors: FILE },
  'GET /env': { tag: 'env', summary: 'Get the environment set', description: 'The variables set with `PUT`/`PATCH /env` (and at create).', errors: AGENT },
  'PUT /env': { tag: 'env', summary: 'Replace the environment set', description: 'Every later execution and command gets these variables.', errors: [...AGENT, 'VALIDATION_ERROR'] },
  'PATCH /env': { tag: 'env', summary: 'Merge into the environment set', description: 'Adds or replaces the variables given.', errors: [...AGENT, 'VALIDATION_ERROR'] },
  'DELETE /env/{key}': { tag: 'env', summary: 'Remove a variable', description: 'Removes one variable from the set.', errors: AGENT },
  'GET /metrics/snapshot': { tag: 'system', summary: 'Agent metrics', description: 'Request and execution counters, and the sandbox’s CPU, memory and disk.', errors: AGENT },
  'GET /system': { tag: 'system', summary: 'Resource use', description: 'The sandbox’s CPU, memory and disk use and limits.', errors: AGENT },
  'GET /processes': { tag: 'processes', summary: 'Every process', description: 'Every process running in the sandbox: pid, name, command line.', errors: AGENT },
  'GET /cache/stats': { tag: 'system', summary: 'Cache statistics', description: 'Entries, hits and misses of the execution cache.', errors: AGENT },
  'POST /cache/clear': { tag: 'system', summary: 'Clear the cache', description: 'Empties the execution cache.', errors: AGENT },
  'GET /terminal': { tag: 'streams', summary: 'Terminal (WebSocket)', description: 'An interactive shell on a pseudo-terminal: send input and resize frames, receive output.', errors: AGENT },
  ...desktopOperations(AGENT),
};
