import { ServiceError } from '@sandboxd/protocol';
import type { LimitOverrides } from '../store/types/index.js';

/**
 * The limits an operator sets per organization. The names are the words of the whole interface:
 * `SANDBOXD_<NAME>` in the configuration, `--<name>` in `sandboxd orgs limits`, the `limit` field of
 * a LIMIT_EXCEEDED or ORG_QUOTA_EXCEEDED error.
 *
 * - Per sandbox (and per template build): max_vcpu, max_memory_mb, max_disk_gb.
 * - Per organization: max_sandboxes (active ones: being created, running or paused),
 *   max_total_memory_mb (held by active sandboxes and running builds), max_total_disk_gb (held by
 *   every sandbox not deleted, stopped ones too, and running builds).
 * - Timeouts: default_timeout_seconds (a create without timeout_seconds), max_timeout_seconds.
 * - Snapshots: max_snapshot_storage_mb (what the organization's snapshots store themselves).
 */
export const LIMIT_NAMES = [
  'max_vcpu',
  'max_memory_mb',
  'max_disk_gb',
  'max_sandboxes',
  'max_total_memory_mb',
  'max_total_disk_gb',
  'default_timeout_seconds',
  'max_timeout_seconds',
  'max_snapshot_storage_mb',
] as const;
export type LimitName = (typeof LIMIT_NAMES)[number];

/** Every limit of one organization; null = no limit (for default_timeout_seconds: never expires). */
export type OrgLimits = Record<LimitName, number | null>;

/** Below these nothing could run (a template needs 128 MB and 1 GB, as the build API says). */
export const LIMIT_MINIMUMS: Readonly<Record<LimitName, number>> = {
  max_vcpu: 1,
  max_memory_mb: 128,
  max_disk_gb: 1,
  max_sandboxes: 1,
  max_total_memory_mb: 128,
  max_total_disk_gb: 1,
  default_timeout_seconds: 1,
  max_timeout_seconds: 1,
  max_snapshot_storage_mb: 1,
};

export function isLimitName(name: string): name is LimitName {
  return (LIMIT_NAMES as readonly string[]).includes(name);
}

/** The configured defaults with the organization's overrides on top (unknown names are ignored). */
export function resolveLimits(defaults: OrgLimits, overrides: LimitOverrides): OrgLimits {
  const out = { ...defaults };
  for (const [name, value] of Object.entries(overrides)) if (isLimitName(name)) out[name] = value;
  return out;
}

/**
 * The timeout a create gets: the one asked for (refused above the maximum), else the default. A
 * default above the maximum (an organization's maximum lowered below the configured default), or
 * "never" under a maximum, becomes the maximum.
 */
export function timeoutFor(limits: OrgLimits, requested: number | null | undefined): number | null {
  const max = limits.max_timeout_seconds;
  if (requested !== undefined && requested !== null) {
    checkTimeout(limits, requested);
    return requested;
  }
  const d = limits.default_timeout_seconds;
  if (d === null) return max;
  return max === null ? d : Math.min(d, max);
}

/** A timeout above the organization's maximum is a 400 naming the limit. */
export function checkTimeout(limits: OrgLimits, seconds: number): void {
  const max = limits.max_timeout_seconds;
  if (max !== null && seconds > max) {
    throw new ServiceError(
      'LIMIT_EXCEEDED',
      `timeout_seconds ${seconds} is above the organization's maximum of ${max} (max_timeout_seconds); extend a sandbox later with PUT /v1/sandboxes/{id}/timeout`,
      { limit: 'max_timeout_seconds', max, requested: seconds },
    );
  }
}

export interface SandboxSize {
  vcpu: number;
  memoryMb: number;
  diskGb: number;
}

const SIZE_LIMITS: Array<{ name: LimitName; of: keyof SandboxSize; unit: (n: number) => string }> = [
  { name: 'max_vcpu', of: 'vcpu', unit: (n) => `${n} vCPU` },
  { name: 'max_memory_mb', of: 'memoryMb', unit: (n) => `${n} MB of memory` },
  { name: 'max_disk_gb', of: 'diskGb', unit: (n) => `${n} GB of disk` },
];

/**
 * Refuses a sandbox or build bigger than the per-sandbox maximums with a 400 naming the limit;
 * never shrinks it (a template that got too big for its organization says so at every create).
 */
export function checkSize(limits: OrgLimits, size: SandboxSize, subject: string): void {
  for (const { name, of, unit } of SIZE_LIMITS) {
    const max = limits[name];
    const asked = size[of];
    if (max !== null && asked > max) {
      throw new ServiceError('LIMIT_EXCEEDED', `${subject} asks for ${unit(asked)}; the organization's maximum per sandbox is ${unit(max)} (${name})`, {
        limit: name,
        max,
        requested: asked,
      });
    }
  }
}

/** What an organization holds now: its sandboxes (SandboxUsage) plus its running template builds. */
export interface OrgUsage {
  sandboxes: number;
  stoppedSandboxes: number;
  memoryMb: number;
  diskGb: number;
  builds: number;
  /** What its snapshots, templates' layers and uploads store (bytes): counted in max_total_disk_gb too. */
  storedBytes?: number;
}

/** What one create, start, build or upload adds. */
export interface Demand {
  sandboxes: number;
  memoryMb: number;
  diskGb: number;
  /** Bytes to be stored (an upload's, a snapshot's copy). */
  storedBytes?: number;
}

const GIB = 1024 ** 3;
/** GB with at most two decimals (whole GB stay whole). */
const gb = (bytes: number) => Math.round((bytes / GIB) * 100) / 100;

const FREE_SOME = 'stop or delete a sandbox, or ask the operator to raise the limit';

/** The ORG_QUOTA_EXCEEDED error for `demand` on top of `used`, or undefined when it fits. */
export function quotaError(limits: OrgLimits, used: OrgUsage, demand: Demand): ServiceError | undefined {
  const over = (name: LimitName, u: number, d: number, message: (max: number) => string) => {
    const max = limits[name];
    if (d <= 0 || max === null || u + d <= max) return undefined;
    return new ServiceError('ORG_QUOTA_EXCEEDED', `organization quota reached: ${message(max)} (${name})`, { limit: name, max, used: u, requested: d });
  };
  const builds = used.builds ? ` and ${used.builds} running template build(s)` : '';
  return (
    over('max_sandboxes', used.sandboxes, demand.sandboxes, (max) =>
      `${used.sandboxes} of ${max} concurrent sandboxes are running, paused or starting; ${FREE_SOME}`,
    ) ??
    over('max_total_memory_mb', used.memoryMb, demand.memoryMb, (max) =>
      `this needs ${demand.memoryMb} MB of memory and ${used.memoryMb} of the organization's ${max} MB are held by its running and paused sandboxes${builds}; ${FREE_SOME}`,
    ) ??
    diskQuotaError(limits, used, demand, builds)
  );
}

/**
 * max_total_disk_gb: the disk_gb of its sandboxes (what their disks may grow to) and running builds,
 * plus what its snapshots, templates and uploads store, in bytes.
 */
function diskQuotaError(limits: OrgLimits, used: OrgUsage, demand: Demand, builds: string): ServiceError | undefined {
  const max = limits.max_total_disk_gb;
  const adding = demand.diskGb * GIB + (demand.storedBytes ?? 0);
  const stored = used.storedBytes ?? 0;
  const usedBytes = used.diskGb * GIB + stored;
  if (adding <= 0 || max === null || usedBytes + adding <= max * GIB) return undefined;
  const what = stored > 0 ? `${used.diskGb} GB are its sandboxes' disks (stopped ones keep theirs)${builds} and ${gb(stored)} GB its snapshots, templates and uploads` : `they are held by its sandboxes (stopped ones keep their disk)${builds}`;
  return new ServiceError(
    'ORG_QUOTA_EXCEEDED',
    `organization quota reached: this needs ${gb(adding)} GB of disk and ${gb(usedBytes)} of the organization's ${max} GB are used: ${what}; delete a sandbox, snapshot, template or upload, or ask the operator to raise the limit (max_total_disk_gb)`,
    { limit: 'max_total_disk_gb', max, used: gb(usedBytes), requested: gb(adding) },
  );
}
