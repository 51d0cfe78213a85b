import { ensureSystemPackages } from '../runtime/system-packages.js';
import type { FsLayerStore, Log } from './layer-store.js';
import { applyOciLayer, ociLayerId } from './oci-layer.js';

export const MEDIA = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
} as const;

export interface Descriptor {
  mediaType?: string;
  digest: string;
  size?: number;
  platform?: { os?: string; architecture?: string; variant?: string };
  annotations?: Record<string, string>;
}

export interface ImageManifest {
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
}

export interface ImageIndex {
  mediaType?: string;
  manifests: Descriptor[];
}

/** The parts of an image config a sandbox template uses. */
export interface ImageConfig {
  architecture: string;
  os: string;
  env: string[];
  workdir: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
  diffIds: string[];
}

/** The platform images must be for: the host's (only amd64 hosts are supported today). */
export function hostPlatform(): { os: string; architecture: string } {
  const arch = process.arch === 'x64' ? 'amd64' : process.arch === 'arm64' ? 'arm64' : process.arch;
  return { os: 'linux', architecture: arch };
}

export function parseImageConfig(bytes: Buffer): ImageConfig {
  const j = JSON.parse(bytes.toString('utf8')) as {
    architecture?: string;
    os?: string;
    config?: { Env?: string[]; WorkingDir?: string; User?: string; Entrypoint?: string[]; Cmd?: string[] };
    rootfs?: { type?: string; diff_ids?: string[] };
  };
  const diffIds = j.rootfs?.diff_ids ?? [];
  if (j.rootfs?.type !== 'layers' || diffIds.some((d) => !/^sha256:[0-9a-f]{64}$/.test(d))) {
    throw new Error('image config has no valid rootfs.diff_ids');
  }
  return {
    architecture: j.architecture ?? '',
    os: j.os ?? '',
    env: j.config?.Env ?? [],
    workdir: j.config?.WorkingDir || '/',
    user: j.config?.User || undefined,
    entrypoint: j.config?.Entrypoint ?? undefined,
    cmd: j.config?.Cmd ?? undefined,
    diffIds,
  };
}

export function checkPlatform(config: ImageConfig, what: string): void {
  const want = hostPlatform();
  if (config.os !== want.os || config.architecture !== want.architecture) {
    throw new Error(`${what} is for ${config.os}/${config.architecture}; this host runs ${want.os}/${want.architecture}`);
  }
}

/** Picks the host platform's manifest from an index / manifest list. */
export function pickPlatform(index: ImageIndex, what: string): Descriptor {
  const want = hostPlatform();
  const found = index.manifests.find((m) => m.platform?.os === want.os && m.platform?.architecture === want.architecture);
  if (!found) {
    const have = index.manifests.map((m) => `${m.platform?.os}/${m.platform?.architecture}`).join(', ');
    throw new Error(`${what} has no ${want.os}/${want.architecture} image (it has: ${have || 'none'})`);
  }
  return found;
}

/**
 * Turns the layers of an image into layer-store layers (bottom-most first), each converted to
 * overlay form and checked against its diff id. Layers already in the store are shared, not redone.
 * `blobPath(i)` yields the local path of layer i's blob, fetching it if needed.
 */
export async function ensureOciLayers(
  store: FsLayerStore,
  diffIds: string[],
  blobPath: (i: number) => Promise<string>,
  log: Log,
  signal?: AbortSignal,
): Promise<string[]> {
  // Opaque directories need setfattr (Debian package attr).
  await ensureSystemPackages(log, [{ bin: 'setfattr', pkg: 'attr' }]);
  const ids: string[] = [];
  for (const [i, diffId] of diffIds.entries()) {
    const id = ociLayerId(diffId);
    const tag = `layer ${i + 1}/${diffIds.length} ${diffId.slice(7, 19)}`;
    if (await store.has(id)) {
      log(`${tag}: already present`);
    } else {
      const t0 = Date.now();
      await store.ensureLayer(
        id,
        async (tree) => {
          const applied = await applyOciLayer(await blobPath(i), tree, { signal });
          if (applied.diffId !== diffId) throw new Error(`${tag}: content has diff id ${applied.diffId}, the image config says ${diffId}`);
          const { diffId: _d, entries, bytes, ...extra } = applied;
          return { kind: 'oci-layer', sizeBytes: bytes, entries, extra: { diffId, ...extra } };
        },
        log,
        { signal },
      );
      log(`${tag}: unpacked in ${Date.now() - t0} ms`);
    }
    ids.push(id);
  }
  return ids;
}
