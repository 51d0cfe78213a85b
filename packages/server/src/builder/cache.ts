import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { canonicalJson, sha256Hex } from '../images/layer-store.js';
import type { CopyInput } from './types.js';
import type { BuildStep } from './types.js';

/**
 * Bump when the way a step runs changes (scripts, environment, ids): every step then rebuilds.
 * 2: steps run as CANONICAL_ID_OFFSET 900000000.
 * 3: key chains are per organization (orgRootKey).
 */
export const STEP_BUILDER_VERSION = 'steps/3';

/**
 * The root of an organization's key chain: the base image's key, scoped to the organization. Every
 * step key hashes its parent's, so every cache entry and every step layer (named by its key) is
 * the organization's own: a "(cached)" step can never reveal that another organization ran the
 * same step, and a skipCache rebuild repoints only the organization's own entries. The base
 * image's layers stay shared; they come from public sources, not from a tenant.
 */
export function orgRootKey(baseKey: string, orgId: string): string {
  if (!orgId) throw new Error('a build needs the organization it is for');
  return sha256Hex(`${STEP_BUILDER_VERSION}\norg\n${orgId}\n${baseKey}`);
}

/**
 * Cache key of a step: its parent's key, the step itself (canonical JSON) and the content hashes
 * of the files it copies. env and workdir steps have keys too (they change what later steps do)
 * but make no layer.
 */
export function stepKey(parentKey: string, step: BuildStep, copies: CopyInput[] = []): string {
  const files = copies.map((c) => ({ kind: c.kind, name: c.name, sha256: c.sha256 }));
  return sha256Hex(`${STEP_BUILDER_VERSION}\n${parentKey}\n${canonicalJson(step)}\n${canonicalJson(files)}`);
}

/**
 * Step cache key → id of the layer that step produced. Usually the id is the key itself; a
 * skipCache build makes fresh layers under new ids (layers in use by sandboxes are never replaced
 * in place) and points the key at them, so later builds reuse the newest result.
 */
export class BuildCache {
  constructor(readonly root: string) {}

  async get(key: string): Promise<string | undefined> {
    try {
      const id = (await readFile(this.file(key), 'utf8')).trim();
      return /^[0-9a-f]{64}$/.test(id) ? id : undefined;
    } catch {
      return undefined;
    }
  }

  async set(key: string, layerId: string): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    const tmp = `${this.file(key)}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    await writeFile(tmp, `${layerId}\n`, { mode: 0o600 });
    await rename(tmp, this.file(key));
  }

  async remove(key: string): Promise<void> {
    await rm(this.file(key), { force: true });
  }

  /**
   * Removes the entries whose layer is gone (collected: a failed build's, a rebuilt template's):
   * the step is built again when asked. Returns how many went.
   */
  async prune(layerExists: (id: string) => Promise<boolean>): Promise<number> {
    let n = 0;
    for (const key of await readdir(this.root).catch(() => [] as string[])) {
      if (!/^[0-9a-f]{64}$/.test(key)) continue;
      const id = await this.get(key);
      if (id !== undefined && (await layerExists(id))) continue;
      await this.remove(key);
      n++;
    }
    return n;
  }

  private file(key: string): string {
    if (!/^[0-9a-f]{64}$/.test(key)) throw new Error(`invalid cache key ${key}`);
    return join(this.root, key);
  }
}
