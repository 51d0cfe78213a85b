import { AGENT_OPERATIONS, OPERATIONS, TAGS, type OperationDoc } from './api-docs.js';
import { AGENT_RESPONSES, RESPONSES, type Payload, type SuccessDoc } from './responses/index.js';
import type { FastifyInstance, RouteOptions } from 'fastify';
import { AGENT_ROUTES, ERROR_CODES, type ErrorCode } from '@sandboxd/protocol';

interface CollectedRoute {
  method: string;
  url: string;
  schema?: RouteOptions['schema'];
}

/** Records every route as it is registered, with the schemas that validate it. */
export function collectRoutes(app: FastifyInstance): CollectedRoute[] {
  const routes: CollectedRoute[] = [];
  app.addHook('onRoute', (r) => {
    const methods = Array.isArray(r.method) ? r.method : [r.method];
    for (const m of methods) if (m !== 'HEAD') routes.push({ method: m, url: r.url, schema: r.schema });
  });
  return routes;
}

const plain = (schema: unknown) => JSON.parse(JSON.stringify(schema ?? {}));

function parameters(url: string, schema: RouteOptions['schema']): unknown[] {
  const out: unknown[] = [];
  for (const m of url.matchAll(/:([A-Za-z_]+)|\{([A-Za-z_]+)\}/g)) {
    out.push({ name: m[1] ?? m[2], in: 'path', required: true, schema: { type: 'string' } });
  }
  const q = plain(schema?.querystring) as { properties?: Record<string, unknown>; required?: string[] };
  for (const [name, s] of Object.entries(q.properties ?? {})) out.push({ name, in: 'query', required: q.required?.includes(name) ?? false, schema: s });
  return out;
}

const ERROR_RESPONSE = {
  description: 'error (flat body: error, message, code, request_id)',
  content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
};

/**
 * The error responses of an operation, by status, each naming its codes: the operation's own,
 * AUTHENTICATION_ERROR where credentials are needed, INTERNAL_ERROR (a bug, with an incident id)
 * everywhere.
 */
function errorResponses(doc: OperationDoc | undefined, authenticated: boolean): Record<string, unknown> {
  const codes = new Set<ErrorCode>(doc?.errors ?? []);
  if (authenticated) codes.add('AUTHENTICATION_ERROR');
  codes.add('INTERNAL_ERROR');
  const byStatus = new Map<number, ErrorCode[]>();
  for (const c of codes) byStatus.set(ERROR_CODES[c].status, [...(byStatus.get(ERROR_CODES[c].status) ?? []), c]);
  const out: Record<string, unknown> = {};
  for (const [status, list] of [...byStatus].sort((a, b) => a[0] - b[0])) {
    out[String(status)] = {
      description: list.join(', '),
      content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' }, example: exampleError(list[0]!) } },
    };
  }
  return out;
}

function exampleError(code: ErrorCode): Record<string, unknown> {
  const def: { status: number; title?: string } = ERROR_CODES[code];
  const body: Record<string, unknown> = { error: def.title ?? code.toLowerCase().replace(/_/g, ' '), message: def.title ?? code.toLowerCase().replace(/_/g, ' '), code, request_id: '5f0c6a1e-…' };
  if (def.status >= 500) body.incident_id = 'inc_0123456789abcdef';
  if (def.status === 429 || def.status === 502 || def.status === 503) body.retry_after = 1;
  return body;
}

function mediaType(p: Payload, declared?: unknown): Record<string, unknown> {
  const out: Record<string, unknown> = { schema: plain(declared ?? p.schema) };
  if (p.example !== undefined) out.example = p.example;
  if (p.examples) out.examples = p.examples;
  if (p.events) out['x-events'] = plain(p.events);
  return out;
}

const content = (c: Record<string, Payload>, declaredJson?: unknown) =>
  Object.fromEntries(Object.entries(c).map(([type, p]) => [type, mediaType(p, type === 'application/json' ? declaredJson : undefined)]));

/**
 * The success responses of an operation (responses/). `declared`: the route's own response
 * schema for that status, which is what Fastify serializes with, so it is the one shown.
 */
function successResponses(doc: SuccessDoc | undefined, declared: unknown): Record<string, unknown> {
  if (!doc) return { '200': { description: 'success', ...(declared ? { content: { 'application/json': { schema: plain(declared) } } } : {}) } };
  const out: Record<string, unknown> = {};
  if (doc.status === 101) {
    out['101'] = {
      description: `${doc.description} Every message is a JSON text frame: their schemas and examples are in x-websocket (client: what the client sends; server: what it receives).`,
      headers: {
        Upgrade: { description: 'websocket', schema: { type: 'string', const: 'websocket' } },
        'Sec-WebSocket-Accept': { description: 'the handshake answer (RFC 6455)', schema: { type: 'string' } },
      },
      // OpenAPI has no words for what a WebSocket carries once open: the messages each side sends.
      'x-websocket': { client: mediaType(doc.frames!.client), server: mediaType(doc.frames!.server) },
    };
  } else {
    out[String(doc.status)] = { description: doc.description, content: content(doc.content ?? {}, declared) };
  }
  for (const m of doc.more ?? []) out[String(m.status)] = { description: m.description, content: content(m.content) };
  return out;
}

/** The request body: the route's schema (it validates requests) or the document's, with the examples. */
function requestBody(declared: unknown, doc: SuccessDoc | undefined, fallbackType?: string): Record<string, unknown> | undefined {
  if (doc?.request) return { required: doc.request.required ?? true, content: content(doc.request.content, declared) };
  if (declared) return { required: true, content: { 'application/json': { schema: plain(declared) } } };
  if (fallbackType) return { required: true, content: { [fallbackType]: { schema: { type: 'object' } } } };
  return undefined;
}

const declaredResponse = (schema: RouteOptions['schema'], doc: SuccessDoc | undefined) => (schema?.response as Record<string, unknown> | undefined)?.[String(doc?.status ?? 200)];

/** OpenAPI 3.1 for the lifecycle API (from the registered routes) and the agent API (from protocol); E2B's API (/e2b/, routes/e2b.ts) is E2B's to describe. */
export function buildOpenApi(routes: CollectedRoute[], version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    if (r.url === '/openapi.json' || r.url.startsWith('/internal/') || r.url === '/docs' || r.url.startsWith('/docs/') || r.url === '/' || r.url === '/console' || r.url.startsWith('/console/') || r.url === '/manual' || r.url.startsWith('/manual/') || r.url.startsWith('/e2b/') || r.url === '/mcp' || r.url.includes('*')) continue;
    const path = r.url.replace(/:([A-Za-z_]+)/g, '{$1}');
    const doc = OPERATIONS[`${r.method} ${path}`];
    const success = RESPONSES[`${r.method} ${path}`];
    const op: Record<string, unknown> = {
      operationId: `${r.method.toLowerCase()}${path.replace(/[{}]/g, '').replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`,
      tags: [doc?.tag ?? 'service'],
      ...(doc ? { summary: doc.summary, description: doc.description } : {}),
      parameters: parameters(r.url, r.schema),
      responses: {
        ...successResponses(success, declaredResponse(r.schema, success)),
        ...errorResponses(doc, path.startsWith('/v1') && !path.startsWith('/v1/templates/files/upload/')),
        default: ERROR_RESPONSE,
      },
    };
    if (r.url === '/health' || r.url.startsWith('/v1/templates/files/upload/')) op.security = [];
    // The events streams also open with ?token=<events token> (browsers' EventSource sends no headers).
    if ((plain(r.schema?.querystring) as { properties?: Record<string, unknown> }).properties?.token) op.security = [{ apiKey: [] }, { bearerKey: [] }, { eventsToken: [] }];
    // Bodyless POSTs (pause, token refresh, ...) take none: an empty JSON body is accepted too.
    const body = requestBody(r.schema?.body, success);
    if (body) op.requestBody = body;
    (paths[path] ??= {})[r.method.toLowerCase()] = op;
  }
  for (const a of AGENT_ROUTES) {
    const path = `/agent${a.path}`;
    const doc = AGENT_OPERATIONS[`${a.method} ${a.path}`];
    const success = AGENT_RESPONSES[`${a.method} ${a.path}`];
    const op: Record<string, unknown> = {
      operationId: `agent${a.method[0]}${a.method.slice(1).toLowerCase()}${a.path.replace(/[{}]/g, '').replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`,
      tags: [doc?.tag ?? 'system'],
      summary: doc?.summary ?? a.summary,
      description: `${doc ? `${doc.description}\n\n` : ''}Served at the sandbox's public_host as \`${a.path}\`${a.websocket ? ' (WebSocket upgrade)' : ''}, with its auth_token.`,
      security: [{ sandboxToken: [] }],
      servers: [{ url: '{public_host}', variables: { public_host: { default: 'http://127.0.0.1:40000' } } }],
      parameters: parameters(a.path, a.query ? { querystring: a.query } : undefined),
      responses: { ...successResponses(success, undefined), ...errorResponses(doc, true), default: ERROR_RESPONSE },
    };
    const body = requestBody(a.body, success, a.contentType);
    if (body) op.requestBody = body;
    (paths[path] ??= {})[a.method.toLowerCase()] = op;
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'sandboxd API',
      version,
      description: 'Lifecycle API (under /v1) and the per-sandbox agent API (paths under /agent here; served at each sandbox public_host root).',
    },
    servers: [{ url: '/' }],
    security: [{ apiKey: [] }, { bearerKey: [] }],
    tags: TAGS,
    paths,
    components: {
      securitySchemes: {
        apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
        bearerKey: { type: 'http', scheme: 'bearer', description: 'the API key as a bearer token' },
        sandboxToken: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'the sandbox auth_token' },
        eventsToken: { type: 'apiKey', in: 'query', name: 'token', description: 'an events token from POST /v1/events/token (an API key in the URL is refused)' },
      },
      schemas: {
        Error: {
          type: 'object',
          required: ['error', 'message', 'code'],
          properties: {
            error: { type: 'string' },
            message: { type: 'string' },
            code: { type: 'string', enum: Object.keys(ERROR_CODES) },
            request_id: { type: 'string' },
            retry_after: { type: 'integer', description: 'on 429, 502 and 503: seconds to wait before retrying (also the Retry-After header)' },
            incident_id: { type: 'string', description: "on 5xx: the id of the daemon's (or the agent's) log line about this failure" },
          },
        },
      },
    },
  };
}

const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);

/** A self-contained, browsable reference page (no external assets: works offline). */
export function renderDocsPage(doc: Record<string, any>): string {
  const sections = Object.entries(doc.paths as Record<string, Record<string, any>>)
    .map(([path, ops]) =>
      Object.entries(ops)
        .map(([method, op]) => {
          const params = (op.parameters ?? []).map((p: any) => `<li><code>${esc(p.name)}</code> (${p.in}${p.required ? ', required' : ''})</li>`).join('');
          const body = op.requestBody?.content ? `<details><summary>request body</summary><pre>${esc(JSON.stringify(Object.values(op.requestBody.content)[0], null, 2))}</pre></details>` : '';
          return `<section id="${esc(op.operationId)}"><h3><span class="m ${method}">${method.toUpperCase()}</span> <code>${esc(path)}</code></h3>${op.summary ? `<p>${esc(op.summary)}</p>` : ''}${params ? `<ul>${params}</ul>` : ''}${body}</section>`;
        })
        .join(''),
    )
    .join('');
  return `<!doctype html><html><head><meta charset="utf-8"><title>${esc(doc.info.title)} reference</title>
<style>body{font:15px system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}section{border-top:1px solid #ddd;padding:.4rem 0}
.m{display:inline-block;min-width:4.5rem;font-size:.8rem;color:#fff;border-radius:3px;padding:1px 6px;text-align:center}.get{background:#2a7}.post{background:#27c}.put,.patch{background:#c82}.delete{background:#c33}
pre{background:#f6f6f6;padding:.5rem;overflow:auto}</style></head><body><h1>${esc(doc.info.title)} ${esc(doc.info.version)}</h1>
<p>${esc(doc.info.description)} Machine-readable: <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1).</p>${sections}</body></html>`;
}
