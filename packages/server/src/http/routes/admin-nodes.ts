import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { NodeViews, renderNodeView } from '../../services/node-views.js';
import { operatorOnly } from '../auth.js';

/**
 * `GET /v1/admin/nodes`, for the operator's keys: the nodes, each with its lease, capacity, what
 * the store's sandboxes on it hold and what it last reported. In a cluster the registry's nodes;
 * on the all-in-one daemon (a cluster of one) its one machine, in process, rather than a 404.
 */
export function adminNodesRoute(app: FastifyInstance, s: Services): void {
  const views = s.nodeViews ?? new NodeViews(s.store);
  app.get('/v1/admin/nodes', { preHandler: operatorOnly(s.keys) }, async (req) => {
    const nodes = await views.list();
    return { object: 'list', mode: views.mode, data: nodes.map(renderNodeView), request_id: req.id };
  });
}
