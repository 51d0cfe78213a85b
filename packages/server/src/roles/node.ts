import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { availableParallelism, totalmem } from 'node:os';
import type { Config } from '../config/index.js';
import { FsLayerStore } from '../images/layer-store.js';
import { LayerFetcher } from '../images/layer-fetch.js';
import { LayerCache } from '../node/layer-cache.js';
import { NodeMembership, storeRegistry, type NodeRegistry } from '../node/membership.js';
import { nodeApi } from '../node/node-api.js';
import { OrphanCollector } from '../node/orphans.js';
import { RegistryClient } from '../node/registry-client.js';
import { ClusterVerifier } from '../runtime/cluster-auth.js';
import { readDiskSpace } from '../runtime/disk-space.js';
import { DiskRoom } from '../services/disk-room.js';
import type { Store } from '../store/types/index.js';
import { localNode } from './local-node.js';
import { diskGbOf, openRuntime, prepareMachine } from './machine.js';
import { closeStore, openStore, type Log } from './shared.js';

/**
 * `sandboxd node`: a machine of a cluster that hosts sandboxes. It runs this machine as a node
 * (LocalNode: its runtime, warm pool and layer cache) and serves it to control over the node API
 * (node/node-api.ts), taking only calls control signed for it, checked with the cluster's public
 * key: a node holds nothing that signs for control, so one taken over cannot drive the others. Its
 * sandboxes keep running when it stops.
 */

/** How long a node that stops gives the calls under way on its API before their connections are cut. */
const NODE_API_CLOSE_GRACE_MS = 3000;

export async function runNode(config: Config, log: Log): Promise<{ close: () => Promise<void> }> {
  if (config.node.signingKey) {
    throw new Error(
      "sandboxd node must not hold the cluster's signing key (SANDBOXD_CLUSTER_SIGNING_KEY_FILE is control's alone): a node needs the public key only, SANDBOXD_CLUSTER_VERIFY_KEY_FILE (cluster-verify.pem of `sandboxd cluster keygen`)",
    );
  }
  if (!config.node.verifyKey) {
    throw new Error('sandboxd node needs the public key of its cluster (the pair of the private key control signs with): set SANDBOXD_CLUSTER_VERIFY_KEY_FILE (cluster-verify.pem of `sandboxd cluster keygen`) or SANDBOXD_CLUSTER_VERIFY_KEY (its PEM)');
  }
  await prepareMachine(config, log);
  log(`starting sandboxd ${config.version} as node ${config.node.id}; data directory ${config.dataDir}`);
  const runtime = await openRuntime(config, log);
  // Its own layers directory, a cache: what it lacks is fetched from control on first use; what no
  // sandbox here uses goes when it is over its budget or idle too long (node/layer-cache.ts).
  const layerStore = new FsLayerStore(config.layersDir, { log });
  await layerStore.cleanupStale();
  // A layers directory outside the data directory may be shared (with control, another daemon):
  // it holds layers this node knows nothing about, so it is evicted from only when asked outright.
  const cache = config.nodeLayerCache;
  const evicts = config.layersDir.startsWith(`${config.dataDir}/`) || cache.explicit;
  if (evicts) log(`layer cache: keeps ${cache.budgetBytes ? `${(cache.budgetBytes / 1024 ** 3).toFixed(1)} GB of layers` : 'layers without a budget'}, ${cache.maxIdleMs ? `evicts a layer unused for ${cache.maxIdleMs / 3_600_000} h` : 'with no idle limit'}; never one in use or used in the last ${cache.minAgeMs / 1000} s`);
  else log(`layer cache: off, ${config.layersDir} lies outside the data directory (set SANDBOXD_NODE_LAYER_CACHE_GB or SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS to evict from it all the same)`);
  const layerCache = new LayerCache({
    store: layerStore,
    recordsDir: join(config.dataDir, 'layer-use'),
    sandboxes: () => runtime.list(),
    budgetBytes: evicts ? cache.budgetBytes : 0,
    maxIdleMs: evicts ? cache.maxIdleMs : 0,
    minAgeMs: cache.minAgeMs,
    log,
  });
  await layerCache.start();
  const fetcher = new LayerFetcher({ store: layerStore, maxBytes: config.layerTransfer.maxBytes, timeoutMs: config.layerTransfer.timeoutMs, ca: config.node.clusterCa ?? undefined, onFetched: () => layerCache.nudge(), log });
  // The warm pool is sized as the all-in-one daemon's is, from the asks of every control replica.
  // The disks this node makes are admitted against its own data filesystem's free space (as the
  // all-in-one's are: services/disk-room.ts), less what the disks it holds for someone may still grow by.
  const room = config.disk.admission
    ? new DiskRoom({ name: `node ${config.node.id}'s data filesystem`, reserve: config.disk.reserve, read: async () => readDiskSpace(config.dataDir, await node.ownedIds(), config.disk.overcommit) })
    : undefined;
  const claimDisk = room ? (bytes: number, what: string) => room.claim(Math.ceil(bytes / config.disk.overcommit), what) : undefined;
  const node = localNode(config, config.node.id, runtime, log, { resolve: (refs) => fetcher.resolve(refs), use: layerCache, ids: () => layerStore.list() }, claimDisk);
  let orphans: OrphanCollector | undefined;
  // Snapshots' copies on their way to control: what a crash left there is of no use to anyone.
  const exportsDir = join(config.dataDir, 'exports');
  await rm(exportsDir, { recursive: true, force: true });
  const app = nodeApi({
    node,
    auth: new ClusterVerifier(config.node.verifyKey),
    log,
    byReference: true,
    exportsDir,
    ...(config.node.tls ? { https: config.node.tls } : {}),
    // What this node fetches at most is what it sends at most (control holds the same limit).
    exportMaxBytes: config.layerTransfer.maxBytes,
    orphans: { claim: (owner, ids, ttlMs) => orphans?.claim(owner, ids, ttlMs), handedOut: (id) => orphans?.handedOut(id), forget: (id) => orphans?.forget(id) },
  });
  await app.listen({ host: config.node.listen.host, port: config.node.listen.port });
  log(`node ${config.node.id} serves its runtime at ${config.node.url} (listening on ${config.node.listen.host}:${config.node.listen.port})`);
  // It joins the registry, which control places sandboxes from: through control with its registry
  // credential (no database credentials on the node), or in the cluster's database itself.
  let membership: NodeMembership | undefined;
  let store: Store | undefined;
  let registry: NodeRegistry | undefined;
  if (config.node.credential) {
    if (config.node.controlUrls.length === 0) throw new Error('a node with a registry credential needs SANDBOXD_CONTROL_URL: where it reaches control (the replicas\' service, or a comma-separated list of replicas)');
    if (config.databaseUrl) log('SANDBOXD_NODE_CREDENTIAL_FILE is set: this node registers through control, and does not use SANDBOXD_DATABASE_URL');
    registry = new RegistryClient({ controlUrls: config.node.controlUrls, credential: config.node.credential, credentialFile: config.node.credentialFile ?? undefined, ca: config.node.clusterCa ?? undefined, log });
    log(`node ${config.node.id} registers through control at ${config.node.controlUrls.join(', ')}`);
  } else if (config.databaseUrl) {
    store = await openStore(config, log);
    registry = storeRegistry(store);
  }
  let closing: Promise<void> | undefined;
  if (registry) {
    const reg = registry;
    membership = new NodeMembership({
      registry: reg,
      node,
      id: config.node.id,
      url: config.node.url,
      capacity: {
        vcpu: availableParallelism(),
        memoryMb: Math.floor(totalmem() / 1024 / 1024),
        diskGb: diskGbOf(config.dataDir),
        maxSandboxes: config.node.maxSandboxes,
      },
      leaseMs: config.node.leaseSeconds * 1000,
      layers: () => layerStore.list(),
      warm: () => node.readyByKey(),
      // Counted once the collector runs (after registration).
      orphans: () => orphans?.unownedCount(),
      // A draining node's sandboxes are moved away: its pool holds nothing ready for creates that no longer come.
      onStatus: (status) => node.holdWarm(status !== 'draining'),
      log,
    });
    // What no control replica owns (one died mid-create, or with its warm pool) goes after a grace.
    const collector = new OrphanCollector({ nodeId: config.node.id, node, liveIds: () => reg.liveIds(config.node.id), deletedIds: reg.deletedIds ? (ids) => reg.deletedIds!(config.node.id, ids) : undefined, graceMs: config.node.orphanGraceSeconds * 1000, handedGraceMs: Math.min(2 * config.node.claimSeconds * 1000, config.node.orphanGraceSeconds * 1000), held: () => node.held(), log });
    if (store) {
      await membership.start();
      orphans = collector;
      orphans.start();
    } else {
      // Through control, which may start after this node: registered once it answers.
      const m = membership;
      void m.startWhenReachable(2000).then((registered) => {
        if (!registered || closing) return;
        orphans = collector;
        orphans.start();
      });
    }
  } else {
    log('no SANDBOXD_NODE_CREDENTIAL_FILE and no SANDBOXD_DATABASE_URL: this node is not in a registry (control must be given its URL)');
  }
  // A step of the shutdown that takes long is said (the node has a stop timeout to keep).
  const step = async (what: string, fn: () => Promise<unknown> | unknown) => {
    const t0 = Date.now();
    await fn();
    if (Date.now() - t0 >= 1000) log(`shutting down: ${what} took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  };
  const close = () =>
    (closing ??= (async () => {
      membership?.stop();
      await step('the orphan collector', () => orphans?.stop());
      await step('the layer cache', () => layerCache.stop());
      if (store) await step('the store', () => closeStore(store).catch((err: unknown) => log('closing the store failed', { error: String(err) })));
      // What control holds open here (event streams, relays) ends at once (node-api.ts); a call
      // under way gets a moment to end. What is left then is cut: a connection that never sent a
      // request (one made while this node was stopped) would hold the close for a minute.
      await step('the node API', async () => {
        const cut = setTimeout(() => {
          log(`closing the node API: connections still open after ${NODE_API_CLOSE_GRACE_MS / 1000} s are cut`);
          app.server.closeAllConnections();
        }, NODE_API_CLOSE_GRACE_MS);
        await app.close().catch((err: unknown) => log('closing the node API failed', { error: String(err) }));
        clearTimeout(cut);
      });
      // Its ready sandboxes are no one's once it is gone (a node started again does not know them);
      // the runtime lets go of its spares.
      await step('the warm pool', () => node.close().catch((err: unknown) => log('emptying the warm pool failed', { error: String(err) })));
      log('node shut down; its sandboxes keep running');
    })());
  return { close };
}
