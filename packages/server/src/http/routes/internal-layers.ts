import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import type { Services } from '../services.js';

const LAYER_ID_RE = /^[0-9a-f]{64}$/;

/**
 * A layer of this replica, for a node of the cluster that lacks it (services/layer-publisher.ts):
 * its tar stream, to a token control signed for that node and that layer only. Not part of the
 * public API (no API key opens it, and it is left out of the OpenAPI document).
 */
export function internalLayerRoutes(app: FastifyInstance, s: Services): void {
  app.get<{ Params: { id: string } }>('/internal/v1/layers/:id', async (req, reply) => {
    const serving = s.layerServing;
    if (!serving) throw new ServiceError('ROUTE_NOT_FOUND', 'layers are served by control only');
    const id = req.params.id;
    if (!LAYER_ID_RE.test(id)) throw new ServiceError('VALIDATION_ERROR', 'bad layer id');
    const nodeId = await serving.authorize(req.headers.authorization, id);
    if (!(await serving.has(id))) throw new ServiceError('ROUTE_NOT_FOUND', `no layer ${id} here`);
    const layer = await serving.open(id);
    req.log.info({ layer: id, node: nodeId, bytes: layer.bytes }, 'serving a layer to a node');
    return reply
      .header('content-type', 'application/x-tar')
      .header('content-length', String(layer.bytes))
      .header('x-sandboxd-layer-digest', layer.digest)
      .header('cache-control', 'no-store')
      .send(layer.stream);
  });
}
