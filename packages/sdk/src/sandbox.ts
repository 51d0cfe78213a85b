import { AgentClient } from './agent.js';
import { Cache } from './cache.js';
import { Desktop } from './desktop.js';
import { ApiClient, enc, type CallOptions } from './client.js';
import { Commands, deadlineFor, type RunOptions } from './commands.js';
import type { ClientOptions } from './config.js';
import { Env } from './env.js';
import { Files } from './files.js';
import { Paginator } from './pagination.js';
import { Processes } from './processes.js';
import { copyTimeoutMs, snapshotIdOf, type SnapshotRef } from './snapshot.js';
import { Terminal, type TerminalOptions } from './terminal.js';
import { TokenManager, type Token } from './token.js';
import type {
  VolumeInfo,
  ActionResult,
  AgentHealth,
  AgentInfo,
  BackgroundProcess,
  CodeContext,
  ExecutionResult,
  KernelSession,
  MetricsSnapshot,
  NetworkPolicy,
  SandboxInfo,
  SandboxPage,
  SandboxResources,
  SnapshotInfo,
  ListeningPort,
  PreviewUrl,
  TimeoutResult,
} from './types.js';
import { stdinFields, toAgentInfo, toBackgroundProcess, toCodeContext, toExecutionResult, toHealth, toKernelSession, toMetrics, toNetworkPolicy, toSandboxInfo, toSandboxPage, toSandboxResources, toSnapshotInfo } from './wire.js';
import { streamExecute } from './ws.js';

export const DEFAULT_TEMPLATE = 'code-interpreter';

export interface SandboxOptions extends ClientOptions {
  /** Reuse a configured client instead of `apiKey`/`baseUrl`. */
  client?: ApiClient;
}

export interface ConnectOptions extends SandboxOptions, CallOptions {
  /**
   * An agent token obtained elsewhere (e.g. handed over by a backend). It is used until it expires
   * or is refused, then refreshed with the API key like any other.
   */
  authToken?: string;
  /** Expiry of `authToken` (ISO 8601). */
  tokenExpiresAt?: string;
}

export interface CreateOptions extends SandboxOptions, CallOptions {
  /** Template name (default `code-interpreter`). */
  template?: string;
  /** Template id; wins over `template`. */
  templateId?: string;
  /**
   * Start from a snapshot (or its id) instead of a template: its filesystem, environment and
   * template settings. Not with `template` or `templateId`.
   */
  snapshot?: SnapshotRef;
  region?: string;
  /** Delete the sandbox this many seconds after creation (default: never). */
  timeoutSeconds?: number;
  /** Default true. */
  internetAccess?: boolean;
  /**
   * Egress rules: when given, only these may be reached (IPv4 addresses, CIDRs, domains,
   * `*.domain`; at most 1000). A domain is matched on the TLS SNI (port 443) and the HTTP Host
   * header (port 80), so it opens HTTP and HTTPS to that name only.
   */
  allowOut?: string[];
  /** Never reached, even when allowed (same entries as `allowOut`). */
  denyOut?: string[];
  envVars?: Record<string, string>;
  /** What the timeout does: `delete` (default) or `pause` (kept paused for the service's retention time, then deleted). */
  onTimeout?: 'delete' | 'pause';
  /** Pause after this long with no call to the sandbox and no request to it (default: never). */
  idleTimeoutSeconds?: number;
  /** A request to the sandbox while it is paused resumes it first (default false). */
  autoResume?: boolean;
  /**
   * Volumes of the organization to mount (`Volume.create`), each at an absolute path; shared with
   * every other sandbox that mounts them, kept after this one is deleted.
   */
  volumes?: VolumeMountOptions[];
}

/** A volume mounted at create: by name (or id, or a `VolumeInfo`), at `path`, read-write unless `readOnly`. */
export interface VolumeMountOptions {
  volume: string | VolumeInfo;
  path: string;
  readOnly?: boolean;
}

/** The settings a fork may change; those not given are the source's. */
export type ForkOptions = CallOptions &
  Pick<CreateOptions, 'timeoutSeconds' | 'internetAccess' | 'allowOut' | 'denyOut' | 'envVars' | 'onTimeout' | 'idleTimeoutSeconds' | 'autoResume'>;

export interface CreateSnapshotOptions extends CallOptions {
  /** 1 to 128 characters. */
  name?: string;
}

export interface ListOptions extends SandboxOptions {
  status?: string;
  template?: string;
  region?: string;
  /** Page size, 1..1000 (default 100). */
  limit?: number;
  /** Stop after this many sandboxes. */
  maxItems?: number;
  signal?: AbortSignal;
}

export interface RunCodeOptions extends RunOptions {
  /** `python` (default), `javascript`, `bash`, `go` and their aliases. */
  language?: string;
  /** Use `/execute/rich` to get `richOutputs` (figures saved as files). */
  rich?: boolean;
  /** Opt in to the agent's result cache (runs in a fresh process). */
  cache?: boolean;
  /**
   * The code context to run in (its id, or the context itself). Without it Python runs in the
   * sandbox's default context, where state lives between calls.
   */
  context?: string | CodeContext;
  /** A fresh process that keeps no state (not with `context`). */
  isolated?: boolean;
}

export interface CreateCodeContextOptions extends CallOptions {
  /** `python` (the default; the only language with contexts for now). */
  language?: string;
  /** Its kernel's working directory (relative to /workspace). */
  cwd?: string;
  /** Variables for this context only, over the sandbox's env. */
  env?: Record<string, string>;
}

function clientOf(options: SandboxOptions | undefined): ApiClient {
  return options?.client ?? new ApiClient(options);
}

/**
 * One sandbox. Get one with `Sandbox.create()`, `Sandbox.connect(id)`, `Sandbox.list()` or
 * `sandbox.fork()`. Lifecycle calls go to the API with the API key; code, commands, files, env and
 * metrics go to the sandbox's agent with a sandbox token that is fetched and refreshed automatically.
 */
export class Sandbox {
  readonly id: string;
  /** The last known state (from create, connect, list or `getInfo()`); actions update `status`. */
  info: SandboxInfo;
  readonly files: Files;
  readonly commands: Commands;
  readonly processes: Processes;
  readonly env: Env;
  readonly cache: Cache;
  /** The desktop of a sandbox whose template has one (the built-in `desktop`). */
  readonly desktop: Desktop;
  private readonly agent: AgentClient;
  private readonly tokens: TokenManager;

  private constructor(
    readonly client: ApiClient,
    info: SandboxInfo,
    token?: { token: string; expiresAt: string | undefined },
  ) {
    this.id = info.id;
    this.info = info;
    this.tokens = new TokenManager((options) => this.fetchToken(options));
    if (token) this.tokens.set(token.token, token.expiresAt);
    this.agent = new AgentClient(
      client,
      this.tokens,
      () => this.info.publicHost,
      async () => {
        if (!this.info.publicHost) await this.getInfo();
      },
    );
    this.files = new Files(this.agent);
    this.commands = new Commands(this.agent);
    this.processes = new Processes(this.agent);
    this.env = new Env(this.agent);
    this.cache = new Cache(this.agent);
    this.desktop = new Desktop(this.agent, (port, options) => this.getPreviewUrl(port, options));
  }

  /** Creates a sandbox; it is running and its agent answering when this resolves. Not retried on 5xx (that could create two). */
  static async create(options: CreateOptions = {}): Promise<Sandbox> {
    const client = clientOf(options);
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
    const body = await client.http.json<Record<string, unknown>>({
      method: 'POST',
      path: '/v1/sandboxes',
      json,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs ?? Math.max(client.config.requestTimeoutMs, 120_000),
      what: 'create sandbox',
    });
    return new Sandbox(client, toSandboxInfo(body), tokenOf(body));
  }

  /** A handle on an existing sandbox (fetches its state; NotFoundError / SandboxExpiredError if gone). */
  static async connect(id: string, options: ConnectOptions = {}): Promise<Sandbox> {
    const client = clientOf(options);
    const info = await Sandbox.fetchInfo(client, id, options);
    return new Sandbox(client, info, options.authToken ? { token: options.authToken, expiresAt: options.tokenExpiresAt } : undefined);
  }

  /**
   * A handle on a sandbox by id without fetching it: lifecycle actions work at once; `info` is empty
   * until `getInfo()`, which agent calls run first by themselves.
   */
  static fromId(id: string, options: SandboxOptions = {}): Sandbox {
    return new Sandbox(clientOf(options), toSandboxInfo({ id }));
  }

  /** All sandboxes of the organization, newest first, fetched a page at a time as you iterate. */
  static list(options: ListOptions = {}): Paginator<Sandbox> {
    const client = clientOf(options);
    return new Paginator<Sandbox>(
      async (cursor, signal) => {
        const page = await Sandbox.listPage({ ...options, client, cursor, signal });
        return { ...page, data: page.data.map((info) => new Sandbox(client, info)) };
      },
      { signal: options.signal, maxItems: options.maxItems },
    );
  }

  /** One page of the list, as plain data. */
  static async listPage(options: Omit<ListOptions, 'maxItems'> & { cursor?: string } = {}): Promise<SandboxPage> {
    const client = clientOf(options);
    const body = await client.http.json({
      method: 'GET',
      path: '/v1/sandboxes',
      query: { limit: options.limit, status: options.status, template: options.template, region: options.region, cursor: options.cursor },
      signal: options.signal,
      what: 'list sandboxes',
    });
    return toSandboxPage(body);
  }

  private static async fetchInfo(client: ApiClient, id: string, options: CallOptions): Promise<SandboxInfo> {
    const body = await client.http.json({
      method: 'GET',
      path: `/v1/sandboxes/${enc(id)}`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `get sandbox ${id}`,
    });
    return toSandboxInfo(body);
  }

  get status(): string {
    return this.info.status;
  }

  /** Fetches the current state and updates `info`. */
  async getInfo(options: CallOptions = {}): Promise<SandboxInfo> {
    this.info = await Sandbox.fetchInfo(this.client, this.id, options);
    return this.info;
  }

  /** Runs code and waits for the result. A non-zero exit or a timeout is a result, not an error. Never repeated automatically. */
  async runCode(code: string, options: RunCodeOptions = {}): Promise<ExecutionResult> {
    const timeoutMs = options.requestTimeoutMs ?? deadlineFor(options.timeout, 60);
    const language = options.language ?? 'python';
    if (options.onStdout || options.onStderr) {
      return streamExecute(this.agent, {
        code,
        language,
        timeout: options.timeout,
        workingDir: options.workingDir,
        env: options.env,
        stdin: options.stdin,
        contextId: contextIdOf(options.context),
        isolated: options.isolated,
        onStdout: options.onStdout,
        onStderr: options.onStderr,
        signal: options.signal,
        timeoutMs,
      });
    }
    const body = await this.agent.http.json({
      method: 'POST',
      path: options.rich ? '/execute/rich' : '/execute',
      json: executeBody(code, language, options),
      signal: options.signal,
      timeoutMs,
      what: 'execute',
    });
    return toExecutionResult(body);
  }

  /** Starts code in the background; follow it with `sandbox.processes`. */
  async runCodeBackground(code: string, options: Omit<RunCodeOptions, 'onStdout' | 'onStderr' | 'rich'> & { name?: string } = {}): Promise<BackgroundProcess> {
    const json = executeBody(code, options.language ?? 'python', options);
    if (options.name) json.name = options.name;
    return this.startExecution('/execute/background', json, options, 'start background execution');
  }

  /**
   * Starts code in the background and has the agent POST the result (the `runCode` result fields
   * in snake_case, plus `execution_id` and `status`) to `callbackUrl` when it ends. The request
   * leaves from inside the sandbox, so the URL must be reachable under its network policy. With
   * `signatureSecret`, the `X-Sandboxd-Signature` header is `sha256=` + the hex HMAC-SHA256 of the body.
   */
  async runCodeAsync(
    code: string,
    options: Omit<RunCodeOptions, 'onStdout' | 'onStderr' | 'rich'> & { callbackUrl: string; callbackHeaders?: Record<string, string>; signatureSecret?: string },
  ): Promise<BackgroundProcess> {
    const json = executeBody(code, options.language ?? 'python', options);
    json.callback_url = options.callbackUrl;
    if (options.callbackHeaders) json.callback_headers = options.callbackHeaders;
    if (options.signatureSecret) json.callback_signature_secret = options.signatureSecret;
    return this.startExecution('/execute/async', json, options, 'start async execution');
  }

  private async startExecution(path: string, json: Record<string, unknown>, options: CallOptions, what: string): Promise<BackgroundProcess> {
    const body = await this.agent.http.json({ method: 'POST', path, json, signal: options.signal, timeoutMs: options.requestTimeoutMs ?? 30_000, what });
    return toBackgroundProcess(body);
  }

  /** A new code context: an interpreter of its own, run in parallel with the others. */
  async createCodeContext(options: CreateCodeContextOptions = {}): Promise<CodeContext> {
    const json: Record<string, unknown> = { language: options.language ?? 'python' };
    if (options.cwd !== undefined) json.cwd = options.cwd;
    if (options.env !== undefined) json.env = options.env;
    const body = await this.agent.http.json({ method: 'POST', path: '/contexts', json, signal: options.signal, timeoutMs: options.requestTimeoutMs, what: 'create code context' });
    return toCodeContext(body);
  }

  async listCodeContexts(options: CallOptions = {}): Promise<CodeContext[]> {
    const body = (await this.agentGet('/contexts', options)) as { contexts?: unknown };
    return Array.isArray(body?.contexts) ? body.contexts.map(toCodeContext) : [];
  }

  /** Kills the context's kernel: its next run starts with a fresh state. */
  async restartCodeContext(context: string | CodeContext, options: CallOptions = {}): Promise<CodeContext> {
    const id = contextIdOf(context)!;
    const body = await this.agent.http.json({ method: 'POST', path: `/contexts/${enc(id)}/restart`, signal: options.signal, timeoutMs: options.requestTimeoutMs, what: 'restart code context' });
    return toCodeContext(body);
  }

  async deleteCodeContext(context: string | CodeContext, options: CallOptions = {}): Promise<void> {
    const id = contextIdOf(context)!;
    await this.agent.http.json({ method: 'DELETE', path: `/contexts/${enc(id)}`, signal: options.signal, timeoutMs: options.requestTimeoutMs, what: 'delete code context' });
  }

  /** The sandbox's kernels, as `GET /jupyter/sessions` lists them. */
  async kernels(options: CallOptions = {}): Promise<KernelSession[]> {
    const body = (await this.agentGet('/jupyter/sessions', options)) as { sessions?: unknown };
    return Array.isArray(body?.sessions) ? body.sessions.map(toKernelSession) : [];
  }

  async metrics(options: CallOptions = {}): Promise<MetricsSnapshot> {
    return toMetrics(await this.agentGet('/metrics/snapshot', options));
  }

  async health(options: CallOptions = {}): Promise<AgentHealth> {
    return toHealth(await this.agentGet('/health', options));
  }

  async agentInfo(options: CallOptions = {}): Promise<AgentInfo> {
    return toAgentInfo(await this.agentGet('/info', options));
  }

  /** Opens an interactive terminal (PTY) in the sandbox. */
  async terminal(options: TerminalOptions = {}): Promise<Terminal> {
    return Terminal.open(this.agent, options);
  }

  /** Freezes the sandbox (memory and processes kept). */
  async pause(options: CallOptions = {}): Promise<ActionResult> {
    return this.action('pause', options);
  }

  async resume(options: CallOptions = {}): Promise<ActionResult> {
    const r = await this.action('resume', options);
    await this.getInfo(options).catch(() => undefined);
    return r;
  }

  /** Kills the sandbox's processes and keeps its filesystem; `start()` boots it again. */
  async stop(options: CallOptions = {}): Promise<ActionResult> {
    return this.action('stop', options);
  }

  async start(options: CallOptions = {}): Promise<ActionResult> {
    const r = await this.action('start', options);
    // The agent boots again and may answer on a new address.
    await this.getInfo(options).catch(() => undefined);
    return r;
  }

  /** Deletes the sandbox and everything in it. */
  async kill(options: CallOptions = {}): Promise<ActionResult> {
    const body = await this.client.http.json<Record<string, unknown>>({
      method: 'DELETE',
      path: `/v1/sandboxes/${enc(this.id)}`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `delete sandbox ${this.id}`,
    });
    this.info = { ...this.info, status: 'deleted' };
    return { id: this.id, status: typeof body.status === 'string' ? body.status : 'deleted' };
  }

  /** The sandbox's cpu, memory, disk and network use now, from the service (not its agent). */
  async resources(options: CallOptions = {}): Promise<SandboxResources> {
    const body = await this.client.http.json<Record<string, unknown>>({
      method: 'GET',
      path: `/v1/sandboxes/${enc(this.id)}/metrics`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `metrics of ${this.id}`,
    });
    return toSandboxResources(body);
  }

  /** The TCP ports something listens on inside the sandbox (any address, loopback included), from the service. */
  async ports(options: CallOptions = {}): Promise<ListeningPort[]> {
    const body = await this.client.http.json<Record<string, unknown>>({
      method: 'GET',
      path: `/v1/sandboxes/${enc(this.id)}/ports`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `ports of ${this.id}`,
    });
    const data = Array.isArray(body.data) ? (body.data as Array<Record<string, unknown>>) : [];
    return data.map((p) => ({
      port: Number(p.port),
      addresses: Array.isArray(p.addresses) ? p.addresses.map(String) : [],
      loopbackOnly: p.loopback_only === true,
    }));
  }

  /**
   * The URL where `port` inside the sandbox is served (made on first ask, kept across restarts).
   * Private unless `public: true` is asked for (or was before): then a request needs the
   * sandbox's token in the `X-Sandboxd-Token` header (see `previewHeaders()`), or a browser opens
   * `signedUrl`. `public: false` makes it private again.
   */
  async getPreviewUrl(port: number, options: CallOptions & { public?: boolean } = {}): Promise<PreviewUrl> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError('port must be a whole number from 1 to 65535');
    const body = await this.client.http.json<Record<string, unknown>>({
      method: options.public === undefined ? 'GET' : 'PUT',
      path: `/v1/sandboxes/${enc(this.id)}/ports/${port}`,
      ...(options.public === undefined ? {} : { json: { public: options.public } }),
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `preview of port ${port} of ${this.id}`,
    });
    return {
      port: Number(body.port),
      url: String(body.url),
      public: body.public === true,
      ...(typeof body.signed_url === 'string' ? { signedUrl: body.signed_url } : {}),
      ...(typeof body.signed_url_expires_at === 'string' ? { signedUrlExpiresAt: body.signed_url_expires_at } : {}),
    };
  }

  /** The header that opens this sandbox's private previews: its token (fetched, or refreshed, when needed). */
  async previewHeaders(): Promise<Record<string, string>> {
    return { 'X-Sandboxd-Token': await this.tokens.get() };
  }

  /** The sandbox's egress rules: whether it has internet access, and its allow and deny lists. */
  async getNetwork(options: CallOptions = {}): Promise<NetworkPolicy> {
    const body = await this.client.http.json<Record<string, unknown>>({
      method: 'GET',
      path: `/v1/sandboxes/${enc(this.id)}/network`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `network of ${this.id}`,
    });
    return this.keepNetwork(toNetworkPolicy(body));
  }

  /**
   * Replaces the sandbox's egress rules as a whole: what `policy` leaves out takes its default
   * (internet access on, both lists empty), so pass every list you mean to keep. Deny wins over
   * allow; a non-empty allow list refuses everything else. A refused connection is reset at once.
   * Applies to new connections within a second. The built-in protections (the host, private
   * ranges, metadata addresses, other sandboxes) stay whatever the rules say. A sandbox created
   * without internet access cannot get it now (InvalidStateError); a bad entry is a ValidationError.
   */
  async setNetwork(policy: Partial<NetworkPolicy>, options: CallOptions = {}): Promise<NetworkPolicy> {
    const json: Record<string, unknown> = {};
    if (policy.internetAccess !== undefined) json.internet_access = policy.internetAccess;
    if (policy.allowOut !== undefined) json.allow_out = policy.allowOut;
    if (policy.denyOut !== undefined) json.deny_out = policy.denyOut;
    const body = await this.client.http.json<Record<string, unknown>>({
      method: 'PUT',
      path: `/v1/sandboxes/${enc(this.id)}/network`,
      json,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `set network of ${this.id}`,
    });
    return this.keepNetwork(toNetworkPolicy(body));
  }

  /**
   * Saves the sandbox's filesystem, environment and template settings as a snapshot. A running
   * sandbox is frozen for the copy and resumes by itself. ConflictError (`ORG_QUOTA_EXCEEDED`)
   * when the organization's snapshots would pass its storage quota. Not retried.
   */
  async snapshot(options: CreateSnapshotOptions = {}): Promise<SnapshotInfo> {
    const body = await this.client.http.json({
      method: 'POST',
      path: `/v1/sandboxes/${enc(this.id)}/snapshots`,
      json: options.name === undefined ? {} : { name: options.name },
      signal: options.signal,
      timeoutMs: copyTimeoutMs(this.client, options),
      what: `snapshot sandbox ${this.id}`,
    });
    return toSnapshotInfo(body);
  }

  /**
   * New sandboxes, `count` of them (default 1), each running with this sandbox's filesystem as it
   * is now (a running sandbox is frozen for the copy and resumes by itself). Settings not given in
   * `options` are this sandbox's. Each is ready to use, with its own token, like `create` makes
   * them. Not retried (that could make them twice).
   */
  async fork(count = 1, options: ForkOptions = {}): Promise<Sandbox[]> {
    if (!Number.isInteger(count) || count < 1) throw new RangeError('count must be a positive whole number');
    const body = await this.client.http.json<Record<string, unknown>>({
      method: 'POST',
      path: `/v1/sandboxes/${enc(this.id)}/fork`,
      json: { count, ...settingsFields(options) },
      signal: options.signal,
      timeoutMs: copyTimeoutMs(this.client, options),
      what: `fork sandbox ${this.id}`,
    });
    const data = Array.isArray(body.data) ? (body.data as unknown[]) : [];
    return data.map((item) => new Sandbox(this.client, toSandboxInfo(item), tokenOf(item)));
  }

  /**
   * Puts the sandbox's filesystem back as it was in `snapshot`, which must be of this sandbox's
   * lineage (taken of it, or of a state it descends from; else ValidationError). It keeps its id,
   * URL and token; its processes restart, so what lived only in memory (code contexts' state,
   * background processes) is gone. Updates `info`.
   */
  async restore(snapshot: SnapshotRef, options: CallOptions = {}): Promise<SandboxInfo> {
    const id = snapshotIdOf(snapshot);
    const body = await this.client.http.json({
      method: 'POST',
      path: `/v1/sandboxes/${enc(this.id)}/restore`,
      json: { snapshot_id: id },
      signal: options.signal,
      timeoutMs: copyTimeoutMs(this.client, options),
      what: `restore sandbox ${this.id} to ${id}`,
    });
    this.info = toSandboxInfo(body);
    return this.info;
  }

  /** Sets the auto-kill timeout, counted from now. */
  async setTimeout(seconds: number, options: CallOptions = {}): Promise<TimeoutResult> {
    if (!Number.isInteger(seconds) || seconds <= 0) throw new RangeError('timeout must be a positive whole number of seconds');
    const body = await this.client.http.json<Record<string, unknown>>({
      method: 'PUT',
      path: `/v1/sandboxes/${enc(this.id)}/timeout`,
      json: { timeout_seconds: seconds },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `set timeout of ${this.id}`,
    });
    const expiresAt = typeof body.expires_at === 'string' ? body.expires_at : new Date(Date.now() + seconds * 1000).toISOString();
    this.info = { ...this.info, timeoutSeconds: seconds, expiresAt };
    return { id: this.id, timeoutSeconds: typeof body.timeout_seconds === 'number' ? body.timeout_seconds : seconds, expiresAt };
  }

  /** Gets a fresh agent token now (normally automatic). */
  async refreshToken(options: CallOptions = {}): Promise<{ token: string; expiresAt: string }> {
    this.tokens.invalidate();
    const t = await this.tokens.refresh(options);
    return { token: t.token, expiresAt: Number.isNaN(t.expiresAt) ? '' : new Date(t.expiresAt).toISOString() };
  }

  /** The cached agent token and its expiry, if one was fetched. */
  get token(): { token: string; expiresAt: Date | null } | undefined {
    const t = this.tokens.peek();
    return t ? { token: t.token, expiresAt: Number.isNaN(t.expiresAt) ? null : new Date(t.expiresAt) } : undefined;
  }

  toJSON(): SandboxInfo {
    return this.info;
  }

  private async fetchToken(options: CallOptions = {}): Promise<Token> {
    const body = await this.client.http.json<Record<string, unknown>>({
      method: 'POST',
      path: `/v1/sandboxes/${enc(this.id)}/token/refresh`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `refresh token of ${this.id}`,
    });
    if (typeof body.auth_token !== 'string') throw new TypeError('token refresh answered without auth_token');
    return { token: body.auth_token, expiresAt: typeof body.token_expires_at === 'string' ? Date.parse(body.token_expires_at) : NaN };
  }

  private async action(verb: 'pause' | 'resume' | 'stop' | 'start', options: CallOptions): Promise<ActionResult> {
    const body = await this.client.http.json<Record<string, unknown>>({
      method: 'POST',
      path: `/v1/sandboxes/${enc(this.id)}/${verb}`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs ?? (verb === 'start' ? Math.max(this.client.config.requestTimeoutMs, 120_000) : undefined),
      what: `${verb} sandbox ${this.id}`,
    });
    const status = typeof body.status === 'string' ? body.status : this.info.status;
    this.info = { ...this.info, status };
    return { id: this.id, status };
  }

  private keepNetwork(network: NetworkPolicy): NetworkPolicy {
    this.info = { ...this.info, internetAccess: network.internetAccess, network };
    return network;
  }

  private agentGet(path: string, options: CallOptions): Promise<unknown> {
    return this.agent.http.json({ method: 'GET', path, signal: options.signal, timeoutMs: options.requestTimeoutMs, what: `GET ${path}` });
  }
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

/** The agent token a create or fork answer carries. */
function tokenOf(item: unknown): { token: string; expiresAt: string | undefined } | undefined {
  const o = (item && typeof item === 'object' ? item : {}) as Record<string, unknown>;
  if (typeof o.auth_token !== 'string') return undefined;
  return { token: o.auth_token, expiresAt: typeof o.token_expires_at === 'string' ? o.token_expires_at : undefined };
}

function executeBody(code: string, language: string, o: Omit<RunCodeOptions, 'onStdout' | 'onStderr'>): Record<string, unknown> {
  const json: Record<string, unknown> = { code, language };
  if (o.timeout !== undefined) json.timeout = o.timeout;
  if (o.workingDir !== undefined) json.working_dir = o.workingDir;
  if (o.env !== undefined) json.env = o.env;
  if (o.cache) json.cache = true;
  const context = contextIdOf(o.context);
  if (context !== undefined) json.context_id = context;
  if (o.isolated !== undefined) json.isolated = o.isolated;
  Object.assign(json, stdinFields(o.stdin));
  return json;
}

function contextIdOf(context: string | CodeContext | undefined): string | undefined {
  return typeof context === 'string' || context === undefined ? context : context.id;
}
