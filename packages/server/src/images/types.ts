/**
 * Content-addressed, read-only layers. A layer is a directory tree in canonical ownership (ids shifted
 * by CANONICAL_ID_OFFSET, so that root inside a sandbox is never root on the host) usable as an
 * overlayfs lowerdir as-is (deletions are overlay whiteouts).
 */

/** A root filesystem bootstrapped from Debian's packages with mmdebstrap. */
export interface DebianRootfsRecipe {
  kind: 'debian-rootfs';
  /** Debian suite, e.g. 'bookworm'. */
  suite: string;
  variant: 'minbase';
  /** Extra packages (--include). */
  packages: string[];
}

export interface LayerInfo {
  /** sha256 hex: the cache key of what built it. */
  id: string;
  /** Absolute host path of the layer's tree. */
  path: string;
}

export interface LayerStore {
  /** Directory holding layer `id` (whether or not it exists). */
  path(id: string): string;
  has(id: string): Promise<boolean>;
  /**
   * Returns the layer built from `recipe`, building it first when it is not in the store (the key
   * is a hash of the recipe). Concurrent callers for one recipe share one build. A failed or
   * interrupted build leaves nothing that looks like a finished layer.
   */
  ensureRootfs(recipe: DebianRootfsRecipe, log: (line: string) => void, opts?: { signal?: AbortSignal; aptCacheDir?: string }): Promise<LayerInfo>;
  /** Removes a layer (caller guarantees nothing references it). */
  remove(id: string): Promise<void>;
  /** Ids of every finished layer. */
  list(): Promise<string[]>;
}
