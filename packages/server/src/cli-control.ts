import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isErrorCode, ServiceError } from '@sandboxd/protocol';
import type { Config } from './config/index.js';

/** A call of control's API, as `sandboxd` on the operator's host makes it: the answer's JSON, or the error control rendered, thrown again. */
export type ControlCall = <T>(method: string, path: string, body?: unknown, signal?: AbortSignal) => Promise<T>;

/** The longest one call may take: a drain call starts moves for 20 s, and the last may copy a large disk. */
const CALL_TIMEOUT_MS = 30 * 60_000;

/**
 * Control's API for the verbs only control can carry out (it holds the nodes' clients and the
 * layers a drain moves disks through): at `url`, or at this configuration's address (SANDBOXD_HOST
 * and SANDBOXD_PORT, as control listens with the same environment); with the admin key in
 * `keyFile`, or the operator's bootstrap key (SANDBOXD_BOOTSTRAP_API_KEY, or the data directory's
 * api-key, which control wrote at its first start).
 */
export function controlApi(config: Config, o: { url?: string; keyFile?: string } = {}): ControlCall {
  const key = operatorKey(config, o.keyFile);
  const host = config.host === '0.0.0.0' ? '127.0.0.1' : config.host === '::' ? '::1' : config.host;
  const base = (o.url ?? `http://${host.includes(':') ? `[${host}]` : host}:${config.port}`).replace(/\/+$/, '');
  return async <T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> => {
    let res: Response;
    try {
      res = await fetch(`${base}${path}`, {
        method,
        headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.any([AbortSignal.timeout(CALL_TIMEOUT_MS), ...(signal ? [signal] : [])]),
      });
    } catch (err) {
      throw new ServiceError('RUNTIME_ERROR', `control's API at ${base} cannot be reached (--url names it): ${err instanceof Error ? err.message : String(err)}`);
    }
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    if (res.ok) return json as T;
    const e = json as { code?: unknown; message?: unknown } | undefined;
    const message = `control answered ${method} ${path} with ${res.status}: ${typeof e?.message === 'string' ? e.message : text.slice(0, 300)}`;
    throw new ServiceError(isErrorCode(e?.code) ? e.code : 'RUNTIME_ERROR', message);
  };
}

function operatorKey(config: Config, keyFile: string | undefined): string {
  const file = keyFile ?? join(config.dataDir, 'api-key');
  const fromFile = keyFile !== undefined || (!config.bootstrapApiKey && existsSync(file));
  if (!fromFile && config.bootstrapApiKey) return config.bootstrapApiKey;
  if (!fromFile) {
    throw new ServiceError('VALIDATION_ERROR', `this needs an admin key of the operator's organization: --api-key-file FILE, or SANDBOXD_BOOTSTRAP_API_KEY as control has it (no ${file} here either)`);
  }
  try {
    return readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new ServiceError('VALIDATION_ERROR', `the admin key cannot be read: ${(err as Error).message}`);
  }
}
