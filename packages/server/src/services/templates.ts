import { createHash } from 'node:crypto';
import { ServiceError, type TemplateSummary } from '@sandboxd/protocol';
import type { BuiltinTemplate } from '../images/builtin.js';
import type { LayerInfo } from '../images/types.js';
import type { Store, TemplateRow } from '../store/types/index.js';

export function builtinTemplateId(name: string): string {
  return `tpl_${createHash('sha256').update(`builtin:${name}`).digest('hex').slice(0, 20)}`;
}

export function renderTemplate(t: TemplateRow): TemplateSummary & Record<string, unknown> {
  return {
    object: 'template',
    id: t.id,
    name: t.name,
    display_name: t.displayName,
    description: t.description,
    category: t.category,
    language: t.language,
    default_resources: { vcpu: t.vcpu, memory_mb: t.memoryMb, disk_gb: t.diskGb },
    status: t.status,
    is_active: t.status === 'active',
    is_public: t.isPublic,
    build_id: t.buildId,
    features: t.features,
    tags: t.tags,
    env: t.env,
    workdir: t.workdir,
    layers: t.layers,
    error_message: t.errorMessage,
    progress: t.status === 'building' ? (t.buildProgress ?? null) : null,
    created_at: t.createdAt,
    updated_at: t.updatedAt,
  };
}

/** How long a replica's progress in the store counts as current (see builtinProgress). */
const BUILTIN_PROGRESS_FRESH_MS = 60_000;

/**
 * Why a template cannot be created from now: a built-in still building is a 503 with when to
 * retry (its percent and estimate are in the store, the same for every replica); any other state
 * that is not active is a 409.
 */
export function notReady(t: TemplateRow, now = Date.now()): ServiceError {
  if (t.status === 'building' && t.orgId === null) {
    const eta = t.buildEtaAt ? Math.ceil((Date.parse(t.buildEtaAt) - now) / 1000) : NaN;
    const retryAfter = Number.isFinite(eta) ? Math.min(600, Math.max(5, eta)) : 30;
    const percent = t.buildProgress ?? 0;
    return new ServiceError(
      'TEMPLATE_BUILDING',
      `template "${t.name}" is still being built (${percent} % done, ready in about ${retryAfter} s); retry after ${retryAfter} s`,
      { template: t.name, progress: percent, retry_after: retryAfter },
    );
  }
  const why = t.status === 'failed' && t.errorMessage ? `: ${t.errorMessage}` : '';
  return new ServiceError('TEMPLATE_NOT_READY', `template "${t.name}" is ${t.status}, not active${why}`, { template: t.name });
}

export class TemplateService {
  constructor(private store: Store) {}

  /** Records (or refreshes) a built-in template once its layers are ready. */
  registerBuiltin(t: BuiltinTemplate, layers: LayerInfo[]): Promise<TemplateRow> {
    return this.upsertBuiltin(t, { status: 'active', layers: layers.map((l) => l.id), errorMessage: null, buildProgress: null, buildEtaAt: null });
  }

  /**
   * Records a built-in as building: `percent` done, ready in about `etaSeconds`. Another replica
   * building the same layers (they share the store and the layer dir) may be further: a lower
   * percent than a fresh one in the store is not written back over it.
   */
  async builtinProgress(t: BuiltinTemplate, percent: number, etaSeconds: number): Promise<void> {
    const existing = await this.store.templates.byId(builtinTemplateId(t.name));
    if (
      existing?.status === 'building' &&
      (existing.buildProgress ?? 0) > percent &&
      Date.now() - Date.parse(existing.updatedAt) < BUILTIN_PROGRESS_FRESH_MS
    ) {
      return;
    }
    await this.upsertBuiltin(t, {
      status: 'building',
      layers: [],
      errorMessage: null,
      buildProgress: Math.max(0, Math.min(99, Math.floor(percent))),
      buildEtaAt: new Date(Date.now() + etaSeconds * 1000).toISOString(),
    });
  }

  /** Records that a built-in's build failed (it is tried again at the next start). */
  async builtinFailed(t: BuiltinTemplate, err: Error): Promise<void> {
    await this.upsertBuiltin(t, { status: 'failed', layers: [], errorMessage: err.message.slice(0, 2000), buildProgress: null, buildEtaAt: null });
  }

  private async upsertBuiltin(t: BuiltinTemplate, state: Pick<TemplateRow, 'status' | 'layers' | 'errorMessage' | 'buildProgress' | 'buildEtaAt'>): Promise<TemplateRow> {
    const id = builtinTemplateId(t.name);
    const now = new Date().toISOString();
    const existing = await this.store.templates.byId(id);
    const row: TemplateRow = {
      id,
      orgId: null,
      name: t.name,
      displayName: t.displayName,
      description: t.description,
      category: t.category,
      language: t.language,
      vcpu: t.resources.vcpu,
      memoryMb: t.resources.memoryMb,
      diskGb: t.resources.diskGb,
      isPublic: true,
      buildId: null,
      features: t.features,
      tags: t.tags,
      env: t.env ?? {},
      workdir: '/workspace',
      ...state,
      createdAt: existing?.createdAt ?? now,
      updatedAt: now,
    };
    await this.store.templates.upsert(row);
    return row;
  }

  async list(orgId: string, filter: { category?: string; language?: string } = {}): Promise<TemplateRow[]> {
    const rows = await this.store.templates.list(orgId);
    return rows.filter(
      (t) =>
        (!filter.category || t.category.toLowerCase() === filter.category.toLowerCase()) &&
        (!filter.language || t.language.toLowerCase() === filter.language.toLowerCase()),
    );
  }

  /** A template visible to `orgId` by id or name; another organization's template is 403. */
  async resolve(nameOrId: string, orgId: string): Promise<TemplateRow> {
    // Both reads at once (one round trip on PostgreSQL, on every create); an id wins over a name.
    const [byId, byName] = await Promise.all([this.store.templates.byId(nameOrId), this.store.templates.byName(nameOrId, orgId)]);
    if (byId) {
      if (byId.orgId !== null && byId.orgId !== orgId) throw new ServiceError('PERMISSION_DENIED', 'this template belongs to another organization');
      return byId;
    }
    if (!byName) throw new ServiceError('TEMPLATE_NOT_FOUND', `no template named or with id "${nameOrId}"`, { template: nameOrId });
    return byName;
  }
}
