import type { FastifyInstance } from 'fastify';
import type { Services } from '../../services/index.js';
import { guard, principalOf } from '../auth.js';

export function accountLimitsRoute(app: FastifyInstance, s: Services): void {
  app.get('/v1/account/limits', { preHandler: guard(s.keys, 'sandboxes:read') }, async (req) => {
    const org = principalOf(req).orgId;
    return {
      organization_id: org,
      concurrent_sandboxes: { used: await s.store.sandboxes.countLive(org), limit: null },
      rate_limits: {
        sandbox_creates_per_minute: { limit: s.config.rateLimit.sandboxCreatesPerMinute, used: s.createLimiter.usage(org) },
      },
      request_id: req.id,
    };
  });
}
