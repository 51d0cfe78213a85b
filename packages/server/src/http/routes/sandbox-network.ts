import type { FastifyInstance } from 'fastify';
import { NetworkPolicyResult, SetNetworkBody } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

/** A sandbox's egress policy: read it, or replace it while the sandbox runs (runtime/egress-policy.ts). */
export function sandboxNetworkRoutes(app: FastifyInstance, s: Services): void {
  app.get<{ Params: SandboxIdParams }>(
    '/v1/sandboxes/:id/network',
    { schema: { params: SandboxIdParams, response: { 200: NetworkPolicyResult } }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req) => ({ ...s.sandboxes.network(await s.sandboxes.get(principalOf(req).orgId, req.params.id)), request_id: String(req.id) }),
  );
  app.put<{ Params: SandboxIdParams; Body: SetNetworkBody }>(
    '/v1/sandboxes/:id/network',
    { schema: { params: SandboxIdParams, body: SetNetworkBody, response: { 200: NetworkPolicyResult } }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req) => ({ ...(await s.sandboxes.setNetwork(principalOf(req).orgId, req.params.id, req.body)), request_id: String(req.id) }),
  );
}
