import { join } from 'node:path';
import { BaseImageResolver } from './base-images.js';
import { FsBlobStore } from './blob-store.js';
import { FsImageStore, type ImageRecord } from './image-store.js';
import { FsLayerStore, type Log } from './layer-store.js';
import { importImageArchive } from './oci-archive.js';
import { RegistryClient, pullImage } from './registry.js';

export interface ImageServicesOptions {
  dataDir: string;
  layersDir: string;
  /** Registry for `from` images Debian cannot provide; null/undefined: no pulls. */
  registryUrl?: string | null;
  registryUsername?: string;
  registryPassword?: string;
  /** Name of the setting that configures the registry, quoted in "how to provide it" errors. */
  registryHint?: string;
  log?: Log;
}

/**
 * The image side of the data directory, wired together:
 *   <layersDir>/            layers (FsLayerStore)
 *   <dataDir>/blobs/        uploads and registry blobs (FsBlobStore)
 *   <dataDir>/images/       imported / pulled image references (FsImageStore)
 *   <dataDir>/tmp/          scratch for archive imports
 */
export function openImageServices(o: ImageServicesOptions) {
  const log = o.log ?? (() => undefined);
  const layers = new FsLayerStore(o.layersDir, { log });
  const blobs = new FsBlobStore(join(o.dataDir, 'blobs'));
  const images = new FsImageStore(join(o.dataDir, 'images'));
  const registry = o.registryUrl
    ? new RegistryClient({ url: o.registryUrl, username: o.registryUsername, password: o.registryPassword })
    : null;
  const bases = new BaseImageResolver({ layers, images, blobs, registry, registryHint: o.registryHint });
  const tmpDir = join(o.dataDir, 'tmp');
  return {
    layers,
    blobs,
    images,
    registry,
    bases,
    /** `sandboxd images import REF FILE` (REF optional: the archive's own tag). */
    importArchive: (file: string, ref: string | undefined, l: Log = log, signal?: AbortSignal): Promise<ImageRecord> =>
      importImageArchive(file, ref, { layers, images, tmpDir, log: l, signal }),
    /** `sandboxd images pull REF`. */
    pull: (ref: string, l: Log = log, signal?: AbortSignal): Promise<ImageRecord> => {
      if (!registry) throw new Error('no image registry is configured');
      return pullImage(ref, { registry, layers, images, blobs, log: l, signal });
    },
    /** Removes leftovers of imports and uploads that died with a previous process. */
    cleanupStale: async () => {
      await layers.cleanupStale();
      await blobs.cleanupStale();
    },
  };
}

export type ImageServices = ReturnType<typeof openImageServices>;
