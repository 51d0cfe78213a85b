import type { FastifyInstance } from 'fastify';
import { CreateSnapshotBody, ForkBody, ListSnapshotsQuery, PromoteSnapshotBody, RestoreBody, ServiceError } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { SnapshotService } from '../../services/snapshots/index.js';
import { renderTemplate } from '../../services/templates.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

/** Snapshots of sandboxes' files, creates from them (`POST /v1/sandboxes`), forks, restores and promotion to templates. */
export function snapshotRoutes(app: FastifyInstance, s: Services): void {
  const snapshots = () => {
    if (!s.snapshots) throw new ServiceError('RUNTIME_ERROR', 'this service keeps no snapshots');
    return s.snapshots;
  };
  app.post<{ Params: SandboxIdParams; Body: CreateSnapshotBody }>(
    '/v1/sandboxes/:id/snapshots',
    { schema: { params: SandboxIdParams, body: CreateSnapshotBody }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req, reply) => {
      const snap = await snapshots().take(principalOf(req).orgId, req.params.id, req.body ?? {});
      return reply.code(201).send({ ...snapshots().render(snap), request_id: req.id });
    },
  );
  app.get<{ Querystring: ListSnapshotsQuery }>(
    '/v1/snapshots',
    { schema: { querystring: ListSnapshotsQuery }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req) => {
      const page = await snapshots().list(principalOf(req).orgId, req.query);
      return { object: 'list', data: page.data, has_more: page.hasMore, next_cursor: page.nextCursor, url: '/v1/snapshots', request_id: req.id };
    },
  );
  app.get<{ Params: SandboxIdParams }>(
    '/v1/snapshots/:id',
    { schema: { params: SandboxIdParams }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req) => ({ ...snapshots().render(await snapshots().get(principalOf(req).orgId, req.params.id)), request_id: req.id }),
  );
  app.delete<{ Params: SandboxIdParams }>(
    '/v1/snapshots/:id',
    { schema: { params: SandboxIdParams }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req) => {
      await snapshots().remove(principalOf(req).orgId, req.params.id);
      return { id: req.params.id, status: 'deleted', request_id: req.id };
    },
  );
  app.post<{ Params: SandboxIdParams; Body: PromoteSnapshotBody }>(
    '/v1/snapshots/:id/template',
    { schema: { params: SandboxIdParams, body: PromoteSnapshotBody }, preHandler: guard(s.keys, 'templates:write') },
    async (req, reply) => {
      const t = await snapshots().promote(principalOf(req).orgId, req.params.id, req.body.alias, SnapshotService.builtinNames());
      return reply.code(201).send({ ...renderTemplate(t), request_id: req.id });
    },
  );
  app.post<{ Params: SandboxIdParams; Body: ForkBody }>(
    '/v1/sandboxes/:id/fork',
    { schema: { params: SandboxIdParams, body: ForkBody }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req, reply) => {
      const made = await s.sandboxes.fork(principalOf(req).orgId, req.params.id, req.body ?? {}, { keyId: principalOf(req).keyId });
      const data = made.map((m) => ({ ...m.sandbox, auth_token: m.token, token_expires_at: m.tokenExpiresAt.toISOString() }));
      return reply.code(201).send({ object: 'list', data, source_id: req.params.id, request_id: req.id });
    },
  );
  app.post<{ Params: SandboxIdParams; Body: RestoreBody }>(
    '/v1/sandboxes/:id/restore',
    { schema: { params: SandboxIdParams, body: RestoreBody }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req) => ({ ...s.sandboxes.render(await s.sandboxes.restore(principalOf(req).orgId, req.params.id, req.body.snapshot_id)), request_id: req.id }),
  );
}
