import { access, constants } from 'node:fs/promises';

/** Found programs stay cached; a miss is re-checked after this long (the user may install it). */
const MISS_TTL_MS = 2000;
const cache = new Map<string, { path: string | null; at: number }>();

/** Finds an executable in a PATH string, like execvp would. */
export async function which(name: string, pathVar: string | undefined): Promise<string | null> {
  if (name.includes('/')) return (await isExecutable(name)) ? name : null;
  const key = `${pathVar ?? ''}\0${name}`;
  const hit = cache.get(key);
  if (hit && (hit.path !== null || Date.now() - hit.at < MISS_TTL_MS)) return hit.path;
  let found: string | null = null;
  for (const dir of (pathVar ?? '').split(':')) {
    if (!dir) continue;
    const candidate = `${dir}/${name}`;
    if (await isExecutable(candidate)) {
      found = candidate;
      break;
    }
  }
  if (cache.size > 256) cache.clear();
  cache.set(key, { path: found, at: Date.now() });
  return found;
}

/** Forgets a cached location (e.g. exec said it is gone). */
export function forget(name: string): void {
  for (const key of cache.keys()) if (key.endsWith(`\0${name}`)) cache.delete(key);
}

async function isExecutable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}
