import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Services } from '../services.js';
import type { SandboxEventMessage } from '../../services/events.js';
import { EventsQuery, EventsTokenBody, EventsTokenResult } from '@sandboxd/protocol';
import { eventsGuard, guard, principalOf, requireEventsScope } from '../auth.js';
import { SandboxIdParams } from './params.js';

/** What may wait in the daemon for one events client before its stream is cut. */
const MAX_UNREAD_BYTES = 1024 * 1024;

/** Server-sent lifecycle events (api-decisions.md §2.3), for one sandbox or the whole organization. */
function stream(req: FastifyRequest, reply: FastifyReply, s: Services, accept: (m: SandboxEventMessage) => boolean): void {
  // An open stream holds a connection for as long as the client likes: it counts against the org.
  const release = s.connections?.acquireOrg(principalOf(req).orgId);
  reply.hijack();
  const raw = reply.raw;
  // The client may have left while it was let in: nothing is kept for it then.
  if (req.raw.destroyed || raw.destroyed || raw.socket?.destroyed) {
    release?.();
    raw.destroy();
    return;
  }
  raw.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    'x-request-id': String(req.id),
  });
  // A client that does not read would make every event wait in the daemon's memory: one that is
  // this far behind is cut (it reconnects and lists the sandboxes to catch up).
  const write = (text: string) => {
    if (raw.writableLength > MAX_UNREAD_BYTES) raw.destroy();
    else raw.write(text);
  };
  write(': connected\n\n');
  const unsubscribe = s.events.subscribe((m) => {
    if (accept(m)) write(`event: ${m.kind}\ndata: ${JSON.stringify(m.data)}\n\n`);
  });
  // A stream lives only as long as the key that opened it: looked at again with each ping.
  const { keyId, orgId } = principalOf(req);
  const ping = setInterval(() => {
    write(': ping\n\n');
    s.keys.authenticateKeyId(keyId, orgId).catch(() => raw.end(`event: end\ndata: ${JSON.stringify({ reason: 'AUTHENTICATION_ERROR' })}\n\n`));
  }, 15_000);
  raw.once('close', () => {
    clearInterval(ping);
    unsubscribe();
    release?.();
  });
}

export function eventsRoutes(app: FastifyInstance, s: Services): void {
  const opened = eventsGuard(s.keys, s.tokens);
  app.get<{ Params: SandboxIdParams; Querystring: EventsQuery }>(
    '/v1/sandboxes/:id/events',
    { schema: { params: SandboxIdParams, querystring: EventsQuery }, preHandler: opened },
    async (req, reply) => {
      const org = principalOf(req).orgId;
      requireEventsScope(req, req.params.id);
      await s.sandboxes.get(org, req.params.id);
      stream(req, reply, s, (m) => m.orgId === org && m.data.id === req.params.id);
    },
  );
  app.get<{ Querystring: EventsQuery }>('/v1/events', { schema: { querystring: EventsQuery }, preHandler: opened }, async (req, reply) => {
    const org = principalOf(req).orgId;
    requireEventsScope(req, null);
    stream(req, reply, s, (m) => m.orgId === org);
  });
  // A short-lived token for EventSource's ?token=, so that an API key never travels in a URL.
  app.post<{ Body: EventsTokenBody }>(
    '/v1/events/token',
    {
      schema: { body: EventsTokenBody, response: { 200: EventsTokenResult } },
      // The body is optional: a POST without one (and without a content type) asks for the organization's events.
      preValidation: async (req) => {
        req.body ??= {};
      },
      preHandler: guard(s.keys, 'sandboxes:read'),
    },
    async (req) => {
      const p = principalOf(req);
      const sandboxId = req.body?.sandbox_id ?? null;
      if (sandboxId) await s.sandboxes.get(p.orgId, sandboxId);
      const { token, expiresAt } = await s.tokens.issueEvents(p.orgId, p.keyId, sandboxId, s.config.eventsTokenTtlSeconds);
      return { token, expires_at: expiresAt.toISOString(), sandbox_id: sandboxId, request_id: String(req.id) };
    },
  );
}
