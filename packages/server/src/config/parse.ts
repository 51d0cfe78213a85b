import { normalizeCidr } from '../runtime/net.js';

export class ConfigError extends Error {}

export function int(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < min || v > max) throw new ConfigError(`${name} must be an integer in [${min}, ${max}], got "${raw}"`);
  return v;
}

/** A ratio of at least 1 (overcommit). */
export function ratio(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 1 || v > 1000) throw new ConfigError(`${name} must be a number from 1 to 1000, got "${raw}"`);
  return v;
}

export function bool(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === '') return fallback;
  if (['1', 'true', 'yes', 'on'].includes(raw)) return true;
  if (['0', 'false', 'no', 'off'].includes(raw)) return false;
  throw new ConfigError(`${name} must be true or false, got "${env[name]}"`);
}

export function cidrList(env: NodeJS.ProcessEnv, name: string): string[] {
  const items = (env[name] ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  return items.map((item) => {
    try {
      return normalizeCidr(item);
    } catch {
      throw new ConfigError(`${name} must list IPv4 addresses or CIDRs separated by commas, got "${item}"`);
    }
  });
}
