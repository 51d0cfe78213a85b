import type { CreateSandboxBody, ForkBody, NetworkPolicy, Sandbox, SandboxMetrics, SetNetworkBody } from '@sandboxd/protocol';
import type { SandboxSpec } from '../../runtime/types.js';
import type { SandboxRow } from '../../store/types/index.js';
import { SandboxCore, type SandboxServiceDeps } from './core.js';
import { Creates, type Created, type CreateOpts } from './create.js';
import { Evacuations, type DrainOptions, type DrainReport } from './evacuate.js';
import { Forks } from './fork.js';
import { Lifecycle } from './lifecycle.js';
import { Network, type PreviewInfo } from './network.js';
import { Reads } from './reads.js';
import { Reconcile } from './reconcile.js';
import { Upkeep } from './upkeep.js';

export { ALONE, routeOf, type GatewayControl, type Replicas, type SandboxServiceDeps } from './core.js';
export { MAX_PORTS_LISTED, MAX_PREVIEWS_PER_SANDBOX, type ListedPort, type PreviewInfo } from './network.js';
export { AGENT_MALLOC_TUNABLES, egressFrom } from './spec.js';
export { ABANDONED_CREATE_MS } from './upkeep.js';
export { DRAIN_BUDGET_MS, type DrainOptions, type DrainReport } from './evacuate.js';

/**
 * The sandboxes' rules, for the HTTP layer, the gateway and the other services: one face over the
 * jobs, each in a file of its own (creates and forks, lifecycle verbs, reconcile and sweep,
 * network and previews, reads, the moves of a drain), which share the core (core.ts). None knows HTTP or runs a tool:
 * the nodes do (placement/, node/).
 */
export class SandboxService {
  private readonly core: SandboxCore;
  private readonly creates: Creates;
  private readonly forks: Forks;
  private readonly lifecycle: Lifecycle;
  private readonly upkeep: Upkeep;
  private readonly reconciles: Reconcile;
  private readonly net: Network;
  private readonly reads: Reads;
  private readonly evacuations: Evacuations;

  constructor(d: SandboxServiceDeps) {
    this.core = new SandboxCore(d);
    this.lifecycle = new Lifecycle(this.core);
    this.creates = new Creates(this.core);
    this.forks = new Forks(this.core, this.creates, this.lifecycle);
    this.upkeep = new Upkeep(this.core, this.lifecycle);
    this.reconciles = new Reconcile(this.core, this.lifecycle);
    this.net = new Network(this.core);
    this.reads = new Reads(this.core);
    this.evacuations = new Evacuations(this.core, this.lifecycle);
  }

  // ---- what a sandbox is -----------------------------------------------------------------------

  get(orgId: string, id: string, opts: { allowDeleted?: boolean } = {}): Promise<SandboxRow> {
    return this.core.get(orgId, id, opts);
  }
  render(row: SandboxRow, opts: { node?: boolean } = {}): Sandbox {
    return this.core.render(row, opts);
  }
  network(row: SandboxRow): NetworkPolicy {
    return this.core.network(row);
  }
  spec(row: SandboxRow): SandboxSpec {
    return this.core.spec(row);
  }
  list(orgId: string, q: { limit?: number; status?: string; template?: string; region?: string; cursor?: string }, opts: { node?: boolean } = {}) {
    return this.reads.list(orgId, q, opts);
  }
  metrics(orgId: string, id: string): Promise<SandboxMetrics> {
    return this.reads.metrics(orgId, id);
  }

  // ---- creates ---------------------------------------------------------------------------------

  create(orgId: string, body: CreateSandboxBody, opts: CreateOpts = {}): Promise<Created> {
    return this.creates.create(orgId, body, opts);
  }
  fork(orgId: string, id: string, body: ForkBody, opts: CreateOpts = {}): Promise<Created[]> {
    return this.forks.fork(orgId, id, body, opts);
  }

  // ---- lifecycle verbs -------------------------------------------------------------------------

  pause(orgId: string, id: string, reason: 'api' | 'idle' | 'timeout' = 'api'): Promise<SandboxRow> {
    return this.lifecycle.pause(orgId, id, reason);
  }
  resume(orgId: string, id: string, reason: 'api' | 'traffic' = 'api'): Promise<SandboxRow> {
    return this.lifecycle.resume(orgId, id, reason);
  }
  stop(orgId: string, id: string): Promise<SandboxRow> {
    return this.lifecycle.stop(orgId, id);
  }
  start(orgId: string, id: string): Promise<SandboxRow> {
    return this.lifecycle.start(orgId, id);
  }
  delete(orgId: string, id: string, reason = 'deleted'): Promise<SandboxRow> {
    return this.lifecycle.delete(orgId, id, reason);
  }
  restore(orgId: string, id: string, snapshotId: string): Promise<SandboxRow> {
    return this.lifecycle.restore(orgId, id, snapshotId);
  }
  setTimeout(orgId: string, id: string, timeoutSeconds: number): Promise<SandboxRow> {
    return this.lifecycle.setTimeout(orgId, id, timeoutSeconds);
  }
  refreshToken(orgId: string, id: string, keyId?: string) {
    return this.lifecycle.refreshToken(orgId, id, keyId);
  }
  /** The token kept for E2B's clients (lifecycle.ts keptToken). */
  keptToken(orgId: string, id: string, keyId: string | undefined, renewWithinMs: number): Promise<string> {
    return this.lifecycle.keptToken(orgId, id, keyId, renewWithinMs);
  }
  wake(id: string): Promise<void> {
    return this.lifecycle.wake(id);
  }
  touch(id: string): void {
    this.lifecycle.touch(id);
  }
  usedElsewhere(id: string, at: number): void {
    this.lifecycle.usedElsewhere(id, at);
  }
  /** Waits until every teardown that has begun has ended (shutdown, tests). */
  settle(): Promise<void> {
    return this.lifecycle.settle();
  }

  // ---- network and previews --------------------------------------------------------------------

  setNetwork(orgId: string, id: string, body: SetNetworkBody): Promise<NetworkPolicy> {
    return this.net.setNetwork(orgId, id, body);
  }
  preview(orgId: string, id: string, port: number, opts: { setPublic?: boolean; mayWake: boolean; readOnly?: boolean; keyId?: string; linkTtlSeconds?: number }): Promise<PreviewInfo> {
    return this.net.preview(orgId, id, port, opts);
  }
  ports(orgId: string, id: string) {
    return this.net.ports(orgId, id);
  }
  portsJson(orgId: string, id: string) {
    return this.net.portsJson(orgId, id);
  }

  // ---- upkeep ----------------------------------------------------------------------------------

  /** After a (re)start: the nodes made to match the store (reconcile.ts). */
  reconcile() {
    return this.reconciles.run();
  }
  sweep(): Promise<number> {
    return this.upkeep.sweep();
  }
  agentGone(id: string): void {
    this.upkeep.agentGone(id);
  }
  watchOom(): () => void {
    return this.upkeep.watchOom();
  }

  // ---- the nodes under them --------------------------------------------------------------------

  /** A node drained: it takes nothing new, its stopped and paused sandboxes move to others (evacuate.ts). */
  drain(nodeId: string, opts: DrainOptions = {}): Promise<DrainReport> {
    return this.evacuations.drain(nodeId, opts);
  }
}
