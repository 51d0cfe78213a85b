import { AgentClient } from './agent.js';
import { Cache } from './cache.js';
import { Desktop } from './desktop.js';
import type { ApiClient, CallOptions } from './client.js';
import { Commands } from './commands.js';
import { Env } from './env.js';
import { Files } from './files.js';
import { Paginator } from './pagination.js';
import { Processes } from './processes.js';
import type { SnapshotRef } from './snapshot.js';
import { createSandbox, deleteSandbox, fetchNetwork, fetchPorts, fetchResources, fetchSandboxInfo, forkSandbox, listSandboxPage, previewUrl, putNetwork, putTimeout, restoreSandbox, sandboxAction, takeSnapshot } from './sandbox-api.js';
import { agentGet, createCodeContext, deleteCodeContext, listCodeContexts, listKernels, restartCodeContext, runCode, runCodeAsync, runCodeBackground } from './sandbox-code.js';
import { clientOf, type ConnectOptions, type CreateCodeContextOptions, type CreateOptions, type CreateSnapshotOptions, type ForkOptions, type ListOptions, type RunCodeOptions, type SandboxOptions } from './sandbox-options.js';
import { fetchSandboxToken, tokenOf, type GivenToken } from './sandbox-token.js';
import { Terminal, type TerminalOptions } from './terminal.js';
import { TokenManager } from './token.js';
import type {
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
import { toAgentInfo, toHealth, toMetrics, toSandboxInfo } from './wire.js';

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
    token?: GivenToken,
  ) {
    this.id = info.id;
    this.info = info;
    this.tokens = new TokenManager((options) => fetchSandboxToken(this.client, this.id, options));
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
    const body = await createSandbox(client, options);
    return new Sandbox(client, toSandboxInfo(body), tokenOf(body));
  }

  /** A handle on an existing sandbox (fetches its state; NotFoundError / SandboxExpiredError if gone). */
  static async connect(id: string, options: ConnectOptions = {}): Promise<Sandbox> {
    const client = clientOf(options);
    const info = await fetchSandboxInfo(client, id, options);
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
    return listSandboxPage(clientOf(options), options);
  }

  get status(): string {
    return this.info.status;
  }

  /** Fetches the current state and updates `info`. */
  async getInfo(options: CallOptions = {}): Promise<SandboxInfo> {
    this.info = await fetchSandboxInfo(this.client, this.id, options);
    return this.info;
  }

  /** Runs code and waits for the result. A non-zero exit or a timeout is a result, not an error. Never repeated automatically. */
  async runCode(code: string, options: RunCodeOptions = {}): Promise<ExecutionResult> {
    return runCode(this.agent, code, options);
  }

  /** Starts code in the background; follow it with `sandbox.processes`. */
  async runCodeBackground(code: string, options: Omit<RunCodeOptions, 'onStdout' | 'onStderr' | 'rich'> & { name?: string } = {}): Promise<BackgroundProcess> {
    return runCodeBackground(this.agent, code, options);
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
    return runCodeAsync(this.agent, code, options);
  }

  /** A new code context: an interpreter of its own, run in parallel with the others. */
  async createCodeContext(options: CreateCodeContextOptions = {}): Promise<CodeContext> {
    return createCodeContext(this.agent, options);
  }

  async listCodeContexts(options: CallOptions = {}): Promise<CodeContext[]> {
    return listCodeContexts(this.agent, options);
  }

  /** Kills the context's kernel: its next run starts with a fresh state. */
  async restartCodeContext(context: string | CodeContext, options: CallOptions = {}): Promise<CodeContext> {
    return restartCodeContext(this.agent, context, options);
  }

  async deleteCodeContext(context: string | CodeContext, options: CallOptions = {}): Promise<void> {
    return deleteCodeContext(this.agent, context, options);
  }

  /** The sandbox's kernels, as `GET /jupyter/sessions` lists them. */
  async kernels(options: CallOptions = {}): Promise<KernelSession[]> {
    return listKernels(this.agent, options);
  }

  async metrics(options: CallOptions = {}): Promise<MetricsSnapshot> {
    return toMetrics(await agentGet(this.agent, '/metrics/snapshot', options));
  }

  async health(options: CallOptions = {}): Promise<AgentHealth> {
    return toHealth(await agentGet(this.agent, '/health', options));
  }

  async agentInfo(options: CallOptions = {}): Promise<AgentInfo> {
    return toAgentInfo(await agentGet(this.agent, '/info', options));
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
    const status = await deleteSandbox(this.client, this.id, options);
    this.info = { ...this.info, status: 'deleted' };
    return { id: this.id, status };
  }

  /** The sandbox's cpu, memory, disk and network use now, from the service (not its agent). */
  async resources(options: CallOptions = {}): Promise<SandboxResources> {
    return fetchResources(this.client, this.id, options);
  }

  /** The TCP ports something listens on inside the sandbox (any address, loopback included), from the service. */
  async ports(options: CallOptions = {}): Promise<ListeningPort[]> {
    return fetchPorts(this.client, this.id, options);
  }

  /**
   * The URL where `port` inside the sandbox is served (made on first ask, kept across restarts).
   * Private unless `public: true` is asked for (or was before): then a request needs the
   * sandbox's token in the `X-Sandboxd-Token` header (see `previewHeaders()`), or a browser opens
   * `signedUrl`. `public: false` makes it private again.
   */
  async getPreviewUrl(port: number, options: CallOptions & { public?: boolean } = {}): Promise<PreviewUrl> {
    return previewUrl(this.client, this.id, port, options);
  }

  /** The header that opens this sandbox's private previews: its token (fetched, or refreshed, when needed). */
  async previewHeaders(): Promise<Record<string, string>> {
    return { 'X-Sandboxd-Token': await this.tokens.get() };
  }

  /** The sandbox's egress rules: whether it has internet access, and its allow and deny lists. */
  async getNetwork(options: CallOptions = {}): Promise<NetworkPolicy> {
    return this.keepNetwork(await fetchNetwork(this.client, this.id, options));
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
    return this.keepNetwork(await putNetwork(this.client, this.id, policy, options));
  }

  /**
   * Saves the sandbox's filesystem, environment and template settings as a snapshot. A running
   * sandbox is frozen for the copy and resumes by itself. ConflictError (`ORG_QUOTA_EXCEEDED`)
   * when the organization's snapshots would pass its storage quota. Not retried.
   */
  async snapshot(options: CreateSnapshotOptions = {}): Promise<SnapshotInfo> {
    return takeSnapshot(this.client, this.id, options);
  }

  /**
   * New sandboxes, `count` of them (default 1), each running with this sandbox's filesystem as it
   * is now (a running sandbox is frozen for the copy and resumes by itself). Settings not given in
   * `options` are this sandbox's. Each is ready to use, with its own token, like `create` makes
   * them. Not retried (that could make them twice).
   */
  async fork(count = 1, options: ForkOptions = {}): Promise<Sandbox[]> {
    const data = await forkSandbox(this.client, this.id, count, options);
    return data.map((item) => new Sandbox(this.client, toSandboxInfo(item), tokenOf(item)));
  }

  /**
   * Puts the sandbox's filesystem back as it was in `snapshot`, which must be of this sandbox's
   * lineage (taken of it, or of a state it descends from; else ValidationError). It keeps its id,
   * URL and token; its processes restart, so what lived only in memory (code contexts' state,
   * background processes) is gone. Updates `info`.
   */
  async restore(snapshot: SnapshotRef, options: CallOptions = {}): Promise<SandboxInfo> {
    this.info = await restoreSandbox(this.client, this.id, snapshot, options);
    return this.info;
  }

  /** Sets the auto-kill timeout, counted from now. */
  async setTimeout(seconds: number, options: CallOptions = {}): Promise<TimeoutResult> {
    const result = await putTimeout(this.client, this.id, seconds, options);
    this.info = { ...this.info, timeoutSeconds: seconds, expiresAt: result.expiresAt };
    return result;
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

  private async action(verb: 'pause' | 'resume' | 'stop' | 'start', options: CallOptions): Promise<ActionResult> {
    const status = (await sandboxAction(this.client, this.id, verb, options)) ?? this.info.status;
    this.info = { ...this.info, status };
    return { id: this.id, status };
  }

  private keepNetwork(network: NetworkPolicy): NetworkPolicy {
    this.info = { ...this.info, internetAccess: network.internetAccess, network };
    return network;
  }
}
