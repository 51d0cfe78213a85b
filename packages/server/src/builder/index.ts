import { join } from 'node:path';
import type { BaseImageResolver } from '../images/base-images.js';
import type { FsLayerStore } from '../images/layer-store.js';
import type { Runtime } from '../runtime/types.js';
import { BuildCache } from './cache.js';
import { cleanupStaleInputs } from './inputs.js';
import { TemplateBuilder } from './template-builder.js';

export type * from './types.js';

export interface BuilderOptions {
  dataDir: string;
  /** Runs each step in a throwaway container. */
  runtime: Pick<Runtime, 'runStep'>;
  layers: FsLayerStore;
  bases: BaseImageResolver;
  stepTimeoutMs?: number;
}

/**
 * The template builder, wired over the data directory:
 *   <dataDir>/build-cache/  step cache key → layer id
 *   <dataDir>/build-inputs/ COPY inputs staged for a running build step
 */
export function openBuilder(o: BuilderOptions) {
  const inputsDir = join(o.dataDir, 'build-inputs');
  const cache = new BuildCache(join(o.dataDir, 'build-cache'));
  return {
    /** The BuildEngine for TemplateBuildService. */
    engine: new TemplateBuilder({ runtime: o.runtime, layers: o.layers, bases: o.bases, cache, inputsDir, stepTimeoutMs: o.stepTimeoutMs }),
    /** Removes the inputs of builds that died with a previous process. */
    cleanupStale: () => cleanupStaleInputs(inputsDir),
    /** Removes cache entries whose layer was collected. */
    pruneCache: () => cache.prune((id) => o.layers.has(id)),
  };
}
