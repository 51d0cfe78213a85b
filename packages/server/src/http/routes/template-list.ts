import type { FastifyInstance } from 'fastify';
import { TemplateListQuery } from '@sandboxd/protocol';
import type { Static } from '@sinclair/typebox';
import type { Services } from '../services.js';
import { renderTemplate } from '../../services/templates.js';
import { guard, principalOf } from '../auth.js';

export function listTemplatesRoute(app: FastifyInstance, s: Services): void {
  app.get<{ Querystring: Static<typeof TemplateListQuery> }>(
    '/v1/templates',
    { schema: { querystring: TemplateListQuery }, preHandler: guard(s.keys, 'templates:read') },
    async (req) => {
      const rows = await s.templates.list(principalOf(req).orgId, req.query);
      return { object: 'list', data: rows.map(renderTemplate), request_id: req.id };
    },
  );
}
