import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describeUrl, isPostgresUrl } from '../store/postgres-url.js';
import { ConfigError } from './parse.js';

export function databaseUrlFrom(env: NodeJS.ProcessEnv): string | undefined {
  const raw = env.SANDBOXD_DATABASE_URL?.trim();
  if (!raw) return undefined;
  if (!isPostgresUrl(raw)) {
    throw new ConfigError(`SANDBOXD_DATABASE_URL must be a postgres:// or postgresql:// URL (postgresql://user:password@host:5432/database), got ${describeUrl(raw)}`);
  }
  return raw;
}

const here = dirname(fileURLToPath(import.meta.url));
/** packages/server/dist/config → repository root. */
export const REPO_ROOT = resolve(here, '../../../..');

/** Where the service keeps its state unless SANDBOXD_DATA_DIR says otherwise. */
export const DEFAULT_DATA_DIR = '/var/lib/sandboxd';

/** The service's layer directory as `env` configures it (the test suite takes built-in layers from there). */
export function serviceLayersDir(env: NodeJS.ProcessEnv = process.env): string {
  return resolve(env.SANDBOXD_LAYERS_DIR || join(resolve(env.SANDBOXD_DATA_DIR || DEFAULT_DATA_DIR), 'layers'));
}
