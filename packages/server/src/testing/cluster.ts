import { RemoteNode } from '../node/remote-node.js';
import { RegisteredNodes } from '../placement/registered-nodes.js';
import { Placement, type PlacementOptions } from '../placement/placement.js';
import type { ClusterSigner } from '../runtime/cluster-auth.js';
import type { LayerSource } from '../runtime/types.js';
import type { Store } from '../store/types/index.js';

/**
 * Placement over the nodes of `store`'s registry, as control wires it (roles/control.ts), each
 * node reached over its API with `signer`'s tokens; `isNew` checks a node's new ids against the
 * store. Started.
 */
export async function registeredPlacement(
  store: Store,
  signer: ClusterSigner,
  o: Partial<Omit<PlacementOptions, 'nodes' | 'usage' | 'log'>> & { refreshMs?: number; layers?: LayerSource; log?: (msg: string) => void } = {},
): Promise<{ placement: Placement; nodes: RegisteredNodes }> {
  const log = o.log ?? (() => undefined);
  const nodes = new RegisteredNodes({ store, connect: (row) => new RemoteNode({ id: row.id, url: row.url, auth: signer, layers: o.layers, log }), refreshMs: o.refreshMs ?? 100, log });
  const { refreshMs: _r, layers: _l, log: _log, ...rest } = o;
  const placement = new Placement({ nodes, usage: () => store.sandboxes.usageByNode(), isNew: async (id) => (await store.sandboxes.byId(id)) === undefined, log, ...rest });
  await placement.start();
  return { placement, nodes };
}
