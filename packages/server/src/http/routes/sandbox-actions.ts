import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

/** pause / resume / stop / start: bodyless POSTs answering `{id, status, request_id}`. */
export function sandboxActionRoutes(app: FastifyInstance, s: Services): void {
  const actions = {
    pause: (org: string, id: string) => s.sandboxes.pause(org, id),
    resume: (org: string, id: string) => s.sandboxes.resume(org, id),
    stop: (org: string, id: string) => s.sandboxes.stop(org, id),
    start: (org: string, id: string) => s.sandboxes.start(org, id),
  };
  for (const [name, act] of Object.entries(actions)) {
    app.post<{ Params: SandboxIdParams }>(
      `/v1/sandboxes/:id/${name}`,
      { schema: { params: SandboxIdParams }, preHandler: guard(s.keys, 'sandboxes:write') },
      async (req) => {
        const row = await act(principalOf(req).orgId, req.params.id);
        return { id: row.id, status: row.status, request_id: req.id };
      },
    );
  }
}
