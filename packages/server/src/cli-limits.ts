import { ServiceError } from '@sandboxd/protocol';
import type { LimitOverrides, OrgRow, Store } from './store/types/index.js';
import { LIMIT_MINIMUMS, LIMIT_NAMES, resolveLimits, timeoutFor, type LimitName, type OrgLimits } from './services/limits.js';
import { QuotaService } from './services/quotas.js';
import { snapshotStorageUsed } from './services/snapshots/index.js';
import { publicOrgId } from './services/org-ids.js';
import { FsLayerStore } from './images/layer-store.js';
import { join } from 'node:path';

/** `--max-vcpu` ... for every limit: parseArgs options of `sandboxd orgs limits`. */
export const LIMIT_OPTIONS = Object.fromEntries(LIMIT_NAMES.map((n) => [n.replaceAll('_', '-'), { type: 'string' as const }]));

const NO_LIMIT = new Set(['0', 'none', 'unlimited']);

/**
 * The overrides after applying `--<limit> VALUE` flags: a whole number sets it, 0 / none /
 * unlimited removes the limit, `default` drops the override (the configured default applies).
 */
export function applyLimitFlags(current: LimitOverrides, flags: Record<string, unknown>): LimitOverrides {
  const next = { ...current };
  for (const name of LIMIT_NAMES) {
    const raw = flags[name.replaceAll('_', '-')];
    if (raw === undefined) continue;
    const v = String(raw).trim().toLowerCase();
    if (v === 'default') delete next[name];
    else if (NO_LIMIT.has(v)) next[name] = null;
    else if (/^\d+$/.test(v) && Number(v) >= LIMIT_MINIMUMS[name] && Number.isSafeInteger(Number(v))) next[name] = Number(v);
    else {
      throw new ServiceError(
        'VALIDATION_ERROR',
        `--${name.replaceAll('_', '-')} must be a whole number of at least ${LIMIT_MINIMUMS[name]}, 0 / unlimited (no limit) or default, got "${String(raw)}"`,
      );
    }
  }
  return next;
}

function show(name: LimitName, v: number | null): string {
  if (v !== null) return String(v);
  return name === 'default_timeout_seconds' ? 'never' : 'unlimited';
}

/** The effective limits: a create without timeout gets the default capped by the maximum. */
function effective(l: OrgLimits): OrgLimits {
  return { ...l, default_timeout_seconds: timeoutFor(l, undefined) };
}

/** One organization's limits, where each comes from, and what the organization holds now. */
export async function describeLimits(store: Store, defaults: OrgLimits, org: OrgRow, dataDir?: string) {
  const quotas = new QuotaService(store, defaults);
  const overrides = await store.orgs.limits(org.id);
  const limits = effective(resolveLimits(defaults, overrides));
  const used = await quotas.usage(org.id);
  const usedOf: Partial<Record<LimitName, number>> = {
    max_sandboxes: used.sandboxes,
    max_total_memory_mb: used.memoryMb,
    max_total_disk_gb: used.diskGb,
    max_snapshot_storage_mb: Math.ceil((dataDir ? await snapshotStorageUsed(store, new FsLayerStore(join(dataDir, 'snapshot-layers')), org.id) : await store.snapshots.storageUsed(org.id)) / (1024 * 1024)),
  };
  const usage = { sandboxes: used.sandboxes, stopped_sandboxes: used.stoppedSandboxes, memory_mb: used.memoryMb, disk_gb: used.diskGb, running_builds: used.builds };
  const json = { organization: org.name, organization_id: publicOrgId(org.id), limits, overrides, usage };
  const asSet = resolveLimits(defaults, overrides).default_timeout_seconds;
  const capped = (n: LimitName) =>
    n === 'default_timeout_seconds' && asSet !== limits[n] ? ` (${show(n, asSet)}, capped by max_timeout_seconds)` : '';
  const rows = LIMIT_NAMES.map((n) => ({
    limit: n,
    value: `${show(n, limits[n])}${capped(n)}`,
    source: n in overrides ? 'organization' : 'default',
    used: usedOf[n] === undefined ? '' : String(usedOf[n]),
  }));
  return { json, rows };
}

/** A compact row per organization for `orgs list`: overridden values are marked with `*`. */
export async function listRow(store: Store, defaults: OrgLimits, org: OrgRow): Promise<Record<string, string>> {
  const overrides = await store.orgs.limits(org.id);
  const limits = effective(resolveLimits(defaults, overrides));
  const cell = (n: LimitName) => `${show(n, limits[n])}${n in overrides ? '*' : ''}`;
  return {
    id: org.id,
    name: org.name,
    sandboxes: cell('max_sandboxes'),
    vcpu: cell('max_vcpu'),
    memory_mb: cell('max_memory_mb'),
    disk_gb: cell('max_disk_gb'),
    total_memory_mb: cell('max_total_memory_mb'),
    total_disk_gb: cell('max_total_disk_gb'),
    timeout_s: `${cell('default_timeout_seconds')}/${cell('max_timeout_seconds')}`,
    created: org.createdAt,
  };
}
