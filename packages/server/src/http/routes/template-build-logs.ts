import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import type { Services } from '../../services/index.js';
import { guard, principalOf } from '../auth.js';
import { levelOf } from '../../services/template-builds.js';
import { SandboxIdParams } from './params.js';

const LogsQuery = Type.Object({
  offset: Type.Optional(Type.Integer({ minimum: 0 })),
});

/** Build logs: JSON offset polling by default, SSE with `Accept: text/event-stream` (api-decisions.md §2). */
export function templateBuildLogsRoute(app: FastifyInstance, s: Services): void {
  const builds = s.builds;
  if (!builds) return;
  app.get<{ Params: SandboxIdParams; Querystring: Static<typeof LogsQuery> }>(
    '/v1/templates/build/:id/logs',
    { schema: { params: SandboxIdParams, querystring: LogsQuery }, preHandler: guard(s.keys, 'templates:read') },
    async (req, reply) => {
      const build = await builds.get(principalOf(req).orgId, req.params.id);
      if (!String(req.headers.accept ?? '').includes('text/event-stream')) {
        // Read the status first: a build that was finished then has all its lines on disk already.
        const fresh = await builds.get(principalOf(req).orgId, build.id);
        const { logs, offset, atEnd } = await builds.logsSince(build, req.query.offset ?? 0);
        return { logs, offset, status: fresh.status, complete: fresh.status !== 'building' && atEnd, request_id: req.id };
      }
      const release = s.connections?.acquireOrg(principalOf(req).orgId);
      req.raw.once('close', () => release?.());
      reply.hijack();
      const raw = reply.raw;
      raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-request-id': String(req.id) });
      const send = (event: string, data: unknown) => raw.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
      // Replay what is on disk, then follow live lines until the build ends.
      const backlog = await builds.logsSince(build, req.query.offset ?? 0);
      for (const line of backlog.logs.split('\n').filter(Boolean)) send('log', { level: levelOf(line), message: line, timestamp: null });
      const current = await builds.get(principalOf(req).orgId, build.id);
      if (current.status !== 'building') {
        send('done', { status: current.status });
        raw.end();
        return;
      }
      const offLine = builds.onLine(build.id, (e) => send('log', e));
      const offDone = builds.onDone(build.id, (status) => {
        send('done', { status });
        cleanup();
        raw.end();
      });
      const ping = setInterval(() => raw.write(': ping\n\n'), 15_000);
      const cleanup = () => {
        clearInterval(ping);
        offLine();
        offDone();
      };
      req.raw.on('close', cleanup);
    },
  );
}
