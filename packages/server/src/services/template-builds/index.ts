import type { BuildRow, TemplateRow } from '../../store/types/index.js';
import { BuildCore, type TemplateBuildDeps } from './core.js';
import { BuildLogs } from './logs.js';
import { Runs } from './run.js';
import { Starts } from './start.js';

export { BUILD_ABANDONED_MS, BUILD_HEARTBEAT_MS, type BuildLimits, type TemplateBuildDeps } from './core.js';
export { BuildLogWriter, levelOf, MAX_BUILD_LOG_BYTES } from './logs.js';

/**
 * Custom template builds: validation, the per-organization build rate limit (counted from the
 * builds table, so it survives restarts), background execution with its log kept as it is written
 * (offset polling and SSE read it there; in the store, on any replica), and the template row's status.
 *
 * One face over the jobs, each in a file of its own (starts, runs, logs), which share the core (core.ts).
 */
export class TemplateBuildService {
  private readonly core: BuildCore;
  private readonly logs: BuildLogs;
  private readonly runs: Runs;
  private readonly starts: Starts;

  constructor(deps: TemplateBuildDeps) {
    this.core = new BuildCore(deps);
    this.logs = new BuildLogs(this.core);
    this.runs = new Runs(this.core, this.logs);
    this.starts = new Starts(this.core, this.runs);
  }

  /** Stops hearing other replicas. */
  close(): void {
    this.core.close();
  }

  // ---- starts and runs -------------------------------------------------------------------------

  start(orgId: string, body: unknown): Promise<{ build: BuildRow; template: TemplateRow }> {
    return this.starts.start(orgId, body);
  }
  failInterrupted(now = Date.now()): Promise<number> {
    return this.runs.failInterrupted(now);
  }
  deleteTemplate(orgId: string, template: TemplateRow): Promise<void> {
    return this.runs.deleteTemplate(orgId, template);
  }

  // ---- what a build is -------------------------------------------------------------------------

  get(orgId: string, id: string): Promise<BuildRow> {
    return this.core.get(orgId, id);
  }
  usage(orgId: string) {
    return this.core.usage(orgId);
  }
  renderStatus(b: BuildRow): Record<string, unknown> {
    return this.core.renderStatus(b);
  }

  // ---- its log ---------------------------------------------------------------------------------

  logsSince(b: BuildRow, offset: number, maxBytes?: number): Promise<{ logs: string; offset: number; atEnd: boolean }> {
    return this.logs.logsSince(b, offset, maxBytes);
  }
  onData(buildId: string, fn: () => void): () => void {
    return this.logs.onData(buildId, fn);
  }
  onDone(buildId: string, fn: (status: string) => void): () => void {
    return this.logs.onDone(buildId, fn);
  }
}
