import { availableParallelism } from 'node:os';
import { describeCause, isProgrammingError, ServiceError, type CreateSandboxBody, type ForkBody, type NetworkPolicy, type Sandbox, type SandboxEventKind, type SandboxMetrics, type SetNetworkBody } from '@sandboxd/protocol';
import { DEFAULT_EGRESS, isRestricted, normalizeEntries } from '../runtime/egress-policy.js';
import type { Runtime, RuntimeStatus, SandboxSpec } from '../runtime/types.js';
import type { SandboxRow, Store } from '../store/types.js';
import type { EventBus } from './events.js';
import { Slots, type Mutex } from './locks.js';
import type { RouteEntry, RouteTable } from './routes.js';
import type { RateLimiter } from './rate-limit.js';
import type { TemplateService } from './templates.js';
import type { TokenService } from './tokens.js';
import type { QuotaService } from './quotas.js';
import type { CapturedLayer, SnapshotService } from './snapshots.js';
import { ExportTooLarge } from '../runtime/types.js';
import { checkSize, checkTimeout, timeoutFor, type OrgLimits } from './limits.js';
import { agentJson, waitForAgent, waitForAgentPrimed, type AgentTarget } from './agent-client.js';
import { abandonedCreate, warmKeyOf, WarmPool } from './warm-pool.js';
import { newSandboxId, withSandboxId } from './sandbox-identity.js';
import type { Metrics } from './metrics.js';
import { UndoStack } from '../runtime/undo.js';
import { DEFAULT_TEMPLATE } from '../images/builtin.js';

/** The gateway as the lifecycle sees it: opens and closes a sandbox's public_host. */
export interface GatewayControl {
  /** Starts serving the sandbox; `port` is its stored port (null → allocate). Returns the port (null in host mode). */
  open(sandboxId: string, port: number | null): Promise<number | null>;
  close(sandboxId: string): Promise<void>;
  publicHost(sandboxId: string, port: number | null): string;
  /** Whether a request to the sandbox is in flight or a WebSocket to it is open (absent: never). */
  busy?(sandboxId: string): boolean;
  /** Cuts the requests in flight to the sandbox and its WebSockets; it keeps serving new ones. */
  interrupt?(sandboxId: string): void;
  /**
   * Serves a preview of the sandbox's `port` (private unless `isPublic`); `gatewayPort` is its stored
   * gateway port in port mode (null → allocate). Returns that port (null in host mode). Idempotent;
   * a second call changes `isPublic`. `close(sandboxId)` ends its previews too.
   */
  openPreview?(sandboxId: string, port: number, isPublic: boolean, gatewayPort: number | null): Promise<number | null>;
  /** A preview's URL (`gatewayPort` as openPreview returned it). */
  previewUrl?(sandboxId: string, port: number, gatewayPort: number | null): string;
}

export interface SandboxServiceDeps {
  store: Store;
  runtime: Runtime;
  tokens: TokenService;
  templates: TemplateService;
  layerPath: (layerId: string) => string;
  gateway: GatewayControl;
  routes: RouteTable;
  events: EventBus;
  locks: Mutex;
  createLimiter: RateLimiter;
  /** Per-organization limits: checked at create, start and timeout changes. */
  quotas: QuotaService;
  /** Where creates get their sandboxes: booted ahead of time or now, in order (absent: one that holds none). */
  pool?: WarmPool;
  agentReadyTimeoutMs: number;
  tombstoneSeconds: number;
  /** How long a sandbox paused by its deadline (on_timeout "pause") is kept before it is deleted. */
  pausedRetentionSeconds?: number;
  /** Preview ports one organization may hold (absent: no cap beyond the per-sandbox one). */
  maxPreviewsPerOrg?: number;
  nodeId: string;
  log: (msg: string, extra?: Record<string, unknown>) => void;
  /** Counts creates by template and source, with their latency (absent: none kept). */
  metrics?: Metrics;
  /** Snapshots (absent: creates from a snapshot, forks and restores are refused). */
  snapshots?: SnapshotService;
  /**
   * Several replicas share the store (a cluster's control): what one of them does not know may be
   * another's work under way, so reconcile leaves it alone (the nodes collect leftovers no row
   * claims, see services/orphans.ts), and uses and interrupts are told to the others.
   */
  cluster?: { used(id: string): void; interrupted(id: string): void; changed(id: string): void };
}

/** In a cluster, a sandbox still `creating` this long after its row was written was abandoned (its replica died). */
export const ABANDONED_CREATE_MS = 10 * 60_000;

/** What a create starts from: a template, a snapshot, or a fork's source. */
interface CreateSource {
  templateId: string;
  templateName: string;
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  layers: string[];
  templateEnv: Record<string, string>;
  /** The env set the sandbox starts with (below the create's env_vars). */
  envVars: Record<string, string>;
  snapshotId: string | null;
  lineage: string[];
  /** The warm pool's name for what it boots: the template id, `snap:<id>`, `fork:<layer>`. */
  poolId: string;
  /** A fork's: the source's egress policy, when the fork names none. */
  egress?: SandboxRow['egress'];
}

/** How the gateway reaches a live sandbox of the store. */
export function routeOf(row: SandboxRow, runtime: Pick<Runtime, 'dialAgent' | 'nodeUp'>): RouteEntry {
  const nodeUp = runtime.nodeUp?.bind(runtime);
  return {
    ...(nodeUp
      ? {
          nodeId: row.nodeId,
          reachable: () => {
            if (!nodeUp(row.nodeId)) throw new ServiceError('NODE_UNAVAILABLE', `sandbox ${row.id} is on a node that is not answering; it is served again when the node is back`, { id: row.id, retry_after: 10 });
          },
        }
      : {}),
    sandboxId: row.id,
    orgId: row.orgId,
    status: row.status as RouteEntry['status'],
    dial: (timeoutMs) => runtime.dialAgent(row.id, timeoutMs),
    port: row.gatewayPort,
    autoResume: row.autoResume,
    tracksIdle: row.idleTimeoutSeconds !== null,
  };
}

/** A preview URL, as `GET /v1/sandboxes/{id}/ports/{port}` gives it. */
export interface PreviewInfo {
  port: number;
  url: string;
  public: boolean;
  signed_url?: string;
  signed_url_expires_at?: string;
}

/** Each preview of a port takes a gateway port (port mode): a sandbox holds a bounded number. */
export const MAX_PREVIEWS_PER_SANDBOX = 32;
/** How long a signed link to a private preview may be opened (it sets a session of its own). */
const PREVIEW_LINK_SECONDS = 600;

export const AGENT_MALLOC_TUNABLES = 'glibc.malloc.mmap_threshold=65536:glibc.malloc.trim_threshold=262144';
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

function pidsFor(vcpu: number): number {
  return Math.max(512, 256 * vcpu);
}

/**
 * Variables that make a program's start load code (the dynamic loader's LD_*, GCONV_PATH; Node's
 * NODE_OPTIONS with --require/--import/--inspect, and the other NODE_*; OPENSSL_CONF and
 * OPENSSL_MODULES, which load provider libraries): a template's go to its programs through the
 * agent (SANDBOXD_LOADER_ENV), never into the agent's own start, so that nothing of the image is
 * loaded into the agent (runtime/agent-runtime.ts).
 */
const LOADER_ENV_RE = /^(LD_|NODE_|OPENSSL_|GCONV_PATH$)/;

function splitLoaderEnv(env: Record<string, string>): { plain: Record<string, string>; loader: Record<string, string> } {
  const plain: Record<string, string> = {};
  const loader: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) (LOADER_ENV_RE.test(k) ? loader : plain)[k] = v;
  return { plain, loader };
}

type SpecSource = Pick<SandboxRow, 'layers' | 'vcpu' | 'memoryMb' | 'diskGb' | 'internetAccess' | 'templateEnv' | 'envVars' | 'egress'>;

/** The policy a create or `PUT /network` asks for, validated; null when it is the default. */
export function egressFrom(body: { internet_access?: boolean; allow_out?: string[]; deny_out?: string[] }): SandboxRow['egress'] {
  const policy = { internet: body.internet_access ?? true, allow: normalizeEntries(body.allow_out, 'allow_out'), deny: normalizeEntries(body.deny_out, 'deny_out') };
  return isRestricted(policy) ? policy : null;
}

function specFor(id: string, src: SpecSource, layerPath: (id: string) => string): SandboxSpec {
  const templateEnv = splitLoaderEnv(src.templateEnv);
  return withSandboxId({
    id: '',
    lowerDirs: src.layers.map(layerPath),
    layerIds: [...src.layers],
    resources: { vcpu: src.vcpu, memoryMb: src.memoryMb, diskGb: src.diskGb, pidsMax: pidsFor(src.vcpu) },
    internetAccess: src.internetAccess,
    egress: src.egress ?? DEFAULT_EGRESS,
    hostname: '',
    env: {
      PATH: DEFAULT_PATH,
      HOME: '/root',
      LANG: 'C.UTF-8',
      TERM: 'xterm-256color',
      ...templateEnv.plain,
      SANDBOXD_LOADER_ENV: JSON.stringify(templateEnv.loader),
      // The agent streams big files in 64 KiB buffers: allocated with mmap they go back to the
      // system when freed, instead of staying in glibc's heap after a transfer.
      GLIBC_TUNABLES: AGENT_MALLOC_TUNABLES,
      SANDBOXD_ENV_VARS: JSON.stringify(src.envVars),
      // The agent reports its limits in /metrics (it cannot read its cgroup: /sys/fs/cgroup is masked).
      SANDBOXD_LIMITS: JSON.stringify({ vcpu: src.vcpu, memory_mb: src.memoryMb, disk_mb: src.diskGb * 1024 }),
    },
  }, id);
}

/** Waits before the second and third try of a failed teardown. */
const TEARDOWN_RETRIES_MS = [1000, 5000];
/** Teardowns at once (each kills a container and removes its mounts, network and files). */
const TEARDOWN_CONCURRENCY = 8;
/** How long a gone agent's container is watched for its exit: every 100 ms for GONE_FAST_MS, then every second. */
const GONE_WATCH_MS = 30_000;
const GONE_FAST_MS = 3_000;
/** How often sweep purges tombstones older than tombstoneSeconds. */
const PURGE_INTERVAL_MS = 60_000;

export class SandboxService {
  /** Sandboxes whose gone agent is being looked into (agentGone). */
  private checkingGone = new Set<string>();
  /** Deleted sandboxes whose host objects are being removed (tearDown). */
  private teardowns = new Map<string, Promise<void>>();
  private teardownSlots = new Slots(TEARDOWN_CONCURRENCY);
  /** When sweep last purged old tombstones (ms since the epoch). */
  private lastPurge = 0;
  /**
   * The latest use of each sandbox with an idle timeout (ms since the epoch): a call through the
   * gateway or to its lifecycle. Kept here, not written per call; the stored idle check time is
   * moved only when it comes due (sweep).
   */
  private activity = new Map<string, number>();
  /** Wake-ups under way (auto_resume): concurrent requests to a sleeping sandbox share one. */
  private waking = new Map<string, Promise<void>>();

  private readonly pool: WarmPool;

  constructor(private d: SandboxServiceDeps) {
    this.pool =
      d.pool ??
      new WarmPool({ runtime: d.runtime, log: d.log, minPerKey: 0, maxMemoryMb: 0, horizonSeconds: 0, shrinkAfterMs: 0, bootConcurrency: availableParallelism(), tickMs: 0 });
  }

  render(row: SandboxRow): Sandbox {
    const publicHost = this.d.gateway.publicHost(row.id, row.gatewayPort);
    return {
      object: 'sandbox',
      id: row.id,
      organization_id: row.orgId,
      status: row.status === 'creating' ? 'running' : row.status,
      public_host: publicHost,
      direct_url: publicHost,
      template_name: row.templateName,
      template_id: row.templateId,
      region: row.region,
      internet_access: row.internetAccess && (row.egress?.internet ?? true),
      network: this.network(row),
      timeout_seconds: row.timeoutSeconds,
      expires_at: row.expiresAt,
      on_timeout: row.onTimeout,
      idle_timeout_seconds: row.idleTimeoutSeconds,
      auto_resume: row.autoResume,
      created_at: row.createdAt,
      updated_at: row.updatedAt,
      resources: { vcpu: row.vcpu, memory_mb: row.memoryMb, disk_gb: row.diskGb, disk_mb: row.diskGb * 1024 },
      ...(this.d.runtime.nodeUp ? { available: this.d.runtime.nodeUp(row.nodeId) } : {}),
    };
  }

  network(row: SandboxRow): NetworkPolicy {
    return { internet_access: row.internetAccess && (row.egress?.internet ?? true), allow_out: row.egress?.allow ?? [], deny_out: row.egress?.deny ?? [] };
  }

  /**
   * Replaces a sandbox's egress policy (running, paused or stopped). The store first, then the
   * runtime: a crash in between leaves the new policy recorded, and the next start applies it; a
   * runtime that fails answers an error to retry (the policy is recorded already).
   */
  async setNetwork(orgId: string, id: string, body: SetNetworkBody): Promise<NetworkPolicy> {
    const egress = egressFrom(body);
    return this.d.locks.run(id, async () => {
      const row = await this.get(orgId, id);
      if (row.status !== 'running' && row.status !== 'paused' && row.status !== 'stopped') {
        throw new ServiceError('INVALID_STATE', `cannot set the network of a sandbox whose current state is ${row.status}`, { id, current_state: row.status });
      }
      if (!row.internetAccess) {
        if (!egress || egress.internet) {
          throw new ServiceError('INVALID_STATE', `sandbox ${id} was created with internet_access false: it has no network, so none can be given to it now; create a sandbox with internet access (and allow_out/deny_out) instead`, { id });
        }
        return this.network(row);
      }
      const next = await this.d.store.sandboxes.update(id, row.version, { egress, updatedAt: new Date().toISOString() });
      if (!next) throw new ServiceError('INVALID_STATE', `sandbox ${id} was changed by another request while this one ran; read it again and retry`, { id, current_state: row.status });
      try {
        await this.d.runtime.setEgress(id, egress ?? DEFAULT_EGRESS);
      } catch (err) {
        if (err instanceof ServiceError || isProgrammingError(err)) throw err;
        throw new ServiceError('RUNTIME_ERROR', 'the policy is recorded but could not be applied yet; try again').withDetail(describeCause(err));
      }
      return this.network(next);
    });
  }

  spec(row: SandboxRow): SandboxSpec {
    return specFor(row.id, row, (l) => this.d.layerPath(l));
  }

  /** How the daemon's own calls reach a sandbox's agent, wherever the runtime runs it. */
  private agent(id: string): AgentTarget {
    return (timeoutMs) => this.d.runtime.dialAgent(id, timeoutMs);
  }

  private event(kind: SandboxEventKind, row: SandboxRow, reason?: string): void {
    this.d.events.publish({
      kind,
      orgId: row.orgId,
      data: { id: row.id, status: row.status, at: new Date().toISOString(), ...(reason ? { reason } : {}) },
    });
  }

  private route(row: SandboxRow): void {
    if (row.status === 'deleted') {
      this.d.routes.delete(row.id);
      return;
    }
    this.d.routes.set(routeOf(row, this.d.runtime));
  }

  /** A use of the sandbox (a lifecycle call about it, or a request through its gateway): it is not idle. */
  touch(id: string): void {
    if (!this.d.routes.get(id)?.tracksIdle) return;
    this.activity.set(id, Date.now());
    this.d.cluster?.used(id);
  }

  /** Another replica saw the sandbox used at `at`. */
  usedElsewhere(id: string, at: number): void {
    if ((this.activity.get(id) ?? 0) < at) this.activity.set(id, at);
  }

  /**
   * auto_resume: a request reached a paused sandbox that wakes on traffic. Resumes it once for all
   * the requests that arrive meanwhile; resolves when it runs (or when it no longer sleeps).
   */
  wake(id: string): Promise<void> {
    let w = this.waking.get(id);
    if (!w) {
      w = (async () => {
        // A pause under way (the gateway already sees it paused) finishes first.
        await this.d.locks.run(id, async () => undefined);
        const row = await this.d.store.sandboxes.byId(id);
        if (!row || row.status !== 'paused' || !row.autoResume) return;
        await this.resume(row.orgId, id, 'traffic').catch((err: unknown) => {
          // Another request resumed it first: that is what was wanted.
          if (!(err instanceof ServiceError && err.code === 'INVALID_STATE')) throw err;
        });
      })().finally(() => this.waking.delete(id));
      this.waking.set(id, w);
    }
    return w;
  }

  /** A paused sandbox that sleeps on its deadline is kept this long, then deleted. */
  private retentionDeadline(row: SandboxRow, from: number): string | null {
    if (row.onTimeout !== 'pause') return row.expiresAt;
    return new Date(from + (this.d.pausedRetentionSeconds ?? 7 * 86_400) * 1000).toISOString();
  }

  /** `signal`: the client went away; honoured only while the create still waits for a sandbox. */
  async create(orgId: string, body: CreateSandboxBody, opts: { signal?: AbortSignal } = {}): Promise<{ sandbox: Sandbox; token: string; tokenExpiresAt: Date }> {
    if (body.snapshot_id !== undefined) {
      if (body.template_id !== undefined || body.template_name !== undefined) {
        throw new ServiceError('VALIDATION_ERROR', 'give either snapshot_id or a template (template_id or template_name), not both: a snapshot brings its template');
      }
      if (!this.d.snapshots) throw new ServiceError('RUNTIME_ERROR', 'this service keeps no snapshots');
      const found = await this.d.snapshots.get(orgId, body.snapshot_id);
      const snapshots = this.d.snapshots;
      return snapshots.pinned(found.layers, async () => {
        // Read again with its layers pinned: a delete that came first is a 404, one that comes later keeps them.
        const snap = await snapshots.get(orgId, found.id);
        return this.createFrom(
          orgId,
          {
            templateId: snap.templateId,
            templateName: snap.templateName,
            vcpu: snap.vcpu,
            memoryMb: snap.memoryMb,
            diskGb: snap.diskGb,
            layers: snap.layers,
            templateEnv: snap.templateEnv,
            envVars: snap.envVars,
            snapshotId: snap.id,
            lineage: [snap.sandboxId],
            poolId: `snap:${snap.id}`,
          },
          body,
          opts,
        );
      });
    }
    const templateRef = body.template_id ?? body.template_name;
    if (!templateRef) {
      throw new ServiceError('VALIDATION_ERROR', `either template_id or template_name must be provided (e.g. "${DEFAULT_TEMPLATE}"), or snapshot_id`);
    }
    // The organization's limits are read while the template is looked up: two round trips at once.
    const limits = this.d.quotas.limitsFor(orgId);
    limits.catch(() => undefined);
    const template = await this.d.templates.resolve(templateRef, orgId);
    if (template.status !== 'active') {
      throw new ServiceError('TEMPLATE_NOT_READY', `template "${template.name}" is ${template.status}, not active`, { template: template.name });
    }
    return this.createFrom(
      orgId,
      {
        templateId: template.id,
        templateName: template.name,
        vcpu: template.vcpu,
        memoryMb: template.memoryMb,
        diskGb: template.diskGb,
        layers: template.layers,
        templateEnv: { ...template.env, ...(template.workdir ? { SANDBOXD_AGENT_WORKSPACE: template.workdir } : {}) },
        envVars: {},
        snapshotId: null,
        lineage: [],
        poolId: template.id,
      },
      body,
      opts,
      limits,
    );
  }

  private async createFrom(
    orgId: string,
    src: CreateSource,
    body: CreateSandboxBody,
    opts: { signal?: AbortSignal },
    limitsRead?: Promise<OrgLimits>,
  ): Promise<{ sandbox: Sandbox; token: string; tokenExpiresAt: Date }> {
    const startedAt = performance.now();
    // A cluster reads where the sandbox may go while the create is checked and admitted.
    this.d.runtime.prepareTake?.();
    const limits = await (limitsRead ?? this.d.quotas.limitsFor(orgId));
    checkSize(limits, src, src.snapshotId ? `snapshot ${src.snapshotId}` : `template "${src.templateName}"`);
    const timeoutSeconds = timeoutFor(limits, body.timeout_seconds);
    const named = body.allow_out !== undefined || body.deny_out !== undefined || body.internet_access !== undefined;
    const egress = src.egress !== undefined && !named ? src.egress : egressFrom(body);
    if (body.internet_access === false && (body.allow_out?.length || body.deny_out?.length)) {
      throw new ServiceError('VALIDATION_ERROR', 'allow_out and deny_out need internet_access: a sandbox created without it has no network at all');
    }
    const now = new Date();
    const row: SandboxRow = {
      id: newSandboxId(),
      orgId,
      templateId: src.templateId,
      templateName: src.templateName,
      status: 'creating',
      region: body.region || 'local',
      internetAccess: body.internet_access ?? true,
      egress: body.internet_access === false ? null : egress,
      timeoutSeconds,
      expiresAt: timeoutSeconds ? new Date(now.getTime() + timeoutSeconds * 1000).toISOString() : null,
      vcpu: src.vcpu,
      memoryMb: src.memoryMb,
      diskGb: src.diskGb,
      layers: src.layers,
      templateEnv: src.templateEnv,
      envVars: { ...src.envVars, ...(body.env_vars ?? {}) },
      gatewayPort: null,
      nodeId: this.d.nodeId,
      version: 0,
      deletedReason: null,
      createdAt: now.toISOString(),
      updatedAt: now.toISOString(),
      deletedAt: null,
      onTimeout: body.on_timeout ?? 'delete',
      idleTimeoutSeconds: body.idle_timeout_seconds ?? null,
      autoResume: body.auto_resume ?? false,
      idleCheckAt: body.idle_timeout_seconds ? new Date(now.getTime() + body.idle_timeout_seconds * 1000).toISOString() : null,
      snapshotId: src.snapshotId,
      lineage: src.lineage,
    };
    // The row exists before anything is booted, so a crash half-way is found and cleaned at restart;
    // inserted as the quota admits it, it counts for every create after this one while this one
    // waits for its sandbox. Its id is a placeholder until then: a create gets the first sandbox
    // ready for its key (warm-pool.ts), which was booted with an id of its own. The pool's
    // sandboxes are handed out only once admitted, so the pool never counts against anyone.
    // The creation rate limit is taken in the same step, once the quota admits it (a create the
    // quota refuses takes no slot of it): under the organization's lock, one read of its window.
    const demand = { sandboxes: 1, memoryMb: row.memoryMb, diskGb: row.diskGb };
    // On a cluster the node's answer is the slow part: it is asked while the create is admitted
    // (two or three round trips to PostgreSQL), when the organization's last admission left ample
    // room for it. Refused after all (another replica's creates took the room): the sandbox is
    // destroyed when it comes, and nothing of it stays (it has no row; a node that lost the call
    // removes it as no one's). Near a limit, the node is asked only once admitted.
    const early = this.d.runtime.takeReady !== undefined && this.d.quotas.likelyAdmits(orgId, demand);
    const admitted = this.d.quotas.admit(orgId, demand, () => this.d.store.sandboxes.insert(row), { rate: this.d.createLimiter });
    const taking = early ? this.takeSandbox(row, src.poolId, opts.signal) : undefined;
    // (Awaited below once admitted; a node's refusal that comes first is not left unhandled.)
    taking?.catch(() => undefined);
    try {
      await admitted;
    } catch (err) {
      if (taking) {
        void taking.then(
          (t) => this.d.runtime.destroy(t.id).catch((e: unknown) => this.d.log('destroying the sandbox of a refused create failed', { id: t.id, error: String(e) })),
          () => undefined,
        );
      }
      throw err;
    }
    const undo = new UndoStack((msg) => this.d.log(`create: ${msg}`, { id: row.id }));
    undo.push('placeholder row', () => this.d.store.sandboxes.remove(row.id));
    try {
      const { id, at, source } = await (taking ?? this.takeSandbox(row, src.poolId, opts.signal));
      undo.push('sandbox', () => this.d.runtime.destroy(id));
      undo.push('route', async () => {
        this.d.routes.delete(id);
        await this.d.gateway.close(id);
      });
      const [port, { token, expiresAt }] = await Promise.all([this.d.gateway.open(id, null), this.d.tokens.issue(id, orgId)]);
      // Its lifetime starts when it is handed to the client, not when the create began to wait.
      const running: SandboxRow = {
        ...row,
        id,
        status: 'running',
        gatewayPort: port,
        // On a cluster, the node placement put it on: its row counts what it holds there from now.
        nodeId: this.d.runtime.nodeOf?.(id) ?? row.nodeId,
        expiresAt: timeoutSeconds ? new Date(at.getTime() + timeoutSeconds * 1000).toISOString() : null,
        idleCheckAt: row.idleTimeoutSeconds ? new Date(at.getTime() + row.idleTimeoutSeconds * 1000).toISOString() : null,
        createdAt: at.toISOString(),
        updatedAt: new Date().toISOString(),
      };
      // The placeholder becomes the sandbox's row, running, in one step of the store's: no
      // admission counts both rows. No lock is taken for the id: no one could name it before
      // this row, and from the row on nothing here waits (a verb that finds the row at once, from
      // another replica, comes after the route and the event, as it would after the create).
      // (Undone by removing the row, also when the store wrote it but its answer was lost.)
      undo.push('row', () => this.d.store.sandboxes.remove(id));
      if (!(await this.d.store.sandboxes.replace(row.id, running))) {
        throw new ServiceError('RUNTIME_ERROR', 'the create took too long and was taken for abandoned; try again').withDetail(`its placeholder row ${row.id} was removed by a clean-up`);
      }
      this.d.runtime.recorded?.(id);
      this.route(running);
      undo.commit();
      if (running.idleTimeoutSeconds) this.activity.set(id, Date.now());
      this.event('created', running);
      this.d.metrics?.creates.inc({ template: running.templateName, source: src.snapshotId ? 'snapshot' : src.poolId.startsWith('fork:') ? 'fork' : source });
      this.d.metrics?.createDuration.observe({ source }, (performance.now() - startedAt) / 1000);
      return { sandbox: this.render(running), token, tokenExpiresAt: expiresAt };
    } catch (err) {
      await undo.run();
      // A ServiceError says what it is; a bug of ours stays one (500, renderError), and anything
      // else (a tool that failed, an agent that did not answer) is an outage to retry.
      if (err instanceof ServiceError || isProgrammingError(err)) throw err;
      throw new ServiceError('RUNTIME_ERROR', 'could not create the sandbox; try again').withDetail(describeCause(err));
    }
  }

  /**
   * `POST /v1/sandboxes/{id}/fork`: `count` new running sandboxes with the source's files as they
   * are now (one copy, frozen for it if it runs), each with its own id, token, disk, network and
   * deadline: the caller's, or the source's. All or none: a fork that fails half-way deletes the
   * sandboxes it made.
   */
  async fork(orgId: string, id: string, body: ForkBody, opts: { signal?: AbortSignal } = {}): Promise<Array<{ sandbox: Sandbox; token: string; tokenExpiresAt: Date }>> {
    const snapshots = this.need();
    const count = body.count ?? 1;
    await this.get(orgId, id);
    await snapshots.checkStorage(orgId, 0);
    const { src, captured } = await this.d.locks.run(id, async () => {
      const r = await this.get(orgId, id);
      if (r.status !== 'running' && r.status !== 'paused' && r.status !== 'stopped') {
        throw new ServiceError('INVALID_STATE', `cannot fork a sandbox whose current state is ${r.status}`, { id, current_state: r.status });
      }
      // The copy counts against the organization's snapshot storage for as long as a fork mounts it.
      let c: CapturedLayer;
      try {
        c = await snapshots.capture(r, 'fork', await snapshots.room(orgId));
      } catch (err) {
        if (err instanceof ExportTooLarge) await snapshots.checkStorage(orgId, err.used);
        throw err;
      }
      try {
        await snapshots.checkStorage(orgId, c.sizeBytes);
      } catch (err) {
        await snapshots.discard(c);
        throw err;
      }
      return { src: r, captured: c };
    });
    const source: CreateSource = {
      templateId: src.templateId,
      templateName: src.templateName,
      vcpu: src.vcpu,
      memoryMb: src.memoryMb,
      diskGb: src.diskGb,
      layers: [captured.layerId, ...src.layers],
      templateEnv: src.templateEnv,
      envVars: captured.envVars,
      snapshotId: null,
      lineage: [src.id, ...src.lineage].slice(0, 100),
      poolId: `fork:${captured.layerId}`,
      egress: src.internetAccess ? src.egress : undefined,
    };
    const createBody: CreateSandboxBody = {
      region: src.region,
      timeout_seconds: body.timeout_seconds !== undefined ? body.timeout_seconds : src.timeoutSeconds,
      internet_access: body.internet_access ?? (body.allow_out !== undefined || body.deny_out !== undefined ? undefined : src.internetAccess),
      allow_out: body.allow_out,
      deny_out: body.deny_out,
      env_vars: body.env_vars,
      on_timeout: body.on_timeout ?? src.onTimeout,
      idle_timeout_seconds: body.idle_timeout_seconds !== undefined ? body.idle_timeout_seconds : src.idleTimeoutSeconds,
      auto_resume: body.auto_resume ?? src.autoResume,
    };
    // Without internet_access named, the fork gets the source's network and policy (both, or none).
    if (body.internet_access === undefined && body.allow_out === undefined && body.deny_out === undefined) {
      createBody.internet_access = src.internetAccess;
    } else {
      source.egress = undefined;
    }
    const results = await Promise.allSettled(Array.from({ length: count }, () => this.createFrom(orgId, source, createBody, opts)));
    // The pool keeps nothing for a key no create will ask for again.
    await this.pool.dropTemplate(source.poolId);
    const made = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      for (const m of made) {
        await this.delete(orgId, m.sandbox.id, 'fork_failed').catch((err: unknown) => this.d.log('removing a fork of a failed fork failed', { id: m.sandbox.id, error: String(err) }));
      }
      captured.release();
      void snapshots.collectSoon();
      throw failed.reason;
    }
    captured.release();
    this.d.log('sandbox forked', { id, forks: made.map((m) => m.sandbox.id), bytes: captured.sizeBytes, frozen_ms: Math.round(captured.frozenMs) });
    return made;
  }

  /**
   * `POST /v1/sandboxes/{id}/restore`: the sandbox's files become those of a snapshot of its own
   * lineage (taken of it, or of a sandbox it was forked or made from); its processes start again
   * on them. It keeps its id, URL, token, network and deadline; a stopped sandbox stays stopped
   * (its next start shows the snapshot's files), a paused one runs.
   */
  async restore(orgId: string, id: string, snapshotId: string): Promise<SandboxRow> {
    const snapshots = this.need();
    const found = await snapshots.get(orgId, snapshotId);
    return snapshots.pinned(found.layers, () => this.restorePinned(orgId, id, snapshotId));
  }

  private async restorePinned(orgId: string, id: string, snapshotId: string): Promise<SandboxRow> {
    // Read again with its layers pinned: a delete that came first is a 404, one that comes later keeps them.
    const snap = await this.need().get(orgId, snapshotId);
    return this.transition(orgId, id, 'restore', ['running', 'paused', 'stopped'], async (r) => {
      if (snap.sandboxId !== r.id && !r.lineage.includes(snap.sandboxId)) {
        throw new ServiceError(
          'VALIDATION_ERROR',
          `snapshot ${snap.id} is not of this sandbox's lineage: it was taken of sandbox ${snap.sandboxId}, which this sandbox does not descend from; create a sandbox from it instead`,
          { id: r.id, snapshot_id: snap.id },
        );
      }
      if (snap.diskGb > r.diskGb) throw new ServiceError('VALIDATION_ERROR', `snapshot ${snap.id} was taken of a sandbox with a larger disk (${snap.diskGb} GB) than this one's (${r.diskGb} GB)`);
      const live = r.status !== 'stopped';
      if (r.status === 'paused') await this.d.runtime.resume(r.id);
      await this.d.runtime.stop(r.id);
      await this.d.runtime.resetDisk(r.id, r.diskGb);
      const patch = { layers: snap.layers, templateEnv: snap.templateEnv, envVars: snap.envVars, snapshotId: snap.id };
      if (live) {
        try {
          await this.bootAgain({ ...r, ...patch });
        } catch (err) {
          // Its files are the snapshot's already: the row says so, and that it is stopped.
          const stopped = await this.d.store.sandboxes.update(r.id, r.version, { ...patch, status: 'stopped', updatedAt: new Date().toISOString() });
          if (stopped) this.route(stopped);
          throw err;
        }
      }
      this.d.log('sandbox restored', { id: r.id, snapshot: snap.id });
      return { ...patch, status: live ? 'running' : 'stopped' };
    });
  }

  private need(): SnapshotService {
    if (!this.d.snapshots) throw new ServiceError('RUNTIME_ERROR', 'this service keeps no snapshots');
    return this.d.snapshots;
  }

  /**
   * The sandbox for a create: the first one ready for its key (the pool's, or one booted now), with
   * the create's env_vars applied, which also proves its agent answers. One that does not answer is
   * destroyed and the next one taken, ahead of later creates; the third such failure fails the create.
   * `at`: when it was handed over (creates are handed theirs in arrival order).
   */
  private async takeSandbox(row: SandboxRow, poolId: string, signal: AbortSignal | undefined): Promise<{ id: string; at: Date; source: 'warm_pool' | 'cold' }> {
    let source: 'warm_pool' | 'cold' = 'cold';
    // Booted (or taken from the pool) open, given the create's policy before it is handed out.
    const boot: SpecSource = { ...row, envVars: {}, egress: null };
    const takeReady = this.d.runtime.takeReady?.bind(this.d.runtime);
    if (takeReady) return this.takeFromNode(takeReady, row, boot, poolId, signal);
    const key = warmKeyOf(specFor('sb', boot, (l) => this.d.layerPath(l)), poolId, row.templateName);
    const make = async () => {
      const id = newSandboxId();
      try {
        await this.d.runtime.create(specFor(id, boot, (l) => this.d.layerPath(l)));
        await waitForAgentPrimed(this.agent(id), this.d.agentReadyTimeoutMs, () => this.pool.waiting(key.key) === 0);
        return id;
      } catch (err) {
        await this.d.runtime.destroy(id).catch(() => undefined);
        throw err;
      }
    };
    for (let attempt = 1; ; attempt++) {
      const id = await this.pool.acquire(key, make, { signal, retry: attempt > 1, onServed: (hit) => (source = hit ? 'warm_pool' : 'cold') });
      const at = new Date();
      try {
        const res = await agentJson(this.agent(id), 'PUT', '/env', { env_vars: row.envVars }, 2000);
        if (res.status !== 200) throw new Error(`agent answered ${res.status}`);
        if (row.egress) await this.d.runtime.setEgress(id, row.egress);
        return { id, at, source };
      } catch (err) {
        const why = err instanceof Error ? err.message : String(err);
        this.d.log('a ready sandbox did not answer; taking the next one', { id, error: why });
        await this.d.runtime.destroy(id).catch(() => undefined);
        if (attempt >= 3) throw new Error(`${attempt} sandboxes in a row did not answer: ${why}`);
      }
    }
  }

  /**
   * A cluster's create: an ask of its own to the node placement picks (services/node-pool.ts holds
   * the ready sandboxes there), which sets the create's env_vars on the agent itself (one call on
   * its socket, not a relayed connection from here) before it answers. Never through this process's
   * pool: a sandbox carrying one create's env must reach that create and no other (the pool hands
   * whatever boot ends first to whichever create waits first). A client gone meanwhile: the sandbox
   * is destroyed, nothing is created.
   */
  private async takeFromNode(
    takeReady: NonNullable<Runtime['takeReady']>,
    row: SandboxRow,
    boot: SpecSource,
    poolId: string,
    signal: AbortSignal | undefined,
  ): Promise<{ id: string; at: Date; source: 'warm_pool' | 'cold' }> {
    if (signal?.aborted) throw abandonedCreate();
    const id = await takeReady(specFor('sb', boot, (l) => this.d.layerPath(l)), { id: poolId, label: row.templateName }, row.envVars);
    const at = new Date();
    try {
      if (signal?.aborted) throw abandonedCreate();
      if (row.egress) await this.d.runtime.setEgress(id, row.egress);
      return { id, at, source: this.d.runtime.wasWarm?.(id) ? 'warm_pool' : 'cold' };
    } catch (err) {
      await this.d.runtime.destroy(id).catch(() => undefined);
      throw err;
    }
  }

  /** The row of a sandbox the caller may see: 404 unknown, 403 another organization, 410 expired. */
  async get(orgId: string, id: string, opts: { allowDeleted?: boolean } = {}): Promise<SandboxRow> {
    const row = await this.d.store.sandboxes.byId(id);
    if (!row || row.status === 'creating') throw new ServiceError('NOT_FOUND', `sandbox ${id} not found`, { id });
    if (row.orgId !== orgId) throw new ServiceError('PERMISSION_DENIED', undefined, { id });
    if (row.status === 'deleted' && !opts.allowDeleted) {
      if (row.deletedReason === 'retention') {
        throw new ServiceError('SANDBOX_EXPIRED', `sandbox ${id} slept past its deadline, was kept paused until ${row.expiresAt}, and was then deleted`, {
          id,
          sandbox_id: id,
          expires_at: row.expiresAt,
          status: 'deleted',
        });
      }
      if (row.deletedReason === 'expired') {
        throw new ServiceError('SANDBOX_EXPIRED', `sandbox ${id} expired at ${row.expiresAt} and was deleted`, {
          id,
          sandbox_id: id,
          expires_at: row.expiresAt,
          status: 'deleted',
        });
      }
      throw new ServiceError('NOT_FOUND', `sandbox ${id} not found (it was deleted)`, { id });
    }
    return row;
  }

  async list(orgId: string, q: { limit?: number; status?: string; template?: string; region?: string; cursor?: string }) {
    const limit = q.limit ?? 100;
    let after: { createdAt: string; id: string } | undefined;
    if (q.cursor) {
      try {
        const [createdAt, id] = JSON.parse(Buffer.from(q.cursor, 'base64url').toString('utf8')) as [string, string];
        if (typeof createdAt !== 'string' || typeof id !== 'string') throw new Error('bad cursor');
        after = { createdAt, id };
      } catch {
        throw new ServiceError('VALIDATION_ERROR', 'cursor is not a value returned as next_cursor');
      }
    }
    if (q.status && !['running', 'paused', 'stopped'].includes(q.status)) {
      throw new ServiceError('VALIDATION_ERROR', 'status must be one of running, paused, stopped');
    }
    const rows = await this.d.store.sandboxes.list({ orgId, status: q.status, template: q.template, region: q.region, after, limit: limit + 1 });
    const hasMore = rows.length > limit;
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    const nextCursor = hasMore && last ? Buffer.from(JSON.stringify([last.createdAt, last.id])).toString('base64url') : null;
    return { data: page.map((r) => this.render(r)), hasMore, nextCursor };
  }

  /**
   * Runs a state change under the sandbox's lock, from the states in `from`, with a CAS on the row.
   * `admit`, when given, wraps the work and the update (a quota admission around both).
   */
  private async transition(
    orgId: string,
    id: string,
    action: string,
    from: SandboxRow['status'][],
    work: (row: SandboxRow) => Promise<Partial<SandboxRow>>,
    admit?: (row: SandboxRow, commit: () => Promise<SandboxRow>) => Promise<SandboxRow>,
  ): Promise<SandboxRow> {
    return this.d.locks.run(id, async () => {
      const row = await this.get(orgId, id);
      if (!from.includes(row.status)) {
        throw new ServiceError('INVALID_STATE', `cannot ${action} a sandbox whose current state is ${row.status}`, {
          id,
          current_state: row.status,
        });
      }
      const commit = async () => {
        const patch = await work(row);
        const next = await this.d.store.sandboxes.update(id, row.version, { ...patch, updatedAt: new Date().toISOString() });
        // Another replica or request changed it between the read and the write: the caller's
        // view is stale, which a retry with a fresh read resolves.
        if (!next) {
          // The work was done but not recorded: the route follows what the store says.
          const stored = await this.d.store.sandboxes.byId(id);
          if (stored) this.route(stored);
          throw new ServiceError('INVALID_STATE', `sandbox ${id} was changed by another request while this one ran; read it again and retry`, { id, current_state: row.status });
        }
        return next;
      };
      const next = admit ? await admit(row, commit) : await commit();
      this.route(next);
      return next;
    });
  }

  /**
   * `reason`: who paused it: `api`, `idle` (no use for idle_timeout_seconds) or `timeout` (its
   * deadline, with on_timeout "pause"). A sandbox that sleeps on its deadline is then kept for the
   * retention time (its expires_at says until when).
   */
  async pause(orgId: string, id: string, reason: 'api' | 'idle' | 'timeout' = 'api'): Promise<SandboxRow> {
    const row = await this.transition(orgId, id, 'pause', ['running'], async (r) => {
      // New requests see it paused from here (they wait for the pause, or wake it after); one
      // already let in keeps an idle sandbox awake.
      this.d.routes.setStatus(r.id, 'paused');
      if (reason === 'idle' && this.d.gateway.busy?.(r.id)) {
        this.d.routes.setStatus(r.id, 'running');
        this.activity.set(r.id, Date.now());
        throw new ServiceError('INVALID_STATE', `sandbox ${r.id} is in use`, { id: r.id, current_state: 'running' });
      }
      // Its time is up: what is in flight is cut (as a delete would), not frozen until someone
      // wakes it; a client that tries again wakes it (auto_resume) or is told it sleeps.
      if (reason === 'timeout') {
        this.d.gateway.interrupt?.(r.id);
        this.d.cluster?.interrupted(r.id);
      }
      try {
        await this.d.runtime.pause(r.id);
      } catch (err) {
        this.d.routes.setStatus(r.id, 'running');
        throw err;
      }
      return { status: 'paused', expiresAt: this.retentionDeadline(r, Date.now()) };
    });
    this.activity.delete(id);
    this.event('paused', row, reason);
    return row;
  }

  /** `reason`: `api`, or `traffic` (auto_resume). Its deadline and idle clock start again. */
  async resume(orgId: string, id: string, reason: 'api' | 'traffic' = 'api'): Promise<SandboxRow> {
    const row = await this.transition(orgId, id, 'resume', ['paused'], async (r) => {
      await this.d.runtime.resume(r.id);
      const now = Date.now();
      return {
        status: 'running',
        ...(r.onTimeout === 'pause' ? { expiresAt: r.timeoutSeconds ? new Date(now + r.timeoutSeconds * 1000).toISOString() : null } : {}),
        ...(r.idleTimeoutSeconds ? { idleCheckAt: new Date(now + r.idleTimeoutSeconds * 1000).toISOString() } : {}),
      };
    });
    if (row.idleTimeoutSeconds) this.activity.set(id, Date.now());
    this.event('resumed', row, reason);
    return row;
  }

  async stop(orgId: string, id: string): Promise<SandboxRow> {
    const row = await this.transition(orgId, id, 'stop', ['running', 'paused'], async (r) => {
      this.d.routes.setStatus(r.id, 'stopped');
      this.activity.delete(r.id);
      await this.d.runtime.stop(r.id);
      return { status: 'stopped' };
    });
    this.event('stopped', row);
    return row;
  }

  async start(orgId: string, id: string): Promise<SandboxRow> {
    // A stopped sandbox already holds its disk; running again it holds a slot and its memory. The
    // organization's admissions wait for this boot, so the row is running before the next check.
    const row = await this.transition(
      orgId,
      id,
      'start',
      ['stopped'],
      async (r) => {
        await this.bootAgain(r);
        const now = Date.now();
        return {
          status: 'running',
          // A sleeping sandbox's expires_at was its retention: running again, its timeout counts from now.
          ...(r.onTimeout === 'pause' ? { expiresAt: r.timeoutSeconds ? new Date(now + r.timeoutSeconds * 1000).toISOString() : null } : {}),
          ...(r.idleTimeoutSeconds ? { idleCheckAt: new Date(now + r.idleTimeoutSeconds * 1000).toISOString() } : {}),
        };
      },
      (r, commit) => this.d.quotas.admit(r.orgId, { sandboxes: 1, memoryMb: r.memoryMb, diskGb: 0 }, commit),
    );
    if (row.idleTimeoutSeconds) this.activity.set(id, Date.now());
    this.event('started', row);
    return row;
  }

  /**
   * Boots a stopped sandbox on its disk and waits for its agent. The agent runs the tenant's disk,
   * so it may never answer properly: then the container is stopped again (the sandbox stays
   * stopped, nothing keeps running) and the caller gets a 502 saying so.
   */
  private async bootAgain(r: SandboxRow): Promise<void> {
    await this.d.runtime.start(this.spec(r));
    try {
      await waitForAgent(this.agent(r.id), this.d.agentReadyTimeoutMs);
    } catch (err) {
      await this.d.runtime.stop(r.id).catch((e: unknown) => this.d.log('stopping a sandbox whose agent failed failed', { id: r.id, error: String(e) }));
      throw new ServiceError('AGENT_UNAVAILABLE', `the sandbox's agent did not become ready, so it was stopped again`, { id: r.id }).withDetail(
        err instanceof Error ? err.message : String(err),
      );
    }
  }

  async delete(orgId: string, id: string, reason = 'deleted'): Promise<SandboxRow> {
    const row = await this.transition(orgId, id, 'delete', ['running', 'paused', 'stopped'], async (r) => {
      this.d.routes.delete(r.id);
      this.activity.delete(r.id);
      this.d.tokens.forget(r.id);
      await this.d.gateway.close(r.id);
      return { status: 'deleted', deletedReason: reason, deletedAt: new Date().toISOString() };
    });
    this.tearDown(row.id, row.layers.some((l) => this.d.snapshots?.owns(l)));
    this.event(reason === 'expired' ? 'expired' : 'deleted', row, reason);
    return row;
  }

  /**
   * Removes a deleted sandbox from the host (its container first, then network, disk, directory)
   * after the delete has answered: the row already says deleted and nothing routes to it, so the
   * client does not wait for the teardown. A teardown that fails is tried again twice; one cut
   * short by a crash is finished by the next start's reconcile (the runtime still lists the
   * sandbox, and no live row claims it). Shutdown waits for the running ones (settle).
   */
  private tearDown(id: string, usedSnapshotLayers = false): void {
    if (this.teardowns.has(id)) return;
    // A bounded number at once: a sweep after a long outage can delete a thousand together.
    const done = this.teardownSlots.run(() => this.destroyRetrying(id)).finally(() => {
      this.teardowns.delete(id);
      // It may have been the last user of a snapshot's or a fork's layer.
      if (usedSnapshotLayers) void this.d.snapshots?.collectSoon();
    });
    this.teardowns.set(id, done);
  }

  private async destroyRetrying(id: string): Promise<void> {
    for (let i = 0; ; i++) {
      try {
        await this.d.runtime.destroy(id);
        return;
      } catch (err) {
        if (i >= TEARDOWN_RETRIES_MS.length) {
          this.d.log('removing a deleted sandbox failed; the next start of the service removes what is left', { id, error: String(err) });
          return;
        }
        await new Promise((r) => setTimeout(r, TEARDOWN_RETRIES_MS[i]));
      }
    }
  }

  /** Waits until every teardown that has begun has ended (shutdown, tests). */
  async settle(): Promise<void> {
    while (this.teardowns.size > 0) await Promise.allSettled([...this.teardowns.values()]);
  }


  async setTimeout(orgId: string, id: string, timeoutSeconds: number): Promise<SandboxRow> {
    return this.transition(orgId, id, 'set the timeout of', ['running', 'paused', 'stopped'], async (r) => {
      checkTimeout(await this.d.quotas.limitsFor(orgId), timeoutSeconds);
      // Asleep with on_timeout "pause": its expires_at is its retention; the timeout counts from its wake-up.
      if (r.onTimeout === 'pause' && r.status === 'paused') return { timeoutSeconds };
      return { timeoutSeconds, expiresAt: new Date(Date.now() + timeoutSeconds * 1000).toISOString() };
    });
  }

  /** One sandbox's resource use now; a stopped one has its disk only. */
  async metrics(orgId: string, id: string): Promise<SandboxMetrics> {
    const row = await this.get(orgId, id);
    const zero = { cpuUsageNs: 0, memoryBytes: 0, memoryLimitBytes: row.memoryMb * 1024 * 1024, oomKills: 0, pids: 0, diskUsedBytes: 0, diskTotalBytes: row.diskGb * 1024 ** 3, networkRxBytes: 0, networkTxBytes: 0, egressDenied: 0 };
    const st = await this.d.runtime.stats(id).catch((err: unknown) => {
      // A node that is away is said so (503), not reported as a sandbox using nothing.
      if (err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE') throw err;
      this.d.log('reading sandbox stats failed', { id, error: String(err) });
      return zero;
    });
    return {
      sandbox_id: row.id,
      status: row.status,
      timestamp: new Date().toISOString(),
      cpu: { usage_seconds: Math.round(st.cpuUsageNs / 1e6) / 1e3, vcpu: row.vcpu },
      memory: { used_bytes: st.memoryBytes, limit_bytes: st.memoryLimitBytes || zero.memoryLimitBytes },
      disk: { used_bytes: st.diskUsedBytes, total_bytes: st.diskTotalBytes },
      network: { rx_bytes: st.networkRxBytes, tx_bytes: st.networkTxBytes },
      pids: st.pids,
      oom_kills: st.oomKills,
      egress_denied: st.egressDenied ?? 0,
    };
  }

  /** What listens inside the sandbox, by port (read from the kernel, not asked of the sandbox). */
  async ports(orgId: string, id: string): Promise<Array<{ port: number; addresses: string[]; loopback_only: boolean }>> {
    const row = await this.get(orgId, id);
    if (row.status !== 'running' && row.status !== 'paused') return [];
    const byPort = new Map<number, string[]>();
    for (const l of await this.d.runtime.listeningPorts(row.id)) byPort.set(l.port, [...(byPort.get(l.port) ?? []), l.address]);
    const loopback = (a: string) => a.startsWith('127.') || a === '::1' || a.startsWith('::ffff:7f');
    return [...byPort].map(([port, addresses]) => ({ port, addresses, loopback_only: addresses.every(loopback) }));
  }

  async refreshToken(orgId: string, id: string) {
    const row = await this.get(orgId, id);
    return this.d.tokens.issue(row.id, row.orgId);
  }

  /**
   * The gateway found no agent on a running sandbox's socket. If its container is gone too (code
   * inside killed the agent, and PID 1 exited with it), the sandbox is stopped: say so, instead of
   * reporting it running until its deadline. One check at a time per sandbox.
   */
  agentGone(id: string): void {
    if (this.checkingGone.has(id)) return;
    this.checkingGone.add(id);
    void (async () => {
      // The container's init exits right after the agent, but not in the same instant (its mount
      // namespace, and with it the sandbox's disk, goes as it exits; slower on a busy host): a check
      // made at once can still find it running. Look often at first, then now and then, outside the
      // sandbox's lock, before deciding the agent was only busy (or the connection broke for
      // another reason). A state that cannot be read now is asked again.
      const status = () => this.d.runtime.status(id).catch(() => 'running' as const);
      for (let waited = 0; waited < GONE_WATCH_MS && (await status()) === 'running'; ) {
        const step = waited < GONE_FAST_MS ? 100 : 1000;
        await new Promise((r) => setTimeout(r, step));
        waited += step;
      }
      await this.d.locks.run(id, async () => {
        const row = await this.d.store.sandboxes.byId(id);
        if (!row || row.status !== 'running') return;
        if ((await this.d.runtime.status(id)) !== 'stopped') return;
        this.d.log('sandbox stopped from inside: its agent is gone', { id });
        await this.markStopped(row, 'its agent exited (stopped from inside the sandbox)');
      });
    })()
      .catch((err: unknown) => this.d.log('checking a gone agent failed', { id, error: String(err) }))
      .finally(() => this.checkingGone.delete(id));
  }

  private async markStopped(row: SandboxRow, reason: string): Promise<void> {
    try {
      await this.d.runtime.stop(row.id);
      const next = await this.d.store.sandboxes.update(row.id, row.version, { status: 'stopped', updatedAt: new Date().toISOString() });
      if (next) {
        this.route(next);
        // Its URL answers 409 SANDBOX_STOPPED, as every stopped sandbox's does.
        await this.d.gateway.open(next.id, next.gatewayPort);
        this.event('stopped', next, reason);
      }
    } catch (err) {
      this.d.log('marking a sandbox stopped failed', { id: row.id, error: String(err) });
    }
  }

  /**
   * Publishes `oom_killed` as the runtime reports OOM kills in a running sandbox (a warm one not
   * handed out yet has no row, and is not reported). Returns the function that stops it.
   */
  watchOom(): () => void {
    return this.d.runtime.watchOom((id, kills) => {
      this.d.store.sandboxes
        .byId(id)
        .then((row) => {
          if (row?.status === 'running') this.event('oom_killed', row, `${kills} process(es) killed: out of memory`);
        })
        .catch((err: unknown) => this.d.log('reporting an OOM kill failed', { id, error: String(err) }));
    });
  }

  /**
   * Every sandbox whose deadline passed is deleted, or, with on_timeout "pause", paused (and once
   * paused past its retention, deleted); every running one unused for its idle timeout is paused.
   * Purges old tombstones.
   */
  async sweep(): Promise<number> {
    const now = new Date();
    const due = await this.d.store.sandboxes.expired(now.toISOString());
    const quiet = (err: unknown) => err instanceof ServiceError && (err.code === 'NOT_FOUND' || err.code === 'INVALID_STATE');
    for (const row of due) {
      // A long operation on it (a snapshot's copy) must not hold up every other sandbox's deadline:
      // it stays due, and the next sweep takes it.
      if (await this.working(row.id)) continue;
      try {
        if (row.onTimeout === 'pause' && row.status === 'running') await this.pause(row.orgId, row.id, 'timeout');
        else if (row.onTimeout === 'pause' && row.status === 'paused') await this.delete(row.orgId, row.id, 'retention');
        else await this.delete(row.orgId, row.id, 'expired');
      } catch (err) {
        if (!quiet(err)) this.d.log('expiring a sandbox failed', { id: row.id, error: String(err) });
      }
    }
    for (const row of await this.d.store.sandboxes.idleDue(now.toISOString())) {
      if (await this.working(row.id)) continue;
      try {
        await this.idleCheck(row, now.getTime());
      } catch (err) {
        if (!quiet(err)) this.d.log('pausing an idle sandbox failed', { id: row.id, error: String(err) });
      }
    }
    // Tombstones are kept for a day by default: purging them once a minute is plenty.
    if (now.getTime() - this.lastPurge >= PURGE_INTERVAL_MS) {
      this.lastPurge = now.getTime();
      if (this.d.cluster) await this.removeAbandonedCreates(now.getTime());
      await this.d.store.sandboxes.purgeDeleted(new Date(now.getTime() - this.d.tombstoneSeconds * 1000).toISOString());
    }
    return due.length;
  }

  /**
   * Whether a verb works on the sandbox now (in a cluster, in any replica): the sweep passes over
   * it. One that starts just after is waited for, and changes nothing the sweep then undoes: every
   * verb reads the row again under the lock.
   */
  private async working(id: string): Promise<boolean> {
    return this.d.locks.held ? this.d.locks.held(id) : this.d.locks.busy(id);
  }

  /** Cluster: rows a replica wrote for a create and never finished (it died); their sandbox, if any, goes too. */
  private async removeAbandonedCreates(now: number): Promise<void> {
    for (const row of await this.d.store.sandboxes.live()) {
      if (row.status !== 'creating' || now - Date.parse(row.createdAt) < ABANDONED_CREATE_MS || (await this.working(row.id))) continue;
      this.d.log('removing a create that a replica abandoned', { id: row.id, created_at: row.createdAt });
      await this.d.runtime.destroy(row.id).catch((err: unknown) => this.d.log('destroying an abandoned create failed', { id: row.id, error: String(err) }));
      await this.d.store.sandboxes.remove(row.id);
    }
  }

  /**
   * An idle check came due: paused if nothing used it for its idle timeout (nothing in flight, no
   * WebSocket open, no call since), or else looked at again when that much time has passed since
   * its last use.
   */
  private async idleCheck(row: SandboxRow, now: number): Promise<void> {
    const idleMs = (row.idleTimeoutSeconds ?? 0) * 1000;
    if (this.d.gateway.busy?.(row.id)) this.activity.set(row.id, now);
    // Unknown here (the daemon started since): counted from now, so a restart never pauses early.
    if (!this.activity.has(row.id)) this.activity.set(row.id, now);
    const last = this.activity.get(row.id)!;
    if (idleMs > 0 && now - last < idleMs) {
      // Under the sandbox's lock, on a fresh read: a pause, stop or delete under way is not undone.
      await this.d.locks.run(row.id, async () => {
        const fresh = await this.d.store.sandboxes.byId(row.id);
        if (fresh?.status === 'running') await this.d.store.sandboxes.update(fresh.id, fresh.version, { idleCheckAt: new Date(last + idleMs).toISOString() });
      });
      return;
    }
    await this.pause(row.orgId, row.id, 'idle');
  }

  /**
   * After a (re)start: make the runtime match the store. Interrupted creates and leftovers are
   * removed; running sandboxes whose container is gone (host reboot) boot again on their disk;
   * every live sandbox gets its route and public_host back on the same port.
   */
  async reconcile(): Promise<{ restored: number; cleaned: number; rebooted: number; lost: number; unknown: number }> {
    const stats = { restored: 0, cleaned: 0, rebooted: 0, lost: 0, unknown: 0 };
    const live = await this.d.store.sandboxes.live();
    const liveIds = new Set<string>();
    // One query of the runtime for all of them, not one per sandbox; when that fails (a node of a
    // cluster is not answering), one each, and what cannot be known is left as it is.
    const ids = live.filter((r) => r.status !== 'creating').map((r) => r.id);
    let actuals: Map<string, RuntimeStatus | 'unknown'>;
    try {
      actuals = await this.d.runtime.statuses(ids);
    } catch (err) {
      this.d.log('the runtime could not tell every sandbox state at once; asking each', { error: String(err) });
      actuals = new Map();
      for (const id of ids) {
        actuals.set(
          id,
          await this.d.runtime.status(id).catch((e: unknown) => {
            this.d.log('the state of a sandbox cannot be known now; it is left as it is', { id, error: String(e) });
            return 'unknown' as const;
          }),
        );
      }
    }
    for (const row of live) {
      if (row.status === 'creating') {
        // Alone, every create under way was this process's, cut short. In a cluster another
        // replica may be creating it now: only an abandoned one goes (the sweep takes the later ones).
        if (this.d.cluster && Date.now() - Date.parse(row.createdAt) < ABANDONED_CREATE_MS) continue;
        await this.d.runtime.destroy(row.id).catch(() => {});
        await this.d.store.sandboxes.remove(row.id);
        stats.cleaned++;
        continue;
      }
      if (!this.d.cluster) {
        await this.reconcileOne(row, actuals.get(row.id) ?? 'missing', stats, liveIds);
        continue;
      }
      // Another replica may be in the middle of a verb on it (its container changed, its row not
      // yet): under the sandbox's lock that verb is done, and the row is read again, and the
      // container too when the first reading disagreed with it. Nothing is undone that it did.
      await this.d.locks.run(row.id, async () => {
        const fresh = await this.d.store.sandboxes.byId(row.id);
        if (!fresh || fresh.status === 'deleted' || fresh.status === 'creating') return;
        let actual = actuals.get(row.id) ?? 'missing';
        if (fresh.version !== row.version || fresh.status !== actual) actual = await this.d.runtime.status(row.id).catch(() => 'unknown' as const);
        await this.reconcileOne(fresh, actual, stats, liveIds);
      });
    }
    // In a cluster, what a node holds that no row claims may be another replica's create or warm
    // sandbox: the node collects it after a grace period (services/orphans.ts), not this start.
    for (const id of this.d.cluster ? [] : await this.d.runtime.list()) {
      if (!liveIds.has(id)) {
        await this.d.runtime.destroy(id).catch((e: unknown) => this.d.log('cleaning a leftover failed', { id, error: String(e) }));
        stats.cleaned++;
      }
    }
    // Preview URLs outlive a restart: each gets its gateway port back (or a new one, if another
    // program took it meanwhile).
    for (const p of this.d.gateway.openPreview ? await this.d.store.previews.all() : []) {
      if (!liveIds.has(p.sandboxId) || !this.d.routes.get(p.sandboxId)) continue;
      try {
        const gw = await this.d.gateway
          .openPreview!(p.sandboxId, p.port, p.public, p.gatewayPort)
          .catch(() => this.d.gateway.openPreview!(p.sandboxId, p.port, p.public, null));
        if (gw !== p.gatewayPort) await this.d.store.previews.upsert({ ...p, gatewayPort: gw });
      } catch (err) {
        this.d.log('reopening a preview failed', { id: p.sandboxId, port: p.port, error: err instanceof Error ? err.message : String(err) });
      }
    }
    return stats;
  }

  /** Makes the runtime match one live row of the store (`actual`: what the runtime said of it). */
  private async reconcileOne(
    row: SandboxRow,
    actual: RuntimeStatus | 'unknown' | 'missing',
    stats: { restored: number; cleaned: number; rebooted: number; lost: number; unknown: number },
    liveIds: Set<string>,
  ): Promise<void> {
    let current = row;
    if (actual === 'unknown') {
      // Its node is away: routed as it is, its calls answer that the node is not answering.
      liveIds.add(row.id);
      this.route(row);
      await this.d.gateway.open(row.id, row.gatewayPort).catch((e: unknown) => this.d.log('reopening a gateway port failed', { id: row.id, error: String(e) }));
      stats.unknown++;
      return;
    }
    try {
      if (actual === 'missing') {
        current = (await this.d.store.sandboxes.update(row.id, row.version, {
          status: 'deleted',
          deletedReason: 'lost',
          deletedAt: new Date().toISOString(),
          updatedAt: new Date().toISOString(),
        }))!;
        stats.lost++;
        this.d.log('sandbox lost: its runtime state is gone', { id: row.id });
        return;
      }
      if ((row.status === 'running' || row.status === 'paused') && actual === 'stopped') {
        await this.bootAgain(row);
        if (row.status === 'paused') await this.d.runtime.pause(row.id);
        stats.rebooted++;
      } else if (row.status === 'running' && actual === 'paused') {
        await this.d.runtime.resume(row.id);
      } else if (row.status === 'paused' && actual === 'running') {
        await this.d.runtime.pause(row.id);
      } else if (row.status === 'stopped' && actual !== 'stopped') {
        await this.d.runtime.stop(row.id);
      }
      liveIds.add(row.id);
      this.route(current);
      const port = await this.d.gateway.open(row.id, row.gatewayPort);
      if (port !== row.gatewayPort) {
        current = (await this.d.store.sandboxes.update(row.id, row.version, { gatewayPort: port })) ?? current;
        this.route(current);
      }
      stats.restored++;
    } catch (err) {
      this.d.log('reconciling a sandbox failed', { id: row.id, error: err instanceof Error ? err.message : String(err) });
      liveIds.add(row.id);
      // A sandbox that cannot be brought back (its agent never answers, say) is stopped, so that
      // what the API says is true and no start of the daemon trips over it again.
      if (current.status === 'running' || current.status === 'paused') await this.markStopped(current, 'could not be restarted after the service restarted');
    }
  }

  /**
   * The preview URL of a port of the sandbox, made on first ask (port mode: a gateway port of its
   * own, kept across restarts) and changed to public or private with `setPublic`. A private one
   * comes with a signed link that opens it in a browser; `mayWake`: that link's holder may wake it.
   */
  async preview(orgId: string, id: string, port: number, opts: { setPublic?: boolean; mayWake: boolean; linkTtlSeconds?: number }): Promise<PreviewInfo> {
    const gateway = this.d.gateway;
    if (!gateway.openPreview || !gateway.previewUrl) throw new ServiceError('RUNTIME_ERROR', 'this service does not serve preview URLs');
    await this.get(orgId, id);
    return this.d.locks.run(id, async () => {
      // What is true under the lock: a delete may have come first.
      const row = await this.get(orgId, id);
      const existing = await this.d.store.previews.get(row.id, port);
      if (!existing && (await this.d.store.previews.forSandbox(row.id)).length >= MAX_PREVIEWS_PER_SANDBOX) {
        throw new ServiceError('LIMIT_EXCEEDED', `a sandbox has at most ${MAX_PREVIEWS_PER_SANDBOX} preview ports`, { id: row.id });
      }
      // Each takes a gateway port (port mode): no organization may take the range from the others.
      const orgMax = this.d.maxPreviewsPerOrg;
      if (!existing && orgMax !== undefined) {
        const used = await this.d.store.previews.countForOrg(row.orgId);
        if (used >= orgMax) {
          throw new ServiceError(
            'ORG_QUOTA_EXCEEDED',
            `the organization's sandboxes hold ${used} preview ports: the limit is ${orgMax} (SANDBOXD_MAX_PREVIEWS_PER_ORG); they go with their sandboxes`,
            { id: row.id, limit: 'previews', max: orgMax, used },
          );
        }
      }
      const isPublic = opts.setPublic ?? existing?.public ?? false;
      const gw = await gateway.openPreview!(row.id, port, isPublic, existing?.gatewayPort ?? null);
      if (!existing || existing.public !== isPublic || existing.gatewayPort !== gw) {
        await this.d.store.previews.upsert({ sandboxId: row.id, port, public: isPublic, gatewayPort: gw, createdAt: existing?.createdAt ?? new Date().toISOString() });
        // The other replicas' gateways read its previews again with its route; so does this one's
        // (a read of the store begun before the upsert would otherwise apply the old state after it).
        if (this.d.cluster) this.d.routes.forget(row.id);
        this.d.cluster?.changed(row.id);
      }
      const url = gateway.previewUrl!(row.id, port, gw);
      const info: PreviewInfo = { port, url, public: isPublic };
      if (!isPublic) {
        const link = await this.d.tokens.issuePreview('link', row.id, port, opts.mayWake, opts.linkTtlSeconds ?? PREVIEW_LINK_SECONDS);
        info.signed_url = `${url}/_sandboxd/auth?token=${link.token}`;
        info.signed_url_expires_at = link.expiresAt.toISOString();
      }
      return info;
    });
  }
}
