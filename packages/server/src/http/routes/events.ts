import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Services } from '../../services/index.js';
import type { SandboxEventMessage } from '../../services/events.js';
import { guard, principalOf } from '../auth.js';
import { SandboxIdParams } from './params.js';

/** Server-sent lifecycle events (api-decisions.md §2.3), for one sandbox or the whole organization. */
function stream(req: FastifyRequest, reply: FastifyReply, s: Services, accept: (m: SandboxEventMessage) => boolean): void {
  // An open stream holds a connection for as long as the client likes: it counts against the org.
  const release = s.connections?.acquireOrg(principalOf(req).orgId);
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    'x-request-id': String(req.id),
  });
  raw.write(': connected\n\n');
  const unsubscribe = s.events.subscribe((m) => {
    if (accept(m)) raw.write(`event: ${m.kind}\ndata: ${JSON.stringify(m.data)}\n\n`);
  });
  const ping = setInterval(() => raw.write(': ping\n\n'), 15_000);
  req.raw.on('close', () => {
    clearInterval(ping);
    unsubscribe();
    release?.();
  });
}

export function eventsRoutes(app: FastifyInstance, s: Services): void {
  app.get<{ Params: SandboxIdParams }>(
    '/v1/sandboxes/:id/events',
    { schema: { params: SandboxIdParams }, preHandler: guard(s.keys, 'sandboxes:read', { allowQueryToken: true }) },
    async (req, reply) => {
      const org = principalOf(req).orgId;
      await s.sandboxes.get(org, req.params.id);
      stream(req, reply, s, (m) => m.orgId === org && m.data.id === req.params.id);
    },
  );
  app.get('/v1/events', { preHandler: guard(s.keys, 'sandboxes:read', { allowQueryToken: true }) }, async (req, reply) => {
    const org = principalOf(req).orgId;
    stream(req, reply, s, (m) => m.orgId === org);
  });
}
