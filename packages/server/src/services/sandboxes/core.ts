import type { DiskClaim } from '../disk-room.js';
import { renderSandboxVolumes, type VolumeService } from '../volumes.js';
import { ServiceError, type NetworkPolicy, type Sandbox, type SandboxEventKind } from '@sandboxd/protocol';
import type { Placement } from '../../placement/placement.js';
import type { SandboxSpec } from '../../runtime/types.js';
import type { SandboxRow, Store } from '../../store/types/index.js';
import type { EventBus } from '../events.js';
import type { Mutex } from '../locks.js';
import type { Metrics } from '../metrics.js';
import type { QuotaService } from '../quotas.js';
import type { RateLimiter } from '../rate-limit.js';
import type { RouteEntry, Routes } from '../routes.js';
import type { SnapshotService } from '../snapshots/index.js';
import type { TemplateService } from '../templates.js';
import type { TokenService } from '../tokens.js';
import { specFor } from './spec.js';
import { publicOrgId } from '../org-ids.js';

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

/**
 * The other processes that share this one's store (replicas of control, and edges). Alone, there
 * are none (`shared` false) and what is told goes nowhere. Shared, what one of them does not know
 * may be another's work under way: reconcile leaves it alone (the nodes collect leftovers no row
 * claims, node/orphans.ts), and uses, interrupts and route changes are told to the others.
 */
export interface Replicas {
  readonly shared: boolean;
  used(id: string): void;
  interrupted(id: string): void;
  changed(id: string): void;
}

/** One process alone with its store. */
export const ALONE: Replicas = { shared: false, used: () => undefined, interrupted: () => undefined, changed: () => undefined };

export interface SandboxServiceDeps {
  store: Store;
  /** The nodes that run the sandboxes: this machine's, or a cluster's. */
  placement: Placement;
  tokens: TokenService;
  templates: TemplateService;
  layerPath: (layerId: string) => string;
  gateway: GatewayControl;
  /** The gateway's routes (gateway/routes.ts). */
  routes: Routes;
  events: EventBus;
  locks: Mutex;
  createLimiter: RateLimiter;
  /** Per-organization limits: checked at create, start and timeout changes. */
  quotas: QuotaService;
  agentReadyTimeoutMs: number;
  tombstoneSeconds: number;
  /** How long a sandbox paused by its deadline (on_timeout "pause") is kept before it is deleted. */
  pausedRetentionSeconds?: number;
  /** Preview ports one organization may hold (absent: no cap beyond the per-sandbox one). */
  maxPreviewsPerOrg?: number;
  log: (msg: string, extra?: Record<string, unknown>) => void;
  /** Counts creates by template and source, with their latency (absent: none kept). */
  metrics?: Metrics;
  /** Snapshots (absent: creates from a snapshot, forks and restores are refused). */
  snapshots?: SnapshotService;
  /** The processes that share the store (absent: none). */
  replicas?: Replicas;
  /**
   * Room on the filesystem of this machine's sandbox disks (services/disk-room.ts): a create holds
   * its disk_gb, a start needs the filesystem within its reserve (absent: not checked; a cluster's
   * control, whose sandboxes' disks are on the nodes).
   */
  claimDisk?: DiskClaim;
  /** Volumes (issue 32): the mounts a create asks for, checked (absent: a create naming any is refused). */
  volumes?: Pick<VolumeService, 'resolve'>;
}

/** How the gateway reaches a live sandbox of the store: through the node its row names. */
export function routeOf(row: SandboxRow, placement: Pick<Placement, 'node' | 'nodeUp'>): RouteEntry {
  return {
    nodeId: row.nodeId,
    reachable: () => {
      if (!placement.nodeUp(row.nodeId)) throw new ServiceError('NODE_UNAVAILABLE', `sandbox ${row.id} is on a node that is not answering; it is served again when the node is back`, { id: row.id, retry_after: 10 });
    },
    sandboxId: row.id,
    orgId: row.orgId,
    status: row.status as RouteEntry['status'],
    dial: (timeoutMs) => placement.node(row.nodeId).dialAgent(row.id, timeoutMs),
    port: row.gatewayPort,
    autoResume: row.autoResume,
    tracksIdle: row.idleTimeoutSeconds !== null,
  };
}

/**
 * What every job of the sandbox service shares: its dependencies, the reading of a row the caller
 * may see, the state change under the sandbox's lock, the route and the event that follow a
 * change, and the latest use of each sandbox with an idle timeout.
 */
export class SandboxCore {
  readonly replicas: Replicas;
  /**
   * The latest use of each sandbox with an idle timeout (ms since the epoch): a call through the
   * gateway or to its lifecycle. Kept here, not written per call; the stored idle check time is
   * moved only when it comes due (sweep).
   */
  readonly activity = new Map<string, number>();

  constructor(readonly d: SandboxServiceDeps) {
    this.replicas = d.replicas ?? ALONE;
  }

  /** The node a sandbox's row names. */
  node(row: Pick<SandboxRow, 'nodeId'>): ReturnType<Placement['node']> {
    return this.d.placement.node(row.nodeId);
  }

  spec(row: SandboxRow): SandboxSpec {
    return specFor(row.id, row, (l) => this.d.layerPath(l));
  }

  /** The sandbox as the API shows it; `node`: with the node that holds it (for the operator's keys only). */
  render(row: SandboxRow, opts: { node?: boolean } = {}): Sandbox {
    const publicHost = this.d.gateway.publicHost(row.id, row.gatewayPort);
    return {
      object: 'sandbox',
      id: row.id,
      organization_id: publicOrgId(row.orgId),
      status: row.status === 'creating' ? 'running' : row.status,
      public_host: publicHost,
      direct_url: publicHost,
      template_name: row.templateName,
      template_id: row.templateId,
      region: row.region,
      internet_access: row.internetAccess && (row.egress?.internet ?? true),
      network: this.network(row),
      metadata: row.metadata ?? {},
      ...(row.volumes?.length ? { volumes: renderSandboxVolumes(row) } : {}),
      timeout_seconds: row.timeoutSeconds,
      expires_at: row.expiresAt,
      on_timeout: row.onTimeout,
      idle_timeout_seconds: row.idleTimeoutSeconds,
      auto_resume: row.autoResume,
      created_at: row.createdAt,
      updated_at: row.updatedAt,
      resources: { vcpu: row.vcpu, memory_mb: row.memoryMb, disk_gb: row.diskGb, disk_mb: row.diskGb * 1024 },
      available: this.d.placement.nodeUp(row.nodeId),
      ...(opts.node ? { node: row.nodeId } : {}),
    };
  }

  network(row: SandboxRow): NetworkPolicy {
    return { internet_access: row.internetAccess && (row.egress?.internet ?? true), allow_out: row.egress?.allow ?? [], deny_out: row.egress?.deny ?? [] };
  }

  event(kind: SandboxEventKind, row: SandboxRow, reason?: string): void {
    this.d.events.publish({
      kind,
      orgId: row.orgId,
      data: { id: row.id, status: row.status, at: new Date().toISOString(), ...(reason ? { reason } : {}) },
    });
  }

  route(row: SandboxRow): void {
    if (row.status === 'deleted') {
      this.d.routes.delete(row.id);
      return;
    }
    this.d.routes.set(routeOf(row, this.d.placement));
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

  /**
   * Runs a state change under the sandbox's lock, from the states in `from`, with a CAS on the row.
   * `admit`, when given, wraps the work and the update (a quota admission around both).
   */
  async transition(
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
   * Whether a verb works on the sandbox now (in a cluster, in any replica): the sweep passes over
   * it. One that starts just after is waited for, and changes nothing the sweep then undoes: every
   * verb reads the row again under the lock.
   */
  async working(id: string): Promise<boolean> {
    return this.d.locks.held ? this.d.locks.held(id) : this.d.locks.busy(id);
  }

  /** A paused sandbox that sleeps on its deadline is kept this long, then deleted. */
  retentionDeadline(row: SandboxRow, from: number): string | null {
    if (row.onTimeout !== 'pause') return row.expiresAt;
    return new Date(from + (this.d.pausedRetentionSeconds ?? 7 * 86_400) * 1000).toISOString();
  }
}
