import type { Store } from '../store/types.js';
import { KeyedMutex, type Mutex } from './locks.js';
import { quotaError, resolveLimits, type Demand, type OrgLimits, type OrgUsage } from './limits.js';

/**
 * Per-organization limits (configured defaults + the organization's overrides, read at every
 * use so that `sandboxd orgs limits` applies at once) and the admission of anything that holds
 * resources against them.
 */
export class QuotaService {
  constructor(
    private readonly store: Store,
    readonly defaults: OrgLimits,
    // Admission is one step per organization: check the usage, then make the new holder visible in
    // the store, both under the organization's lock (keyed by organization id, apart from the
    // services' per-sandbox locks). In this process on one machine; across a cluster's replicas,
    // a ReplicaMutex. Held for the check and the insert only, never across a boot.
    private readonly locks: Mutex = new KeyedMutex(),
  ) {}

  async limitsFor(orgId: string): Promise<OrgLimits> {
    return resolveLimits(this.defaults, await this.store.orgs.limits(orgId));
  }

  async usage(orgId: string): Promise<OrgUsage> {
    // Two reads at once: on PostgreSQL each is a round trip, and every create waits for them.
    const [s, builds] = await Promise.all([this.store.sandboxes.usage(orgId), this.store.builds.running(orgId)]);
    let memoryMb = s.activeMemoryMb;
    let diskGb = s.diskGb;
    for (const b of builds) {
      const req = b.request as { memoryMb?: unknown; diskGb?: unknown } | null;
      memoryMb += typeof req?.memoryMb === 'number' ? req.memoryMb : 0;
      diskGb += typeof req?.diskGb === 'number' ? req.diskGb : 0;
    }
    return { sandboxes: s.active, stoppedSandboxes: s.stopped, memoryMb, diskGb, builds: builds.length };
  }

  /**
   * Runs `claim` only if `demand` fits the organization's quotas, under the organization's lock.
   * `claim` must make the demand visible to `usage` before it returns (insert the sandbox row in
   * state creating, the build row, or move a row to running), so N concurrent creates against a
   * quota of M < N admit exactly M. Past a quota: 409 ORG_QUOTA_EXCEEDED naming the limit.
   */
  async admit<T>(orgId: string, demand: Demand, claim: () => Promise<T>): Promise<T> {
    return this.locks.run(orgId, async () => {
      const [limits, usage] = await Promise.all([this.limitsFor(orgId), this.usage(orgId)]);
      const err = quotaError(limits, usage, demand);
      if (err) throw err;
      return claim();
    });
  }

  /**
   * Runs `change` with the organization's admissions held, for a holder that changes its rows
   * without changing what it holds (a create's row taking its sandbox's id: for a moment both rows
   * exist, and no admission may count them twice).
   */
  async hold<T>(orgId: string, change: () => Promise<T>): Promise<T> {
    return this.locks.run(orgId, change);
  }
}
