import type { FastifyInstance } from 'fastify';
import { CreateVolumeBody, DeleteVolumeQuery, ServiceError } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { NameOrIdParams } from './params.js';

/** Volumes (issue 32): create, list, get (with what it holds), delete. Sandboxes mount them at create. */
export function volumeRoutes(app: FastifyInstance, s: Services): void {
  const volumes = () => {
    if (!s.volumes) throw new ServiceError('INVALID_STATE', 'this service has no volumes');
    return s.volumes;
  };
  app.post<{ Body: CreateVolumeBody }>(
    '/v1/volumes',
    { schema: { body: CreateVolumeBody }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req, reply) => {
      const row = await volumes().create(principalOf(req).orgId, req.body);
      return reply.code(201).send({ ...volumes().render(row, [], 0), request_id: req.id });
    },
  );
  app.get('/v1/volumes', { preHandler: guard(s.keys, 'sandboxes:read') }, async (req) => {
    const orgId = principalOf(req).orgId;
    const [rows, users] = await Promise.all([volumes().list(orgId), volumes().mountedBy(orgId)]);
    return { object: 'list', data: rows.map((r) => volumes().render(r, users.get(r.id) ?? [])), url: '/v1/volumes', request_id: req.id };
  });
  app.get<{ Params: NameOrIdParams }>(
    '/v1/volumes/:nameOrId',
    { schema: { params: NameOrIdParams }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req) => {
      const orgId = principalOf(req).orgId;
      const row = await volumes().get(orgId, req.params.nameOrId);
      const [users, used] = await Promise.all([volumes().mountedBy(orgId), volumes().usedBytes(row)]);
      return { ...volumes().render(row, users.get(row.id) ?? [], used), request_id: req.id };
    },
  );
  app.delete<{ Params: NameOrIdParams; Querystring: DeleteVolumeQuery }>(
    '/v1/volumes/:nameOrId',
    { schema: { params: NameOrIdParams, querystring: DeleteVolumeQuery }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req) => {
      const row = await volumes().remove(principalOf(req).orgId, req.params.nameOrId, req.query.force === true);
      return { id: row.id, status: 'deleted', request_id: req.id };
    },
  );
}
