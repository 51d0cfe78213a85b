import { posix } from 'node:path';
import { ServiceError } from '../proto.js';

/**
 * A path given by a client, made absolute: relative paths are taken from the workspace. No other
 * confinement is needed, or wanted: the agent runs inside the sandbox, whose root is the sandbox's
 * own filesystem, so `..`, /proc/1/root and symlinks all resolve inside it.
 */
export function resolvePath(input: unknown, workspaceDir: string, field = 'path'): string {
  if (typeof input !== 'string' || input.trim() === '') {
    throw new ServiceError('VALIDATION_ERROR', `${field} is required`, { field });
  }
  if (input.includes('\0')) throw new ServiceError('INVALID_PATH', `${field} contains a NUL byte`, { field });
  if (Buffer.byteLength(input) > 4096) throw new ServiceError('INVALID_PATH', `${field} is longer than 4096 bytes`, { field });
  const abs = input.startsWith('/') ? input : posix.join(workspaceDir, input);
  const normalized = posix.normalize(abs);
  return normalized.length > 1 && normalized.endsWith('/') ? normalized.slice(0, -1) : normalized;
}

/** The `path` query parameter (axios encodes spaces as '+', which URLSearchParams decodes). */
export function queryPath(url: URL, workspaceDir: string, name = 'path'): string {
  return resolvePath(url.searchParams.get(name) ?? undefined, workspaceDir, name);
}
