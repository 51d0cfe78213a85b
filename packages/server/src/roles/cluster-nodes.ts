import type { Config } from '../config/index.js';
import { unpackLayer } from '../images/layer-tar.js';
import { RemoteNode } from '../node/remote-node.js';
import { RegisteredNodes } from '../placement/registered-nodes.js';
import type { ClusterSigner } from '../runtime/cluster-auth.js';
import type { LayerSource } from '../runtime/types.js';
import type { Store } from '../store/types/index.js';
import type { Log } from './shared.js';

/**
 * The nodes of the cluster's registry as control and the edge reach them: over the node API, each
 * call signed with the cluster's private key, an https:// node's certificate checked against the
 * cluster's CA. `layers`: control's, which the nodes fetch when they lack them.
 */
export function clusterNodes(config: Config, store: Store, auth: ClusterSigner, log: Log, o: { layers?: LayerSource } = {}): RegisteredNodes {
  return new RegisteredNodes({
    store,
    connect: (row) =>
      new RemoteNode({
        id: row.id,
        url: row.url,
        auth,
        layers: o.layers,
        unpack: unpackLayer,
        ca: config.node.clusterCa ?? undefined,
        exportMaxBytes: config.layerTransfer.maxBytes,
        log,
      }),
    log,
  });
}
