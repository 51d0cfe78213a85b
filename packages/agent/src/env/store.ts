import { mkdirSync, readFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { logLine } from '../log.js';
import { describeCause, ServiceError } from '../proto.js';

/**
 * The sandbox's env set (GET/PUT/PATCH /env, DELETE /env/{key}): applied to every later execution
 * and command, above the agent's own env and below per-request env. It lives in a file inside the
 * sandbox's own filesystem, so it survives agent restarts and stop/start. The create-time env_vars
 * seed it once, the first time the agent ever starts in this sandbox. The file names the sandbox
 * that wrote it: one that came with the files of another (a snapshot, a fork, a template made of
 * a snapshot) is not this sandbox's env set, and the create's seeds it instead.
 */
export class EnvStore {
  private vars: Record<string, string>;
  private writing: Promise<void> = Promise.resolve();
  /** What the last write queued, and its outcome (undefined once a write failed: the next one writes). */
  private queued: { snapshot: string; done: Promise<void> } | undefined;

  constructor(
    private readonly file: string,
    createEnv: Record<string, string>,
    private readonly sandboxId?: string,
  ) {
    const state = readState(file);
    const foreign = state !== null && state.sandbox !== undefined && sandboxId !== undefined && state.sandbox !== sandboxId;
    if (foreign) logLine(`${file} was written in sandbox ${state.sandbox}: this sandbox's env set is its create's`);
    const loaded = foreign ? null : (state?.vars ?? null);
    this.vars = loaded ?? { ...createEnv };
    // (A write that fails is said; the next change writes again.)
    if (loaded === null) this.persist().catch((err: unknown) => logLine(`${file}: ${describeCause(err)}`));
  }

  all(): Record<string, string> {
    return { ...this.vars };
  }

  async replace(vars: Record<string, string>): Promise<Record<string, string>> {
    this.vars = { ...vars };
    await this.persist();
    return this.all();
  }

  async merge(vars: Record<string, string>): Promise<Record<string, string>> {
    this.vars = { ...this.vars, ...vars };
    await this.persist();
    return this.all();
  }

  /** Returns false when the key was not set. */
  async delete(key: string): Promise<boolean> {
    if (!Object.prototype.hasOwnProperty.call(this.vars, key)) return false;
    const next = { ...this.vars };
    delete next[key];
    this.vars = next;
    await this.persist();
    return true;
  }

  /**
   * Writes are serialised and atomic (temp file + rename), so a crash never leaves half a file. A
   * set the same as the last one written (or being written) is not written again, only waited for:
   * a create's PUT of its env on a sandbox fresh from the warm pool is most often of the empty set
   * the agent wrote when it started, and it is on the create's path.
   */
  private persist(): Promise<void> {
    const snapshot = JSON.stringify({ version: 1, ...(this.sandboxId ? { sandbox: this.sandboxId } : {}), env_vars: this.vars });
    if (this.queued?.snapshot === snapshot) return this.queued.done;
    const tmp = `${this.file}.tmp`;
    const queued = {
      snapshot,
      done: this.writing.then(async () => {
        try {
          mkdirSync(dirname(this.file), { recursive: true });
          await writeFile(tmp, snapshot, { mode: 0o600 });
          await rename(tmp, this.file);
        } catch (err) {
          if (this.queued === queued) this.queued = undefined;
          throw new ServiceError('INTERNAL_ERROR', 'could not save the env set').withDetail(describeCause(err));
        }
      }),
    };
    this.queued = queued;
    this.writing = queued.done.catch(() => undefined);
    return queued.done;
  }
}

function readState(file: string): { vars: Record<string, string>; sandbox?: string } | null {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return null;
  }
  try {
    const parsed = JSON.parse(text) as { env_vars?: unknown; sandbox?: unknown };
    const out: Record<string, string> = {};
    if (parsed.env_vars && typeof parsed.env_vars === 'object') {
      for (const [k, v] of Object.entries(parsed.env_vars)) if (typeof v === 'string') out[k] = v;
    }
    return { vars: out, ...(typeof parsed.sandbox === 'string' ? { sandbox: parsed.sandbox } : {}) };
  } catch {
    logLine(`${file} is corrupt; starting with an empty env set`);
    return { vars: {} };
  }
}

/** Precedence: process env < env set < per-request env. */
export function effectiveEnv(
  base: Record<string, string>,
  envSet: Record<string, string>,
  request: Record<string, string> | undefined,
): Record<string, string> {
  return request ? { ...base, ...envSet, ...request } : { ...base, ...envSet };
}

/** Names a process environment can carry: non-empty, no '=' and no NUL. */
export function validateEnvVars(value: unknown, field: string): Record<string, string> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new ServiceError('VALIDATION_ERROR', `${field} must be an object of strings`, { field });
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (k === '' || k.includes('=') || k.includes('\0')) {
      throw new ServiceError('VALIDATION_ERROR', `${field}: invalid variable name ${JSON.stringify(k)}`, { field });
    }
    if (typeof v === 'number' || typeof v === 'boolean') {
      out[k] = String(v);
      continue;
    }
    if (typeof v !== 'string') {
      throw new ServiceError('VALIDATION_ERROR', `${field}.${k} must be a string`, { field });
    }
    if (v.includes('\0')) throw new ServiceError('VALIDATION_ERROR', `${field}.${k} contains a NUL byte`, { field });
    out[k] = v;
  }
  return out;
}
