import type { FastifyInstance } from 'fastify';
import { NodeDrainBody, NodeDrainParams } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { operatorOnly, principalOf } from '../auth.js';
import { publicOrgId } from '../../services/org-ids.js';

/**
 * `POST /v1/admin/nodes/{id}/drain`, for the operator's keys: the node takes nothing new and its
 * sandboxes move to other nodes (services/sandboxes/evacuate.ts). Control holds the nodes' clients
 * and the layers the moves copy through, so `sandboxd nodes drain` asks it here, call after call
 * while anything is left.
 */
export function adminNodeDrainRoute(app: FastifyInstance, s: Services): void {
  app.post<{ Params: NodeDrainParams; Body: NodeDrainBody }>(
    '/v1/admin/nodes/:id/drain',
    {
      schema: { params: NodeDrainParams, body: NodeDrainBody },
      // The body is optional: a POST without one drains with the defaults.
      preValidation: async (req) => {
        req.body ??= {};
      },
      preHandler: operatorOnly(s.keys),
    },
    async (req) => {
      const r = await s.sandboxes.drain(req.params.id, { stopRunning: req.body.stop_running ?? false });
      req.log.info({ node: r.nodeId, moved: r.moved.length, failed: r.failed.length, running: r.running.length, left: r.left, by_key: principalOf(req).keyId }, 'node drain');
      return {
        object: 'node_drain',
        node_id: r.nodeId,
        status: 'draining',
        moved: r.moved.map((m) => ({ id: m.id, organization_id: publicOrgId(m.orgId), status: m.status, node_id: m.to })),
        failed: r.failed.map((f) => ({ id: f.id, organization_id: publicOrgId(f.orgId), status: f.status, error: { code: f.error.code, message: f.error.message } })),
        running: r.running.map((x) => ({ id: x.id, organization_id: publicOrgId(x.orgId), expires_at: x.expiresAt })),
        left: r.left,
        drained: r.drained,
        request_id: req.id,
      };
    },
  );
}
