import { createHash } from 'node:crypto';
import { ServiceError, type TemplateSummary } from '@sandboxd/protocol';
import type { BuiltinTemplate } from '../images/builtin.js';
import type { LayerInfo } from '../images/types.js';
import type { Store, TemplateRow } from '../store/types.js';

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
    created_at: t.createdAt,
    updated_at: t.updatedAt,
  };
}

export class TemplateService {
  constructor(private store: Store) {}

  /** Records (or refreshes) a built-in template once its layers are ready. */
  async registerBuiltin(t: BuiltinTemplate, layers: LayerInfo[]): Promise<TemplateRow> {
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
      status: 'active',
      isPublic: true,
      buildId: null,
      features: t.features,
      tags: t.tags,
      layers: layers.map((l) => l.id),
      env: {},
      workdir: '/workspace',
      errorMessage: null,
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
