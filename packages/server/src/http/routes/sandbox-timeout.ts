import type { FastifyInstance } from 'fastify';
import { SetTimeoutBody } from '@sandboxd/protocol';
import type { Static } from '@sinclair/typebox';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

export function sandboxTimeoutRoute(app: FastifyInstance, s: Services): void {
  app.put<{ Params: SandboxIdParams; Body: Static<typeof SetTimeoutBody> }>(
    '/v1/sandboxes/:id/timeout',
    { schema: { params: SandboxIdParams, body: SetTimeoutBody }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req) => {
      const row = await s.sandboxes.setTimeout(principalOf(req).orgId, req.params.id, req.body.timeout_seconds);
      s.sandboxes.touch(row.id);
      return { id: row.id, timeout_seconds: row.timeoutSeconds, expires_at: row.expiresAt, request_id: req.id };
    },
  );
}
