import type { FastifyInstance } from 'fastify';
import type { ServerResponse } from 'node:http';
import { Type, type Static } from '@sinclair/typebox';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { levelOf } from '../../services/template-builds/index.js';
import { SandboxIdParams } from './params.js';

const LogsQuery = Type.Object({
  offset: Type.Optional(Type.Integer({ minimum: 0 })),
});

/** Log bytes read per SSE write: a slow client holds at most one such batch in the daemon. */
const SSE_READ_BYTES = 64 * 1024;
/** A follower with nothing new checks the build's status this often (new lines wake it at once, also another replica's). */
const SSE_IDLE_CHECK_MS = 1000;

/** Build logs: JSON offset polling by default, SSE with `Accept: text/event-stream` (api-decisions.md §2). */
export function templateBuildLogsRoute(app: FastifyInstance, s: Services): void {
  const builds = s.builds;
  if (!builds) return;
  app.get<{ Params: SandboxIdParams; Querystring: Static<typeof LogsQuery> }>(
    '/v1/templates/build/:id/logs',
    { schema: { params: SandboxIdParams, querystring: LogsQuery }, preHandler: guard(s.keys, 'templates:read') },
    async (req, reply) => {
      const orgId = principalOf(req).orgId;
      const build = await builds.get(orgId, req.params.id);
      if (!String(req.headers.accept ?? '').includes('text/event-stream')) {
        // Read the status first: a build that was finished then has all its lines stored already.
        const fresh = await builds.get(orgId, build.id);
        const { logs, offset, atEnd } = await builds.logsSince(build, req.query.offset ?? 0);
        return { logs, offset, status: fresh.status, complete: fresh.status !== 'building' && atEnd, request_id: req.id };
      }
      const release = s.connections?.acquireOrg(orgId);
      reply.hijack();
      const raw = reply.raw;
      raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-request-id': String(req.id) });

      // The stream follows the stored log, not the build's live output: what waits for a client that
      // does not read is one batch, never the build's whole output (a step can print millions of
      // lines, and every stream kept them all in the daemon's memory).
      let closed = false;
      let wake: (() => void) | undefined;
      const offData = builds.onData(build.id, () => wake?.());
      const ping = setInterval(() => raw.write(': ping\n\n'), 15_000);
      const cleanup = () => {
        if (closed) return;
        closed = true;
        clearInterval(ping);
        offData();
        wake?.();
        release?.();
      };
      req.raw.once('close', cleanup);
      raw.once('close', cleanup);
      raw.on('error', cleanup);
      const waitForData = () =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(() => done(), SSE_IDLE_CHECK_MS);
          const done = () => {
            clearTimeout(timer);
            wake = undefined;
            resolve();
          };
          wake = done;
        });
      try {
        let offset = req.query.offset ?? 0;
        while (!closed) {
          // Status before reading, as above: once it is final, every line is stored.
          const status = (await builds.get(orgId, build.id)).status;
          const chunk = await builds.logsSince(build, offset, SSE_READ_BYTES);
          offset = chunk.offset;
          const lines = chunk.logs.split('\n').filter(Boolean);
          if (lines.length > 0) {
            const text = lines.map((line) => sse('log', { level: levelOf(line), message: line, timestamp: null })).join('');
            if (!(await writeWithBackpressure(raw, text, () => closed))) break;
          }
          if (chunk.atEnd && status !== 'building') {
            raw.end(sse('done', { status }));
            break;
          }
          if (chunk.atEnd) await waitForData();
        }
      } catch (err) {
        req.log.error({ err }, 'build log stream failed');
        raw.destroy();
      } finally {
        cleanup();
      }
    },
  );
}

function sse(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** Writes and, when the client is behind, waits until it has read; false when it went away. */
async function writeWithBackpressure(raw: ServerResponse, text: string, isClosed: () => boolean): Promise<boolean> {
  if (isClosed()) return false;
  if (raw.write(text)) return true;
  await new Promise<void>((resolve) => {
    const done = () => {
      raw.off('drain', done);
      raw.off('close', done);
      resolve();
    };
    raw.on('drain', done);
    raw.on('close', done);
  });
  return !isClosed();
}
