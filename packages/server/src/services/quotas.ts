import type { Store } from '../store/types/index.js';
import { KeyedMutex, type Mutex } from './locks.js';
import type { RateLimiter, RateWindow } from './rate-limit.js';
import { quotaError, resolveLimits, type Demand, type OrgLimits, type OrgUsage } from './limits.js';

/** Admissions checked in one turn of the lock at most (their claims run at once, on the store's pool). */
const MAX_BATCH = 256;

/** How long the last batch's reading of an organization serves likelyAdmits. */
const READING_FRESH_MS = 2000;

/** What an organization's last batch left: its limits, its usage with the batch's admissions, its rate room. */
interface Reading {
  at: number;
  limits: OrgLimits;
  usage: OrgUsage;
  rateLeft: number;
  /** When the rate room was read (a batch without creates reads no window). */
  rateAt: number;
}

/** Past this many organizations' readings, the stale ones are let go. */
const READINGS_KEPT = 4096;

/** An admission waiting for its organization's next batch. */
interface Admission {
  demand: Demand;
  /** The rate limit the admission takes a slot of once its quota admits it (a create's). */
  rate?: RateLimiter;
  claim: () => Promise<unknown>;
  resolve: (v: unknown) => void;
  reject: (err: unknown) => void;
}

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
    private readonly log: (msg: string, fields?: Record<string, unknown>) => void = () => undefined,
    /** What the organization stores beside its sandboxes' disks (services/org-storage.ts; absent: nothing counted). */
    private readonly stored?: (orgId: string, fresh: boolean) => Promise<number>,
  ) {}

  async limitsFor(orgId: string): Promise<OrgLimits> {
    return resolveLimits(this.defaults, await this.store.orgs.limits(orgId));
  }

  /** `fresh`: what the organization stores read now (else a reading of the last second will do). */
  async usage(orgId: string, fresh = false): Promise<OrgUsage> {
    // Two reads at once: on PostgreSQL each is a round trip, and every create waits for them.
    const [s, builds, storedBytes] = await Promise.all([this.store.sandboxes.usage(orgId), this.store.builds.running(orgId), this.stored?.(orgId, fresh)]);
    let memoryMb = s.activeMemoryMb;
    let diskGb = s.diskGb;
    for (const b of builds) {
      const req = b.request as { memoryMb?: unknown; diskGb?: unknown } | null;
      memoryMb += typeof req?.memoryMb === 'number' ? req.memoryMb : 0;
      diskGb += typeof req?.diskGb === 'number' ? req.diskGb : 0;
    }
    return { sandboxes: s.active, stoppedSandboxes: s.stopped, memoryMb, diskGb, builds: builds.length, ...(storedBytes !== undefined ? { storedBytes } : {}) };
  }

  /**
   * Runs `claim` only if `demand` fits the organization's quotas, under the organization's lock.
   * `claim` must make the demand visible to `usage` before it returns (insert the sandbox row in
   * state creating, the build row, or move a row to running), so N concurrent creates against a
   * quota of M < N admit exactly M. Past a quota: 409 ORG_QUOTA_EXCEEDED naming the limit.
   *
   * Admissions of one organization are taken in batches: every admission waiting when the lock is
   * got is checked against one reading of the usage, to which each admitted demand is added in
   * turn, and their claims run together before the lock is given back. A burst of creates then
   * takes the lock (a few round trips to PostgreSQL on a cluster) a few times, not once each. A
   * claim that fails leaves its demand counted for the rest of its batch: one may be refused that
   * would have fit, none is admitted that does not.
   */
  admit<T>(orgId: string, demand: Demand, claim: () => Promise<T>, opts: { rate?: RateLimiter } = {}): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const waiting = this.waiting.get(orgId);
      const entry: Admission = { demand, claim, resolve: resolve as (v: unknown) => void, reject, ...(opts.rate ? { rate: opts.rate } : {}) };
      if (waiting) {
        waiting.push(entry);
        return;
      }
      this.waiting.set(orgId, [entry]);
      void this.admitWaiting(orgId);
    });
  }

  private readonly waiting = new Map<string, Admission[]>();
  private readonly readings = new Map<string, Reading>();
  /** The admissions of the batch each organization has under way (taken from waiting, not yet in a reading). */
  private readonly inBatch = new Map<string, number>();

  /**
   * Whether an admission of `demand` is all but sure to pass: the organization's last batch, read
   * within the last 2 s, left room for it twice over beside those waiting (quotas and creation
   * rate both). A hint only, never a decision: a caller may begin slow work the admission would
   * allow (a cluster's create asks its node) while it is being admitted, and undoes it when it is
   * refused; near a limit, or with no recent reading, the caller waits for the admission first.
   */
  likelyAdmits(orgId: string, demand: Demand): boolean {
    const seen = this.readings.get(orgId);
    const now = Date.now();
    if (!seen || now - seen.at > READING_FRESH_MS || now - seen.rateAt > READING_FRESH_MS) return false;
    const k = 2 + (this.waiting.get(orgId)?.length ?? 0) + (this.inBatch.get(orgId) ?? 0);
    if (seen.rateLeft < k) return false;
    return quotaError(seen.limits, seen.usage, { sandboxes: k * demand.sandboxes, memoryMb: k * demand.memoryMb, diskGb: k * demand.diskGb }) === undefined;
  }

  /** Batches of the organization's waiting admissions, one per turn of its lock, until none waits. */
  private async admitWaiting(orgId: string): Promise<void> {
    for (;;) {
      let batch: Admission[] = [];
      try {
        await this.locks.run(orgId, async () => {
          // Those that came while the lock was being got are in this batch too.
          const waiting = this.waiting.get(orgId) ?? [];
          batch = waiting.splice(0, MAX_BATCH);
          if (batch.length === 0) return;
          this.inBatch.set(orgId, batch.length);
          // A batch's rate-limited admissions share one limiter (the organization's creates): its
          // window is read with the usage, and its slots recorded with the claims.
          const rate = batch.find((a) => a.rate)?.rate;
          const [limits, usage, window] = await Promise.all([this.limitsFor(orgId), this.usage(orgId), rate?.window?.(orgId)]);
          const claims: Array<Promise<void>> = [];
          for (const a of batch) {
            let err: unknown = quotaError(limits, usage, a.demand);
            if (!err && a.rate) {
              if (window && a.rate === rate) err = window.take();
              else
                await Promise.resolve(a.rate.take(orgId)).catch((e: unknown) => {
                  err = e;
                });
            }
            if (err) {
              a.reject(err);
              continue;
            }
            usage.sandboxes += a.demand.sandboxes;
            usage.memoryMb += a.demand.memoryMb;
            usage.diskGb += a.demand.diskGb;
            usage.storedBytes = (usage.storedBytes ?? 0) + (a.demand.storedBytes ?? 0);
            claims.push(
              (async () => a.claim())().then(
                (v) => a.resolve(v),
                (e: unknown) => a.reject(e),
              ),
            );
          }
          // The lock is held until every claim is in (a failed record of the slots costs the limit
          // those slots, not the creates).
          const [recorded] = await Promise.allSettled([window?.commit(), ...claims]);
          if (recorded.status === 'rejected') {
            this.log('the creation rate limit could not record the slots its admissions took (they count for nothing against it)', { org: orgId, error: String(recorded.reason) });
          }
          this.keepReading(orgId, limits, usage, window);
        });
        this.inBatch.delete(orgId);
      } catch (err) {
        this.inBatch.delete(orgId);
        // The lock or the usage could not be had (a store away): the batch fails with it, and so
        // do those that waited for the lock with it (not yet taken into a batch).
        if (batch.length === 0) {
          batch = this.waiting.get(orgId) ?? [];
          this.waiting.set(orgId, []);
        }
        for (const a of batch) a.reject(err);
      }
      if ((this.waiting.get(orgId)?.length ?? 0) === 0) {
        this.waiting.delete(orgId);
        return;
      }
    }
  }

  private keepReading(orgId: string, limits: OrgLimits, usage: OrgUsage, window: RateWindow | undefined): void {
    const now = Date.now();
    const before = this.readings.get(orgId);
    if (!before && this.readings.size >= READINGS_KEPT) {
      for (const [k, r] of this.readings) if (now - r.at > READING_FRESH_MS) this.readings.delete(k);
    }
    this.readings.set(orgId, {
      at: now,
      limits,
      usage,
      // A batch of no creates reads no window: the room read before stays as old as it was.
      rateLeft: window ? window.remaining() : (before?.rateLeft ?? 0),
      rateAt: window ? now : (before?.rateAt ?? 0),
    });
  }

  /**
   * 409 ORG_QUOTA_EXCEEDED (max_total_disk_gb) when storing `bytes` more would take the organization
   * past it. Call within hold() to make the check and the insert one step (a snapshot's).
   */
  async checkStored(orgId: string, bytes: number): Promise<void> {
    const [limits, usage] = await Promise.all([this.limitsFor(orgId), this.usage(orgId, true)]);
    const err = quotaError(limits, usage, { sandboxes: 0, memoryMb: 0, diskGb: 0, storedBytes: bytes });
    if (err) throw err;
  }

  /**
   * Runs `change` with the organization's admissions held: a check and an insert that must be one
   * step against everything admitted (a snapshot's storage, its size known only once copied).
   */
  async hold<T>(orgId: string, change: () => Promise<T>): Promise<T> {
    return this.locks.run(orgId, change);
  }
}
