import { ServiceError } from '@sandboxd/protocol';

import { ALLOWED_BASE_IMAGES } from '../images/refs.js';

/** The base images a `from` step may name (service-spec.md). */
export const ALLOWED_IMAGES = ALLOWED_BASE_IMAGES;

import type { BuildStep } from '../builder/types.js';

export interface BuildRequest {
  alias: string;
  cpu: number;
  memoryMb: number;
  diskGb: number;
  steps: BuildStep[];
  skipCache: boolean;
  update: boolean;
}

/** Resources of a build that does not name them (the spec's limits bound what it may name). */
export const BUILD_DEFAULTS = { cpu: 2, memoryMb: 2048, diskGb: 10 } as const;

const invalid = (message: string) => new ServiceError('INVALID_TEMPLATE_DEFINITION', message);

function str(v: unknown, field: string, opts: { max?: number; allowEmpty?: boolean } = {}): string {
  if (typeof v !== 'string') throw invalid(`${field} must be a string`);
  if (!opts.allowEmpty && v.trim() === '') throw invalid(`${field} must not be empty`);
  if (v.length > (opts.max ?? 100_000)) throw invalid(`${field} is longer than ${opts.max ?? 100_000} characters`);
  // Every string of a step becomes a command line, a path or an environment value: C strings.
  if (v.includes('\0')) throw invalid(`${field} contains a NUL byte`);
  return v;
}

function intIn(v: unknown, field: string, fallback: number, min: number, max: number): number {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw invalid(`${field} must be an integer`);
  if (v < min || v > max) throw invalid(`${field} must be between ${min} and ${max}, got ${v}`);
  return v;
}

const ALIAS_RE = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const ENV_KEY_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const PKG_RE = /^[a-z0-9][a-z0-9+.-]*(=[A-Za-z0-9.+:~-]+)?$/;

function absPath(v: unknown, field: string): string {
  const p = str(v, field, { max: 4096 });
  if (!p.startsWith('/')) throw invalid(`${field} must be an absolute path, got "${p}"`);
  if (p.includes('\0')) throw invalid(`${field} contains a NUL byte`);
  return p;
}

function normalizeStep(raw: unknown, i: number): BuildStep {
  const at = `steps[${i}]`;
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw invalid(`${at} must be an object`);
  const s = raw as Record<string, unknown>;
  const type = typeof s.type === 'string' ? s.type : undefined;
  const args = Array.isArray(s.args) ? s.args : undefined;
  switch (type) {
    case 'from': {
      const image = str(s.image, `${at}.image`, { max: 200 });
      return { type: 'from', image };
    }
    case 'apt': {
      if (!Array.isArray(s.packages) || s.packages.length === 0) throw invalid(`${at}.packages must be a non-empty array of package names`);
      const packages = s.packages.map((p, j) => {
        const name = str(p, `${at}.packages[${j}]`, { max: 200 });
        if (!PKG_RE.test(name)) throw invalid(`${at}.packages[${j}] "${name}" is not a valid Debian package name`);
        return name;
      });
      return { type: 'apt', packages };
    }
    case 'run':
      return { type: 'run', command: str(s.command, `${at}.command`) };
    case 'RUN': {
      if (!args || args.length === 0) throw invalid(`${at}.args must hold the command`);
      return { type: 'run', command: args.map((a, j) => str(a, `${at}.args[${j}]`)).join(' ') };
    }
    case 'copy': {
      const dest = absPath(s.dest, `${at}.dest`);
      const fileIds: string[] = [];
      const srcPaths: string[] = [];
      if (s.file_id !== undefined) fileIds.push(str(s.file_id, `${at}.file_id`, { max: 200 }));
      if (s.file_ids !== undefined) {
        if (!Array.isArray(s.file_ids) || s.file_ids.length === 0) throw invalid(`${at}.file_ids must be a non-empty array`);
        s.file_ids.forEach((f, j) => fileIds.push(str(f, `${at}.file_ids[${j}]`, { max: 200 })));
      }
      if (s.src !== undefined) {
        const list = Array.isArray(s.src) ? s.src : [s.src];
        if (list.length === 0) throw invalid(`${at}.src must not be empty`);
        list.forEach((p, j) => srcPaths.push(str(p, `${at}.src[${j}]`, { max: 4096 })));
      }
      if (fileIds.length === 0 && srcPaths.length === 0) throw invalid(`${at} (copy) needs src, file_id or file_ids`);
      return { type: 'copy', dest, fileIds, srcPaths, filesHash: null, owner: null, permissions: null };
    }
    case 'COPY': {
      if (!args || args.length < 2) throw invalid(`${at}.args must be ["src1,src2", "/dest"]`);
      const srcPaths = str(args[0], `${at}.args[0]`).split(',').map((x) => x.trim()).filter(Boolean);
      const dest = absPath(args[1], `${at}.args[1]`);
      const filesHash = str(s.filesHash, `${at}.filesHash`, { max: 200 });
      const owner = s.owner === undefined ? null : str(s.owner, `${at}.owner`, { max: 100 });
      const permissions = s.permissions === undefined ? null : str(s.permissions, `${at}.permissions`, { max: 10 });
      return { type: 'copy', dest, fileIds: [], srcPaths, filesHash, owner, permissions };
    }
    case 'env':
    case 'ENV': {
      const key = type === 'ENV' ? args?.[0] : s.key;
      const value = type === 'ENV' ? args?.[1] : s.value;
      const k = str(key, `${at}.key`, { max: 200 });
      if (!ENV_KEY_RE.test(k)) throw invalid(`${at}.key "${k}" is not a valid variable name`);
      return { type: 'env', key: k, value: str(value, `${at}.value`, { allowEmpty: true, max: 32_768 }) };
    }
    case 'workdir':
    case 'WORKDIR':
      return { type: 'workdir', path: absPath(type === 'WORKDIR' ? args?.[0] : s.path, `${at}.path`) };
    default:
      throw invalid(`${at}.type must be one of from, apt, run, copy, env, workdir (got ${JSON.stringify(s.type)})`);
  }
}

/**
 * Validates a build request of either shape (api-decisions.md §5) into one normalized form;
 * `defaults` fill the resources it does not name.
 */
export function normalizeBuildRequest(body: unknown, defaults: { cpu: number; memoryMb: number; diskGb: number } = BUILD_DEFAULTS): BuildRequest {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw invalid('the request body must be a JSON object');
  const b = body as Record<string, unknown>;
  const aliasRaw = b.alias ?? b.name;
  if (aliasRaw === undefined) throw invalid('alias is required (the template name)');
  const alias = str(aliasRaw, 'alias', { max: 63 });
  if (!ALIAS_RE.test(alias)) throw invalid(`alias "${alias}" must be 1-63 lowercase letters, digits, ".", "_" or "-", starting with a letter or digit`);
  const cpu = intIn(b.cpu, 'cpu', defaults.cpu, 1, 64);
  const memoryMb = intIn(b.memory, 'memory', defaults.memoryMb, 128, 1_048_576);
  const diskGb = intIn(b.diskGB, 'diskGB', defaults.diskGb, 1, 10_000);
  if (b.steps === undefined && b.from_image === undefined) throw invalid('steps is required');
  if (b.steps !== undefined && !Array.isArray(b.steps)) throw invalid('steps must be an array');
  const rawSteps = (b.steps as unknown[] | undefined) ?? [];
  if (rawSteps.length > 200) throw invalid('at most 200 steps');
  const steps = rawSteps.map(normalizeStep);
  if (b.from_image !== undefined) {
    if (steps.some((s) => s.type === 'from')) throw invalid('give the base image either as from_image or as a from step, not both');
    steps.unshift({ type: 'from', image: str(b.from_image, 'from_image', { max: 200 }) });
  }
  if (steps.length === 0 || steps[0]!.type !== 'from') throw invalid('the first step must be a from step');
  steps.forEach((s, i) => {
    if (s.type === 'from' && i > 0) throw invalid(`steps[${i}]: only the first step may be a from step`);
  });
  const from = steps[0] as { type: 'from'; image: string };
  if (!(ALLOWED_IMAGES as readonly string[]).includes(from.image)) {
    throw invalid(`base image "${from.image}" is not allowed; allowed: ${ALLOWED_IMAGES.join(', ')}`);
  }
  if (b.skipCache !== undefined && typeof b.skipCache !== 'boolean') throw invalid('skipCache must be a boolean');
  if (b.update !== undefined && typeof b.update !== 'boolean') throw invalid('update must be a boolean');
  return { alias, cpu, memoryMb, diskGb, steps, skipCache: b.skipCache === true, update: b.update === true };
}
