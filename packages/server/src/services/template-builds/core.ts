import type { DiskClaim } from '../disk-room.js';
import { EventEmitter } from 'node:events';
import { ServiceError } from '@sandboxd/protocol';
import type { BuildEngine } from '../../builder/types.js';
import type { BuildRow, Coordination, Store } from '../../store/types/index.js';
import type { BuildLogStorage } from '../build-logs.js';
import type { Metrics } from '../metrics.js';
import type { QuotaService } from '../quotas.js';
import type { UploadService } from '../uploads.js';

export interface BuildLimits {
  perHour: number;
  perDay: number;
}

/** Replicas: a running build's row says so this often... */
export const BUILD_HEARTBEAT_MS = 15_000;
/** ...and a build whose row has not for this long was abandoned (clocks of replicas may differ by part of it). */
export const BUILD_ABANDONED_MS = 90_000;
/** The channel on which replicas say that a build's log grew or the build ended (the payload: its id). */
const LOG_CHANNEL = 'build_log';

export interface TemplateBuildDeps {
  store: Store;
  uploads: UploadService;
  engine: BuildEngine;
  limits: BuildLimits;
  log: (msg: string, extra?: Record<string, unknown>) => void;
  quotas: QuotaService;
  /** Counts builds by result, with their duration (absent: none kept). */
  metrics?: Metrics;
  /** Where logs are kept: files (one machine) or the store (replicas). */
  logs: BuildLogStorage;
  /** Replicas: how a log written on one wakes the followers of another (absent: one process). */
  coordination?: Coordination;
  /**
   * Room for a build's writes (services/disk-room.ts; absent: not checked): `claimDisk` its steps'
   * disk (diskGB), held from the start to the end of the build; `claimStepLayer` the layer each step
   * that runs copies from it (diskGB more per step), before the step runs.
   */
  claimDisk?: DiskClaim;
  claimStepLayer?: DiskClaim;
}

/**
 * What every job of the build service shares: its dependencies, the news of a build's log and end
 * (to this process's followers and other replicas'), the recording of its end, and the reading of
 * a build the caller may see.
 */
export class BuildCore {
  /** Emits a build's id when its log grew or it ended, and `<id>:done` with its status when it ended. */
  readonly live = new EventEmitter();
  private readonly stopHearing: () => void;

  constructor(readonly d: TemplateBuildDeps) {
    this.live.setMaxListeners(0);
    // Another replica's build: its writes and its end wake this replica's followers at once (they
    // also look every second, which covers a message lost while PostgreSQL was away).
    this.stopHearing = d.coordination?.subscribe(LOG_CHANNEL, (buildId) => this.live.emit(buildId)) ?? (() => undefined);
  }

  /** Stops hearing other replicas. */
  close(): void {
    this.stopHearing();
  }

  /** Tells this process's followers, and other replicas', that the build's log grew or it ended. */
  announce(buildId: string): void {
    this.live.emit(buildId);
    this.d.coordination?.publish(LOG_CHANNEL, buildId).catch(() => undefined);
  }

  async finish(build: BuildRow, status: 'active' | 'failed', error: string | null): Promise<void> {
    const completedAt = new Date();
    await this.d.store.builds.update(build.id, { status, progress: status === 'active' ? 100 : build.progress, errorMessage: error, completedAt: completedAt.toISOString() });
    const result = status === 'active' ? 'succeeded' : 'failed';
    this.d.metrics?.builds.inc({ result });
    this.d.metrics?.buildDuration.observe({ result }, Math.max(0, completedAt.getTime() - Date.parse(build.startedAt ?? build.createdAt)) / 1000);
    this.live.emit(`${build.id}:done`, status);
    this.announce(build.id);
  }

  /** By build id, or by template id (its latest build). Another organization's → 403. */
  async get(orgId: string, id: string): Promise<BuildRow> {
    const b = (await this.d.store.builds.byId(id)) ?? (await this.d.store.builds.latestForTemplate(id));
    if (!b) throw new ServiceError('BUILD_NOT_FOUND', `no build with id ${id}`);
    if (b.orgId !== orgId) throw new ServiceError('PERMISSION_DENIED');
    return b;
  }

  /** The organization's builds against the rate limit, and how many run now. */
  async usage(orgId: string) {
    const now = Date.now();
    const { store, limits } = this.d;
    return {
      per_hour: { used: await store.builds.countSince(orgId, new Date(now - 3600_000).toISOString()), limit: limits.perHour },
      per_day: { used: await store.builds.countSince(orgId, new Date(now - 86_400_000).toISOString()), limit: limits.perDay },
      running: (await store.builds.running(orgId)).length,
    };
  }

  renderStatus(b: BuildRow): Record<string, unknown> {
    const done = b.completedAt ? Date.parse(b.completedAt) : Date.now();
    return {
      build_id: b.id,
      template_id: b.templateId,
      status: b.status,
      progress: b.status === 'active' ? 100 : b.progress,
      current_step: b.currentStep,
      started_at: b.startedAt,
      completed_at: b.completedAt,
      error_message: b.errorMessage,
      build_duration_ms: b.startedAt ? done - Date.parse(b.startedAt) : null,
    };
  }
}
