import type { Config } from '../config/index.js';
import { LocalNode, type LayerUse, type LocalNodeOptions } from '../node/local-node.js';
import type { LayerRef, Runtime } from '../runtime/types.js';
import type { Log } from './shared.js';

/**
 * This machine as a node, as every role that runs sandboxes has it (the all-in-one daemon and
 * `sandboxd node`): its runtime with the warm pool the config sizes (SANDBOXD_WARM_POOL_*,
 * SANDBOXD_BOOT_CONCURRENCY), and on a node of a cluster, its layer cache.
 */
export function localNode(
  config: Config,
  id: string,
  runtime: Runtime,
  log: Log,
  layers?: { resolve(refs: LayerRef[]): Promise<string[]>; use: LayerUse; ids: () => Promise<string[]> },
  claimDisk?: LocalNodeOptions['claimDisk'],
): LocalNode {
  return new LocalNode({
    id,
    runtime,
    pool: {
      minPerKey: config.warmPool.minPerKey,
      maxMemoryMb: config.warmPool.maxMemoryMb,
      reserveSandboxes: config.warmPool.reserve,
      horizonSeconds: config.warmPool.horizonSeconds,
      shrinkAfterMs: config.warmPool.shrinkAfterSeconds * 1000,
      bootConcurrency: config.warmPool.bootConcurrency,
      debug: log.debug,
    },
    agentReadyTimeoutMs: config.agentReadyTimeoutMs,
    ...(layers ? { layers: { resolve: (refs) => layers.resolve(refs) }, layerUse: layers.use, layerIds: layers.ids } : {}),
    ...(claimDisk ? { claimDisk } : {}),
    log,
  });
}
