import type { FastifyInstance } from 'fastify';
import { ListSandboxesQuery } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';

export function listSandboxesRoute(app: FastifyInstance, s: Services): void {
  app.get<{ Querystring: ListSandboxesQuery }>(
    '/v1/sandboxes',
    { schema: { querystring: ListSandboxesQuery }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req) => {
      const p = principalOf(req);
      // Which node holds each is the operator's business, not a tenant's.
      const page = await s.sandboxes.list(p.orgId, req.query, { node: await s.keys.isOperator(p) });
      return { object: 'list', data: page.data, has_more: page.hasMore, next_cursor: page.nextCursor, url: '/v1/sandboxes', request_id: req.id };
    },
  );
}
