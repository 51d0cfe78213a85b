import { randomBytes } from 'node:crypto';
import { ServiceError } from '@sandboxd/protocol';
import type { BuildRow, TemplateRow } from '../../store/types/index.js';
import { GIB } from '../disk-room.js';
import { checkSize, type OrgLimits } from '../limits.js';
import { BUILD_DEFAULTS, normalizeBuildRequest, type BuildRequest } from '../template-requests.js';
import type { BuildCore } from './core.js';
import type { Runs } from './run.js';

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

/** A build asked for: the request checked against the organization's limits and the build rate limit, its rows written, its run begun. */
export class Starts {
  constructor(
    private readonly c: BuildCore,
    private readonly runs: Runs,
  ) {}

  private async checkRateLimit(orgId: string): Promise<void> {
    const limits = this.c.d.limits;
    const { per_hour: { used: hour }, per_day: { used: day } } = await this.c.usage(orgId);
    const over = hour >= limits.perHour ? { n: limits.perHour, per: 'hour', retry: 3600 } : day >= limits.perDay ? { n: limits.perDay, per: 'day', retry: 86_400 } : null;
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
    const { store, uploads, quotas } = this.c.d;
    const orgLimits = await quotas.limitsFor(orgId);
    const req: BuildRequest = normalizeBuildRequest(body, defaultsWithin(orgLimits));
    // What a build asks for becomes what every sandbox of the template gets: the same maximums.
    checkSize(orgLimits, { vcpu: req.cpu, memoryMb: req.memoryMb, diskGb: req.diskGb }, 'this build');
    if (BUILTIN_NAMES.has(req.alias)) {
      throw new ServiceError('TEMPLATE_EXISTS', `alias "${req.alias}" is a built-in template; choose another alias`, { alias: req.alias });
    }
    const existing = await store.templates.byName(req.alias, orgId);
    const own = existing && existing.orgId === orgId ? existing : undefined;
    if (own && !req.update) {
      throw new ServiceError('TEMPLATE_EXISTS', `a template with alias "${req.alias}" already exists in this organization (send update: true to rebuild it)`, {
        alias: req.alias,
      });
    }
    if (own && (await store.builds.latestForTemplate(own.id))?.status === 'building') {
      throw new ServiceError('TEMPLATE_NOT_READY', `template "${req.alias}" is already building`);
    }
    // Every copy source must have been uploaded by this organization before the build starts.
    const copies = new Map<number, { fileId?: string; path?: string; tarball?: string }[]>();
    for (const [i, s] of req.steps.entries()) {
      if (s.type !== 'copy') continue;
      const refs = s.filesHash
        ? [{ fileId: `t_${s.filesHash.replace(/^sha256:/, '')}` }]
        : [...s.fileIds.map((fileId) => ({ fileId })), ...s.srcPaths.map((path) => ({ path }))];
      for (const r of refs) await uploads.resolve(orgId, r);
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
      ...(this.c.d.coordination ? { heartbeatAt: now } : {}),
    };
    // Room on the host for its steps' disk (diskGb), held until it ends, before anything is written;
    // each step that runs then needs room for its layer (run.ts).
    const releaseDisk = await this.c.d.claimDisk?.(req.diskGb * GIB, `a template build of ${req.diskGb} GB of disk`);
    // A running build holds its memory and disk like a sandbox (not a sandbox slot): its row counts
    // from here until it finishes.
    try {
      await quotas.admit(orgId, { sandboxes: 0, memoryMb: req.memoryMb, diskGb: req.diskGb }, async () => {
        if (!own) await store.templates.upsert(template);
        await store.builds.insert(build);
      });
    } catch (err) {
      releaseDisk?.(false);
      throw err;
    }
    void this.runs.execute(build, template, req, copies).finally(() => releaseDisk?.());
    return { build, template };
  }
}
