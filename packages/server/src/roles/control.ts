import { statSync } from 'node:fs';
import type { Config } from '../config/index.js';
import { LayerContents } from '../images/layer-content.js';
import type { Logger } from '../logging.js';
import { Placement } from '../placement/placement.js';
import { ClusterSigner } from '../runtime/cluster-auth.js';
import { LayerPublisher, LayerServer } from '../services/layer-publisher.js';
import { NodeRegistryAuth } from '../services/node-registry.js';
import { clusterNodes } from './cluster-nodes.js';
import { runControlPlane } from './control-plane.js';
import { openRuntime, prepareMachine } from './machine.js';
import { openImages, openStore, type Log } from './shared.js';

/**
 * `sandboxd control`: the API and gateway of a cluster (any number of replicas on one PostgreSQL),
 * over the nodes of its registry (RegisteredNodes, each reached over the node API). The control
 * plane is the all-in-one daemon's (roles/control-plane.ts); what differs is its nodes, the layers
 * it serves them, and that its replicas share the store.
 */
export async function runControl(config: Config, log: Log, logger: Logger): Promise<void> {
  if (!config.databaseUrl || !config.node.signingKey) {
    throw new Error(
      "sandboxd control needs the cluster: SANDBOXD_DATABASE_URL (PostgreSQL, the same as its nodes') and SANDBOXD_CLUSTER_SIGNING_KEY_FILE (the private key, cluster-signing.pem of `sandboxd cluster keygen`, whose public key the nodes hold)",
    );
  }
  await prepareMachine(config, log);
  log(`starting sandboxd ${config.version} as control; data directory ${config.dataDir}`);
  const keyFile = config.node.signingKeyFile;
  const keyMode = keyFile ? statSync(keyFile).mode & 0o777 : 0;
  if (keyMode & 0o077) log(`${keyFile}: mode ${keyMode.toString(8)}: the cluster's signing key commands every node; make it root's alone (chmod 600)`);
  log('default limits of every organization (null: none; sandboxd orgs limits overrides them)', config.limits);
  const store = await openStore(config, log);
  const images = openImages(config, log);
  await images.cleanupStale();
  const signer = new ClusterSigner(config.node.signingKey);
  // Nodes without database credentials register through here, each with its own credential.
  const nodeRegistry = new NodeRegistryAuth(signer, store.nodes, log);
  // The nodes fetch the layers they lack from this replica (its own layers directory).
  const contents = new LayerContents(images.layers, log);
  const layerServing = new LayerServer(contents, signer);
  const publisher = new LayerPublisher({ contents, signer, controlUrl: config.layerTransfer.controlUrl, kv: store.kv });
  log(`cluster: nodes fetch the layers they lack from ${config.layerTransfer.controlUrl} (SANDBOXD_CONTROL_URL)`);
  const nodes = clusterNodes(config, store, signer, log, { layers: publisher });
  const placement = new Placement({
    nodes,
    usage: () => store.sandboxes.usageByNode(),
    // A node names the ids of what it boots: one naming a sandbox the store knows is refused.
    isNew: async (id) => (await store.sandboxes.byId(id)) === undefined,
    overcommit: config.node.overcommit,
    claimEveryMs: config.node.claimSeconds * 1000,
    log,
  });
  await placement.start();
  const known = nodes.known();
  log(`cluster: ${known.length} node(s) registered: ${known.map((n) => `${n.id} (${n.status})`).join(', ') || 'none yet'}`);
  // Template builds run their steps here, in throwaway containers of this machine (with the same
  // isolation as sandboxes): their layers land in this replica's layers directory, which the
  // nodes fetch from like the built-in templates'.
  const buildRuntime = await openRuntime(config, log);
  await runControlPlane({
    config,
    log,
    logger,
    store,
    images,
    placement,
    buildRuntime,
    ownsBuildRuntime: true,
    replicated: true,
    cluster: { layerServing, nodeRegistry, publisher },
  });
}
