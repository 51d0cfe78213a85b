import { availableParallelism, hostname, totalmem } from 'node:os';
import type { Config } from '../config/index.js';
import type { Logger } from '../logging.js';
import { FixedNodes } from '../placement/node-set.js';
import { Placement } from '../placement/placement.js';
import { runControlPlane } from './control-plane.js';
import { HostVolumes } from '../runtime/volumes.js';
import { localNode } from './local-node.js';
import { diskGbOf, openRuntime, prepareMachine } from './machine.js';
import { openImages, openStore, type Log } from './shared.js';

/**
 * `sandboxd serve`: the whole service on this machine, a cluster of one. Its one node is this
 * machine (LocalNode: the runtime, its warm pool), in process; the control plane over it is the
 * same as a cluster's control (roles/control-plane.ts); the store is SQLite in the data directory
 * (or one PostgreSQL database of its own).
 */
export async function runAllInOne(config: Config, log: Log, logger: Logger): Promise<void> {
  await prepareMachine(config, log);
  log(`starting sandboxd ${config.version}; data directory ${config.dataDir}`);
  log('default limits of every organization (null: none; sandboxd orgs limits overrides them)', config.limits);
  const store = await openStore(config, log);
  const images = openImages(config, log);
  await images.cleanupStale();
  const runtime = await openRuntime(config, log);
  // Its rows name it by the host name, as they always did.
  const node = localNode(config, hostname(), runtime, log);
  const placement = new Placement({ nodes: new FixedNodes([node]), usage: () => store.sandboxes.usageByNode(), log });
  await placement.start();
  // The admin API shows this machine as the node it is, served in this process.
  const inProcessNode = {
    id: node.id,
    capacity: { vcpu: availableParallelism(), memoryMb: Math.floor(totalmem() / 1024 / 1024), diskGb: diskGbOf(config.dataDir) },
    list: () => node.list(),
    readyByKey: () => node.readyByKey(),
  };
  await runControlPlane({ config, log, logger, store, images, placement, buildRuntime: runtime, ownsBuildRuntime: false, replicated: false, inProcessNode, volumeHost: new HostVolumes(config.dataDir) });
}
