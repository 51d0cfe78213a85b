import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Ajv } from 'ajv';
import { ServiceError } from '@sandboxd/protocol';
import { refusalOf } from '../services/connections.js';
import { errorHandler } from './errors.js';
import { safeUrl, type Logger } from '../logging.js';
import type { Services } from './services.js';
import { registerRoutes } from './routes/index.js';
import { buildOpenApi, collectRoutes } from './openapi.js';
import { docsRoutes } from './docs.js';
import { consoleRoutes } from './console.js';
import { manualRoutes } from './manual.js';

const JSON_BODY_LIMIT = 10 * 1024 * 1024;

/**
 * Routes that machines call every second or few on an idle service (each node's heartbeat and its
 * read of what it holds, through control's registry; probes): their answers are logged at debug,
 * so that info says what happened. A failure among them is logged at info like any other.
 */
const ROUTINE_ROUTES = new Set(['/health', '/internal/v1/nodes/:id/heartbeat', '/internal/v1/nodes/:id/sandboxes']);

export interface AppOptions {
  services: Services;
  /** The daemon's logger: every request is logged at info, once, when answered (absent: none). */
  logger?: Logger;
  /** Requests under a path handed on raw, before Fastify reads a byte of their bodies (E2B's data plane, through the gateway). */
  raw?: RawMount;
}

/**
 * A path prefix of the API port whose requests another handler serves as they come. No upgrades:
 * with an 'upgrade' listener Node would hand every Upgrade request of the API (an h2c attempt by
 * curl, say) to it instead of serving it as the plain request it is.
 */
export interface RawMount {
  /** The request's path and query below the mount, or undefined when it is not the mount's. */
  match(url: string | undefined): string | undefined;
  request(req: IncomingMessage, res: ServerResponse, rest: string): void;
}

/** The API's HTTP server, with the raw mount's requests taken before Fastify's handler sees them. */
function rawServerFactory(raw: RawMount) {
  return (handler: (req: IncomingMessage, res: ServerResponse) => void): Server => {
    const server = createServer((req, res) => {
      const rest = raw.match(req.url);
      if (rest === undefined) return handler(req, res);
      raw.request(req, res, rest);
    });
    // What Fastify sets on a server it makes itself (its defaults).
    server.keepAliveTimeout = 72_000;
    server.requestTimeout = 0;
    return server;
  };
}

/** The lifecycle API: thin routes over the services; one error shape; X-Request-ID everywhere. */
export async function buildApp(opts: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    ...(opts.logger ? { loggerInstance: opts.logger as FastifyBaseLogger } : { logger: false }),
    // One line per request, written below when it is answered (not Fastify's two).
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: JSON_BODY_LIMIT,
    genReqId: (req) => {
      const incoming = req.headers['x-request-id'];
      return typeof incoming === 'string' && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : randomUUID();
    },
    requestIdHeader: false,
    trustProxy: false,
    routerOptions: { ignoreTrailingSlash: true, ignoreDuplicateSlashes: true, maxParamLength: 4096 },
    // Errors raised before a route runs (bad URL encoding, ...) get the same shape as the rest.
    frameworkErrors: (err, req, reply) => errorHandler(err, req, reply),
    ...(opts.raw ? { serverFactory: rawServerFactory(opts.raw) } : {}),
  });

  // Bodies are validated strictly (a wrong type is a 400 naming the field); query strings coerce.
  const bodyAjv = new Ajv({ coerceTypes: false, useDefaults: true, removeAdditional: false, allErrors: false, strict: false });
  const queryAjv = new Ajv({ coerceTypes: 'array', useDefaults: true, removeAdditional: false, allErrors: false, strict: false });
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? bodyAjv : queryAjv).compile(schema));

  // Real clients send `Content-Type: application/json` with an empty body on bodyless POSTs.
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: JSON_BODY_LIMIT }, (_req, body, done) => {
    const text = String(body);
    if (text.trim() === '') return done(null, {});
    try {
      done(null, JSON.parse(text));
    } catch {
      done(new ServiceError('VALIDATION_ERROR', 'request body is not valid JSON'), undefined);
    }
  });

  app.addHook('onRequest', async (req, reply) => {
    void reply.header('x-request-id', String(req.id));
    // A connection past its client's cap is answered with the 429 that says so, and closed.
    const refused = refusalOf(req.raw.socket);
    if (refused) throw refused;
  });
  opts.services.connections?.watch(app.server);
  if (opts.logger) {
    // When the connection's answer ends (also for streams that take the socket over, which never
    // reach onResponse).
    app.addHook('onRequest', async (req, reply) => {
      const startedAt = performance.now();
      reply.raw.once('close', () => {
        const params = req.params as Record<string, unknown> | undefined;
        const route = req.routeOptions.url ?? null;
        const status = reply.raw.headersSent ? reply.raw.statusCode : 499;
        req.log[status < 400 && route !== null && ROUTINE_ROUTES.has(route) ? 'debug' : 'info'](
          {
            method: req.method,
            route,
            url: safeUrl(req.url),
            status,
            ms: Math.round((performance.now() - startedAt) * 100) / 100,
            ...(req.principal ? { org: req.principal.orgId } : {}),
            ...(typeof params?.id === 'string' && params.id.startsWith('sb') ? { sandbox_id: params.id } : {}),
            ...(req.errorCode ? { error_code: req.errorCode } : {}),
          },
          'request',
        );
      });
    });
  }
  const metrics = opts.services.metrics;
  if (metrics) {
    // Route patterns, not URLs: the series do not grow with sandboxes or ids.
    app.addHook('onResponse', async (req, reply) => {
      const route = req.routeOptions.url ?? 'unmatched';
      const status = String(reply.statusCode);
      metrics.httpRequests.inc({ route, method: req.method, status });
      metrics.httpDuration.observe({ route, method: req.method }, reply.elapsedTime / 1000);
      if (req.errorCode) {
        metrics.errors.inc({ code: req.errorCode });
        if (reply.statusCode === 429) metrics.rejected.inc({ code: req.errorCode });
      }
    });
  }
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((req, reply) => {
    errorHandler(new ServiceError('ROUTE_NOT_FOUND', `no route for ${req.method} ${req.url.split('?')[0]}`), req, reply);
  });

  const routes = collectRoutes(app);
  await registerRoutes(app, opts.services);
  let doc: Record<string, unknown> | undefined;
  const openapi = () => (doc ??= buildOpenApi(routes, opts.services.config.version));
  app.get('/openapi.json', async () => openapi());
  docsRoutes(app, openapi);
  consoleRoutes(app, opts.services.config.gateway);
  manualRoutes(app);
  return app;
}
