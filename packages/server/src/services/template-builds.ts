import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { ServiceError } from '@sandboxd/protocol';
import type { BuildRow, Coordination, Store, TemplateRow } from '../store/types.js';
import { BUILD_DEFAULTS, normalizeBuildRequest, type BuildRequest } from './template-requests.js';
import type { UploadService } from './uploads.js';
import type { BuildLogStorage } from './build-logs.js';
import type { Metrics } from './metrics.js';
import type { QuotaService } from './quotas.js';
import { checkSize, type OrgLimits } from './limits.js';

import type { BuildEngine, CopyInput } from '../builder/types.js';

export interface BuildLimits {
  perHour: number;
  perDay: number;
}

/** At most this much of a build's output is kept (its stored log, and lines waiting to be written). */
export const MAX_BUILD_LOG_BYTES = 16 * 1024 * 1024;
/** Lines waiting to be written are joined into one string per this many, so a line costs its bytes only. */
const LOG_LINES_PER_PIECE = 1024;
/** Replicas: a running build's row says so this often... */
export const BUILD_HEARTBEAT_MS = 15_000;
/** ...and a build whose row has not for this long was abandoned (clocks of replicas may differ by part of it). */
export const BUILD_ABANDONED_MS = 90_000;
/** The channel on which replicas say that a build's log grew or the build ended (the payload: its id). */
const LOG_CHANNEL = 'build_log';

/**
 * Appends a build's log lines through `append` (build-logs.ts). A step can print millions of
 * one-character lines: each line must cost its bytes and nothing more (no promise, closure or write
 * per line, which took ~400 bytes of heap a line and let three builds of short lines take the
 * daemon past its heap limit). Lines wait in joined pieces; one write at a time, at most one per
 * `gatherMs`, takes all that waits (a million lines are a few dozen writes); `onData` runs after
 * each write.
 */
export class BuildLogWriter {
  private lines: string[] = [];
  private pieces: string[] = [];
  private running: Promise<void> | undefined;

  constructor(
    private readonly append: (text: string) => Promise<void>,
    private readonly onData: () => void,
    private readonly gatherMs = 0,
  ) {}

  write(line: string): void {
    this.lines.push(`${line.replace(/\r?\n$/, '')}\n`);
    if (this.lines.length >= LOG_LINES_PER_PIECE) this.pieces.push(this.lines.splice(0).join(''));
    this.running ??= this.drain();
  }

  /** Resolves once everything written so far is stored (or could not be). */
  async flushed(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    try {
      while (this.pieces.length > 0 || this.lines.length > 0) {
        // Let the lines of the next gatherMs join this write.
        await new Promise<void>((r) => (this.gatherMs > 0 ? setTimeout(r, this.gatherMs) : setImmediate(r)));
        const text = this.pieces.splice(0).join('') + this.lines.splice(0).join('');
        await this.append(text).catch(() => undefined);
        this.onData();
      }
    } finally {
      this.running = undefined;
    }
  }
}

const BUILTIN_NAMES = new Set(['base', 'python', 'nodejs', 'go', 'code-interpreter']);

/** The build defaults, lowered to the organization's maximums: a request that names nothing still fits. */
function defaultsWithin(l: OrgLimits) {
  const within = (v: number, max: number | null) => (max === null ? v : Math.min(v, max));
  return {
    cpu: within(BUILD_DEFAULTS.cpu, l.max_vcpu),
    memoryMb: within(BUILD_DEFAULTS.memoryMb, l.max_memory_mb),
    diskGb: within(BUILD_DEFAULTS.diskGb, l.max_disk_gb),
  };
}

/** The level a build log line is shown with (JSON polling clients and SSE alike). */
export function levelOf(line: string): 'ERROR' | 'WARN' | 'INFO' {
  if (/\b(error|failed|fatal)\b|exit status|exit code [1-9]/i.test(line)) return 'ERROR';
  if (/\bwarn(ing)?\b/i.test(line)) return 'WARN';
  return 'INFO';
}

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
}

/**
 * Custom template builds: validation, the per-organization build rate limit (counted from the
 * builds table, so it survives restarts), background execution with its log kept as it is written
 * (offset polling and SSE read it there; in the store, on any replica), and the template row's status.
 */
export class TemplateBuildService {
  private live = new EventEmitter();
  private aborts = new Map<string, AbortController>();
  private readonly store: Store;
  private readonly uploads: UploadService;
  private readonly engine: BuildEngine;
  private readonly limits: BuildLimits;
  private readonly log: TemplateBuildDeps['log'];
  private readonly quotas: QuotaService;
  private readonly metrics: Metrics | undefined;
  private readonly stopHearing: () => void;

  constructor(private readonly deps: TemplateBuildDeps) {
    this.store = deps.store;
    this.uploads = deps.uploads;
    this.engine = deps.engine;
    this.limits = deps.limits;
    this.log = deps.log;
    this.quotas = deps.quotas;
    this.metrics = deps.metrics;
    this.live.setMaxListeners(0);
    // Another replica's build: its writes and its end wake this replica's followers at once (they
    // also look every second, which covers a message lost while PostgreSQL was away).
    this.stopHearing = deps.coordination?.subscribe(LOG_CHANNEL, (buildId) => this.live.emit(buildId)) ?? (() => undefined);
  }

  /** Stops hearing other replicas. */
  close(): void {
    this.stopHearing();
  }

  /** Tells this process's followers, and other replicas', that the build's log grew or it ended. */
  private announce(buildId: string): void {
    this.live.emit(buildId);
    this.deps.coordination?.publish(LOG_CHANNEL, buildId).catch(() => undefined);
  }

  /** Stores a batch of the build's log. */
  private async appendLog(buildId: string, text: string): Promise<void> {
    try {
      await this.deps.logs.append(buildId, text);
    } catch (err) {
      // The build goes on without these lines (a full disk, a store restart): a log is not worth a build.
      this.log('cannot store build log lines', { build: buildId, error: String(err) });
    }
  }

  /**
   * Builds that can never finish, marked failed. One machine: every build a previous process left
   * running (call it at start). Replicas: those whose heartbeat stopped (the replica running them
   * died), never one that a live replica runs (call it at start and now and then).
   */
  async failInterrupted(now = Date.now()): Promise<number> {
    const replicated = this.deps.coordination !== undefined;
    const abandoned = (b: BuildRow) => !this.aborts.has(b.id) && (!replicated || Date.parse(b.heartbeatAt ?? b.startedAt ?? b.createdAt) < now - BUILD_ABANDONED_MS);
    let failed = 0;
    for (const b of (await this.store.builds.unfinished()).filter(abandoned)) {
      // Read again: its replica may have finished it since the list was read.
      const fresh = replicated ? await this.store.builds.byId(b.id) : b;
      if (!fresh || fresh.status !== 'building' || !abandoned(fresh)) continue;
      const why = replicated ? 'the control replica running the build stopped' : 'the build was interrupted by a restart of the service';
      await this.finish(fresh, 'failed', `${why}; start it again`);
      failed++;
    }
    return failed;
  }

  private async checkRateLimit(orgId: string): Promise<void> {
    const { per_hour: { used: hour }, per_day: { used: day } } = await this.usage(orgId);
    const over = hour >= this.limits.perHour ? { n: this.limits.perHour, per: 'hour', retry: 3600 } : day >= this.limits.perDay ? { n: this.limits.perDay, per: 'day', retry: 86_400 } : null;
    if (over) {
      // Retry when the oldest build of the window leaves it; a coarse but honest bound.
      throw new ServiceError(
        'RATE_LIMIT_EXCEEDED',
        `template build limit reached: at most ${over.n} builds per ${over.per} per organization`,
        { retry_after: over.retry },
        { 'retry-after': String(over.retry) },
      );
    }
  }

  async start(orgId: string, body: unknown): Promise<{ build: BuildRow; template: TemplateRow }> {
    const orgLimits = await this.quotas.limitsFor(orgId);
    const req: BuildRequest = normalizeBuildRequest(body, defaultsWithin(orgLimits));
    // What a build asks for becomes what every sandbox of the template gets: the same maximums.
    checkSize(orgLimits, { vcpu: req.cpu, memoryMb: req.memoryMb, diskGb: req.diskGb }, 'this build');
    if (BUILTIN_NAMES.has(req.alias)) {
      throw new ServiceError('TEMPLATE_EXISTS', `alias "${req.alias}" is a built-in template; choose another alias`, { alias: req.alias });
    }
    const existing = await this.store.templates.byName(req.alias, orgId);
    const own = existing && existing.orgId === orgId ? existing : undefined;
    if (own && !req.update) {
      throw new ServiceError('TEMPLATE_EXISTS', `a template with alias "${req.alias}" already exists in this organization (send update: true to rebuild it)`, {
        alias: req.alias,
      });
    }
    if (own && (await this.store.builds.latestForTemplate(own.id))?.status === 'building') {
      throw new ServiceError('TEMPLATE_NOT_READY', `template "${req.alias}" is already building`);
    }
    // Every copy source must have been uploaded by this organization before the build starts.
    const copies = new Map<number, { fileId?: string; path?: string; tarball?: string }[]>();
    for (const [i, s] of req.steps.entries()) {
      if (s.type !== 'copy') continue;
      const refs = s.filesHash
        ? [{ fileId: `t_${s.filesHash.replace(/^sha256:/, '')}` }]
        : [...s.fileIds.map((fileId) => ({ fileId })), ...s.srcPaths.map((path) => ({ path }))];
      for (const r of refs) await this.uploads.resolve(orgId, r);
      copies.set(i, refs);
    }
    await this.checkRateLimit(orgId);

    const now = new Date().toISOString();
    const buildId = `tpl_${randomBytes(10).toString('hex')}`;
    const template: TemplateRow = own ?? {
      id: buildId,
      orgId,
      name: req.alias,
      displayName: req.alias,
      description: `Custom template built from ${(req.steps[0] as { image: string }).image}`,
      category: 'custom',
      language: 'custom',
      vcpu: req.cpu,
      memoryMb: req.memoryMb,
      diskGb: req.diskGb,
      status: 'building',
      isPublic: false,
      buildId,
      features: ['code_execution', 'file_operations', 'commands'],
      tags: ['custom'],
      layers: [],
      env: {},
      workdir: null,
      errorMessage: null,
      createdAt: now,
      updatedAt: now,
    };
    const build: BuildRow = {
      id: buildId,
      orgId,
      templateId: template.id,
      alias: req.alias,
      status: 'building',
      progress: 0,
      currentStep: null,
      request: req,
      errorMessage: null,
      createdAt: now,
      startedAt: now,
      completedAt: null,
      ...(this.deps.coordination ? { heartbeatAt: now } : {}),
    };
    // A running build holds its memory and disk like a sandbox (not a sandbox slot): its row counts
    // from here until it finishes.
    await this.quotas.admit(orgId, { sandboxes: 0, memoryMb: req.memoryMb, diskGb: req.diskGb }, async () => {
      if (!own) await this.store.templates.upsert(template);
      await this.store.builds.insert(build);
    });
    void this.execute(build, template, req, copies);
    return { build, template };
  }

  private async execute(build: BuildRow, template: TemplateRow, req: BuildRequest, refs: Map<number, { fileId?: string; path?: string }[]>) {
    const abort = new AbortController();
    this.aborts.set(build.id, abort);
    // Replicas: the row says the build still runs, so that no other replica takes it for abandoned.
    const beat = this.deps.coordination
      ? setInterval(() => {
          this.store.builds
            .update(build.id, { heartbeatAt: new Date().toISOString() })
            .catch((err: unknown) => this.log('cannot record build heartbeat', { build: build.id, error: String(err) }));
        }, BUILD_HEARTBEAT_MS)
      : undefined;
    // Logs hold whatever a tenant's steps print (its env values too): root's alone, or in the store as its env_vars are.
    const writer = new BuildLogWriter((text) => this.appendLog(build.id, text), () => this.announce(build.id), this.deps.logs.gatherMs);
    const write = (line: string) => writer.write(line);
    // Steps print what the tenant's commands print: the stored log and the lines waiting to be
    // written are bounded, the build goes on without them.
    let logged = 0;
    const log = (line: string) => {
      if (logged > MAX_BUILD_LOG_BYTES) return;
      logged += Buffer.byteLength(line) + 1;
      if (logged <= MAX_BUILD_LOG_BYTES) write(line);
      else write(`sandboxd: this build's log reached ${MAX_BUILD_LOG_BYTES / 1024 / 1024} MiB; later output is not kept (the build goes on)`);
    };
    try {
      const copies = new Map<number, CopyInput[]>();
      for (const [i, list] of refs) {
        const inputs: CopyInput[] = [];
        for (const r of list) {
          const u = await this.uploads.resolve(build.orgId, r);
          inputs.push({ hostPath: await this.uploads.hostPath(u), kind: u.kind, name: u.path.split('/').filter(Boolean).pop() ?? u.fileId, sha256: u.sha256 });
        }
        copies.set(i, inputs);
      }
      log(`build ${build.id}: template "${req.alias}", ${req.steps.length} steps, cpu ${req.cpu}, memory ${req.memoryMb} MB, disk ${req.diskGb} GB${req.skipCache ? ', skipCache' : ''}`);
      const result = await this.engine.run(
        { buildId: build.id, orgId: build.orgId, steps: req.steps, resources: { vcpu: req.cpu, memoryMb: req.memoryMb, diskGb: req.diskGb }, skipCache: req.skipCache, copies },
        {
          log,
          progress: (percent, currentStep) => {
            // Progress is advisory: a store that cannot take it now (a restart of PostgreSQL) must not fail the build.
            this.store.builds
              .update(build.id, { progress: Math.max(0, Math.min(99, Math.round(percent))), currentStep })
              .catch((err: unknown) => this.log('cannot record build progress', { build: build.id, error: String(err) }));
          },
          signal: abort.signal,
        },
      );
      const now = new Date().toISOString();
      await this.store.templates.upsert({
        ...template,
        vcpu: req.cpu,
        memoryMb: req.memoryMb,
        diskGb: req.diskGb,
        layers: result.layerIds,
        env: result.env,
        workdir: result.workdir,
        status: 'active',
        buildId: build.id,
        errorMessage: null,
        updatedAt: now,
      });
      write(`build ${build.id} succeeded: ${result.layerIds.length} layers`);
      await writer.flushed();
      await this.finish(build, 'active', null);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      write(`ERROR: build failed: ${message}`);
      await writer.flushed();
      const current = await this.store.templates.byId(template.id);
      if (current && current.status === 'building') {
        await this.store.templates.upsert({ ...current, status: 'failed', errorMessage: message, updatedAt: new Date().toISOString() });
      }
      await this.finish(build, 'failed', message);
      this.log('template build failed', { build: build.id, error: message, ...(err instanceof ServiceError && err.detail ? { detail: err.detail } : {}) });
    } finally {
      clearInterval(beat);
      this.aborts.delete(build.id);
    }
  }

  private async finish(build: BuildRow, status: 'active' | 'failed', error: string | null): Promise<void> {
    const completedAt = new Date();
    await this.store.builds.update(build.id, { status, progress: status === 'active' ? 100 : build.progress, errorMessage: error, completedAt: completedAt.toISOString() });
    const result = status === 'active' ? 'succeeded' : 'failed';
    this.metrics?.builds.inc({ result });
    this.metrics?.buildDuration.observe({ result }, Math.max(0, completedAt.getTime() - Date.parse(build.startedAt ?? build.createdAt)) / 1000);
    this.live.emit(`${build.id}:done`, status);
    this.announce(build.id);
  }

  /** By build id, or by template id (its latest build). Another organization's → 403. */
  async get(orgId: string, id: string): Promise<BuildRow> {
    const b = (await this.store.builds.byId(id)) ?? (await this.store.builds.latestForTemplate(id));
    if (!b) throw new ServiceError('BUILD_NOT_FOUND', `no build with id ${id}`);
    if (b.orgId !== orgId) throw new ServiceError('PERMISSION_DENIED');
    return b;
  }

  /** The organization's builds against the rate limit, and how many run now. */
  async usage(orgId: string) {
    const now = Date.now();
    return {
      per_hour: { used: await this.store.builds.countSince(orgId, new Date(now - 3600_000).toISOString()), limit: this.limits.perHour },
      per_day: { used: await this.store.builds.countSince(orgId, new Date(now - 86_400_000).toISOString()), limit: this.limits.perDay },
      running: (await this.store.builds.running(orgId)).length,
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

  /** Log text from byte `offset` on (none past the end), and the offset to ask for next. */
  async logsSince(b: BuildRow, offset: number, maxBytes = 4 * 1024 * 1024): Promise<{ logs: string; offset: number; atEnd: boolean }> {
    const { data, size } = await this.deps.logs.read(b.id, offset, maxBytes);
    if (offset >= size) return { logs: '', offset: size, atEnd: true };
    // Never split a line (or a UTF-8 character): stop after the last newline.
    const end = data.lastIndexOf(0x0a);
    const used = end === -1 ? data.length : end + 1;
    return { logs: data.subarray(0, used).toString('utf8'), offset: offset + used, atEnd: offset + used >= size };
  }

  /** Calls `fn` whenever more of the build's log is stored, or the build ended, on any replica (read it with logsSince). */
  onData(buildId: string, fn: () => void): () => void {
    this.live.on(buildId, fn);
    return () => this.live.off(buildId, fn);
  }

  onDone(buildId: string, fn: (status: string) => void): () => void {
    this.live.on(`${buildId}:done`, fn);
    return () => this.live.off(`${buildId}:done`, fn);
  }

  /** Deletes an organization's template: built-ins 403, in use by a live sandbox 409. */
  async deleteTemplate(orgId: string, template: TemplateRow): Promise<void> {
    if (template.orgId === null) throw new ServiceError('PERMISSION_DENIED', `"${template.name}" is a built-in template and cannot be deleted`);
    if (template.orgId !== orgId) throw new ServiceError('PERMISSION_DENIED');
    const users = await this.store.sandboxes.countByTemplate(template.id);
    if (users > 0) throw new ServiceError('TEMPLATE_IN_USE', `template "${template.name}" is used by ${users} sandbox(es); delete them first`, { id: template.id });
    this.aborts.get(template.buildId ?? '')?.abort();
    await this.store.templates.remove(template.id);
  }
}
