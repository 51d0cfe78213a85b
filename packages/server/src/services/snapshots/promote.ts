import { randomBytes } from 'node:crypto';
import { ServiceError } from '@sandboxd/protocol';
import { BUILTIN_TEMPLATES } from '../../images/builtin.js';
import type { TemplateRow } from '../../store/types/index.js';
import type { SnapshotCore } from './core.js';
import type { Pins } from './pins.js';

/** Names of the built-in templates (an alias may not take one). */
export function builtinNames(): ReadonlySet<string> {
  return new Set(BUILTIN_TEMPLATES.map((t) => t.name));
}

/** A snapshot made a template of its organization. */
export class Promotions {
  constructor(
    private readonly c: SnapshotCore,
    private readonly pins: Pins,
  ) {}

  /**
   * `POST /v1/snapshots/{id}/template`: a template of the organization, named `alias`, whose
   * sandboxes start with the snapshot's files, settings and env set (as template env).
   */
  async promote(orgId: string, id: string, alias: string, builtinNames: ReadonlySet<string>): Promise<TemplateRow> {
    const first = await this.c.get(orgId, id);
    return this.pins.pinned(first.layers, async () => this.promotePinned(orgId, id, alias, builtinNames));
  }

  private async promotePinned(orgId: string, id: string, alias: string, builtinNames: ReadonlySet<string>): Promise<TemplateRow> {
    const store = this.c.d.store;
    // Read again with its layers pinned: a delete that came first is a 404, one that comes later keeps them.
    const snap = await this.c.get(orgId, id);
    if (builtinNames.has(alias)) throw new ServiceError('TEMPLATE_EXISTS', `alias "${alias}" is a built-in template; choose another alias`, { alias });
    const existing = await store.templates.byName(alias, orgId);
    if (existing && existing.orgId === orgId) throw new ServiceError('TEMPLATE_EXISTS', `a template with alias "${alias}" already exists in this organization`, { alias });
    const source = await store.templates.byId(snap.templateId);
    const { SANDBOXD_AGENT_WORKSPACE: workdir, ...env } = snap.templateEnv;
    const now = new Date().toISOString();
    const row: TemplateRow = {
      id: `tpl_${randomBytes(10).toString('hex')}`,
      orgId,
      name: alias,
      displayName: alias,
      description: `From snapshot ${snap.id}${snap.name ? ` (${snap.name})` : ''} of a ${snap.templateName} sandbox`,
      category: 'custom',
      language: source?.language ?? 'custom',
      vcpu: snap.vcpu,
      memoryMb: snap.memoryMb,
      diskGb: snap.diskGb,
      status: 'active',
      isPublic: false,
      buildId: null,
      features: source?.features ?? ['code_execution', 'file_operations', 'commands'],
      tags: ['custom', 'snapshot'],
      layers: snap.layers,
      env: { ...env, ...snap.envVars },
      workdir: workdir ?? source?.workdir ?? null,
      errorMessage: null,
      createdAt: now,
      updatedAt: now,
    };
    await store.templates.upsert(row);
    return row;
  }
}
