import { existsSync, statfsSync } from 'node:fs';
import { availableParallelism, totalmem } from 'node:os';
import { dirname } from 'node:path';
import { budgetSandboxes, READY_SANDBOX_COST_MB, reserveForMemory } from '../node/pool-sizing.js';
import { LIMIT_MINIMUMS, type LimitName, type OrgLimits } from '../services/limits.js';
import { ConfigError, int } from './parse.js';
import type { Config } from './types.js';

/** What the default limits are derived from. */
export interface HostFacts {
  cpus: number;
  memoryMb: number;
  /** Size of the filesystem that holds the data directory. */
  diskGb: number;
}

export function hostFacts(dataDir: string): HostFacts {
  let dir = dataDir;
  while (!existsSync(dir) && dirname(dir) !== dir) dir = dirname(dir);
  const fs = statfsSync(dir);
  return {
    cpus: availableParallelism(),
    memoryMb: Math.floor(totalmem() / 2 ** 20),
    diskGb: Math.floor((fs.blocks * fs.bsize) / 2 ** 30),
  };
}

/**
 * Default limits: a sandbox may have up to the host's cores and half its memory and data disk (at
 * least what the built-in code-interpreter needs: 2 vCPU, 2 GB, 10 GB); an organization may hold
 * 100 sandboxes and up to the host's memory and data disk in total (so one organization alone can
 * never commit more than the host has); a sandbox lives an hour unless asked otherwise, a day at
 * most per request (it can be extended). 0 in a variable means no limit.
 */
export function limitsFrom(env: NodeJS.ProcessEnv, host: HostFacts): OrgLimits {
  const defaults: OrgLimits = {
    max_vcpu: Math.max(2, host.cpus),
    max_memory_mb: Math.max(2048, Math.floor(host.memoryMb / 2)),
    max_disk_gb: Math.max(10, Math.floor(host.diskGb / 2)),
    max_sandboxes: 100,
    max_total_memory_mb: Math.max(2048, host.memoryMb),
    max_total_disk_gb: Math.max(10, host.diskGb),
    default_timeout_seconds: 3600,
    max_timeout_seconds: 86_400,
    max_snapshot_storage_mb: Math.max(10_240, Math.floor((host.diskGb * 1024) / 4)),
  };
  const out = { ...defaults };
  for (const name of Object.keys(defaults) as LimitName[]) {
    const variable = `SANDBOXD_${name.toUpperCase()}`;
    const v = int(env, variable, defaults[name] ?? 0, 0);
    if (v !== 0 && v < LIMIT_MINIMUMS[name]) throw new ConfigError(`${variable} must be 0 (no limit) or at least ${LIMIT_MINIMUMS[name]}, got "${env[variable]}"`);
    out[name] = v === 0 ? null : v;
  }
  const [d, m] = [out.default_timeout_seconds, out.max_timeout_seconds];
  if (m !== null && d === null) {
    throw new ConfigError(`SANDBOXD_DEFAULT_TIMEOUT_SECONDS=0 (never expire) needs SANDBOXD_MAX_TIMEOUT_SECONDS=0 (no maximum) too, got ${m}`);
  }
  if (m !== null && d !== null && d > m) {
    throw new ConfigError(`SANDBOXD_DEFAULT_TIMEOUT_SECONDS (${d}) must not be above SANDBOXD_MAX_TIMEOUT_SECONDS (${m})`);
  }
  return out;
}

/**
 * The warm pool's budget defaults to a tenth of the host's memory, at most 4 GiB: ~10 MiB per
 * ready sandbox (READY_SANDBOX_COST_MB), so 240 ready sandboxes on a 24 GiB host. The horizon is
 * long because a burst can only be served from ready sandboxes: a 2-core host boots 13–20 a second,
 * so 100 creates after 10 s at 2/s meet p99 ≤ 1.5 s only with ~90 s of that rate held (30 s: p99
 * ~5 s; bench/burst); the budget bounds what it costs. Boots are CPU-bound (the agent's start, crun,
 * the kernel's namespace and mount work): two per core keep the cores busy while one waits, and
 * more only make each create wait longer (8 or 16 at once did no better than 4 on 2 cores).
 */
export function warmPoolFrom(env: NodeJS.ProcessEnv, host: HostFacts): Config['warmPool'] {
  const byDefault = Math.max(READY_SANDBOX_COST_MB, Math.min(4096, Math.floor(host.memoryMb / 10)));
  const maxMemoryMb = int(env, 'SANDBOXD_WARM_POOL_MAX_MEMORY_MB', byDefault, 0);
  if (maxMemoryMb !== 0 && maxMemoryMb < READY_SANDBOX_COST_MB) {
    throw new ConfigError(
      `SANDBOXD_WARM_POOL_MAX_MEMORY_MB must be 0 (no warm pool) or at least ${READY_SANDBOX_COST_MB} (one ready sandbox costs ~${READY_SANDBOX_COST_MB} MiB), got "${env.SANDBOXD_WARM_POOL_MAX_MEMORY_MB}"`,
    );
  }
  if (maxMemoryMb > host.memoryMb) {
    throw new ConfigError(`SANDBOXD_WARM_POOL_MAX_MEMORY_MB (${maxMemoryMb}) must not be above the host's memory (${host.memoryMb} MB)`);
  }
  return {
    minPerKey: int(env, 'SANDBOXD_WARM_POOL_SIZE', 2, 0, 50),
    maxMemoryMb,
    // Sized to the machine's memory (5 % of it, within the budget): on the 24 GiB reference host
    // ~120 sandboxes (~1 GiB idle, 8 MiB each in its memory cgroup), which serve 100 creates out of
    // the blue all from ready ones (p99 1.1–1.7 s; 60 left 40 to boot: p99 2.1–3.1 s; bench/burst);
    // 40 on an 8 GiB machine.
    reserve: int(env, 'SANDBOXD_WARM_POOL_RESERVE', reserveForMemory(host.memoryMb, budgetSandboxes(maxMemoryMb)), 0, 100_000),
    horizonSeconds: int(env, 'SANDBOXD_WARM_POOL_HORIZON_SECONDS', 90, 0, 3600),
    shrinkAfterSeconds: int(env, 'SANDBOXD_WARM_POOL_SHRINK_AFTER_SECONDS', 30, 1, 86_400),
    bootConcurrency: int(env, 'SANDBOXD_BOOT_CONCURRENCY', 2 * Math.max(1, host.cpus), 1, 256),
  };
}

/** 5 % of the data filesystem kept free by default; a size in GB (fractions allowed) instead when set. */
export function diskFrom(env: NodeJS.ProcessEnv): Config['disk'] {
  const mode = (env.SANDBOXD_DISK_ADMISSION || 'on').toLowerCase();
  if (mode !== 'on' && mode !== 'off') throw new ConfigError(`SANDBOXD_DISK_ADMISSION must be on or off, got "${env.SANDBOXD_DISK_ADMISSION}"`);
  const percent = int(env, 'SANDBOXD_DISK_RESERVE_PERCENT', 5, 0, 90);
  // 4: a host with 70 GB free holds 140 sandboxes of 2 GB (a burst of 100 is admitted) rather than
  // 35, and what they may write past their share is what the reserve and refusals guard.
  const overcommit = int(env, 'SANDBOXD_DISK_OVERCOMMIT', 4, 1, 1000);
  const raw = env.SANDBOXD_DISK_RESERVE_GB;
  if (raw === undefined || raw === '') return { admission: mode === 'on', reserve: { percent }, overcommit };
  const gb = Number(raw);
  if (!Number.isFinite(gb) || gb < 0 || gb > 1_000_000) throw new ConfigError(`SANDBOXD_DISK_RESERVE_GB must be a number of GB from 0 up, got "${raw}"`);
  return { admission: mode === 'on', reserve: { percent, bytes: Math.round(gb * 1024 ** 3) }, overcommit };
}

/** A quarter of the data directory's filesystem by default (at least 1 GB), a week idle, ten minutes' grace. */
export function nodeLayerCacheFrom(env: NodeJS.ProcessEnv, host: HostFacts): Config['nodeLayerCache'] {
  const raw = env.SANDBOXD_NODE_LAYER_CACHE_GB;
  let gb = Math.max(1, Math.floor(host.diskGb / 4));
  if (raw !== undefined && raw !== '') {
    gb = Number(raw);
    // Fractions are allowed (a small node, a test); 0 turns the budget off.
    if (!Number.isFinite(gb) || gb < 0 || gb > 1_000_000) throw new ConfigError(`SANDBOXD_NODE_LAYER_CACHE_GB must be a number of GB from 0 (no budget) up, got "${raw}"`);
  }
  return {
    budgetBytes: Math.round(gb * 1024 ** 3),
    maxIdleMs: int(env, 'SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS', 7 * 24, 0, 100 * 365 * 24) * 3_600_000,
    minAgeMs: int(env, 'SANDBOXD_NODE_LAYER_MIN_AGE_SECONDS', 600, 1, 86_400) * 1000,
    explicit: !!env.SANDBOXD_NODE_LAYER_CACHE_GB || !!env.SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS,
  };
}
