import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { renderTemplate } from '../../services/templates.js';
import { guard, principalOf } from '../auth.js';
import { NameOrIdParams } from './params.js';

export function getTemplateRoute(app: FastifyInstance, s: Services): void {
  app.get<{ Params: NameOrIdParams }>(
    '/v1/templates/:nameOrId',
    { schema: { params: NameOrIdParams }, preHandler: guard(s.keys, 'templates:read') },
    async (req) => ({ ...renderTemplate(await s.templates.resolve(req.params.nameOrId, principalOf(req).orgId)), request_id: req.id }),
  );
}
