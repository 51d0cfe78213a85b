import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import { REPO_ROOT } from '../config.js';
import { renderDocsPage } from './openapi.js';

/** Where `npm run build` puts the reference UI (packages/server/build-docs.mjs). */
export const DOCS_UI_DIR = join(REPO_ROOT, 'packages/server/dist/docs-ui');

interface Manifest {
  swaggerUi: string;
  assets: Record<'bundle.js' | 'styles.css' | 'init.js', string>;
}

/**
 * What the page may load: its own scripts and styles only. Swagger UI sets styles through
 * attributes (hence 'unsafe-inline' for styles, never for scripts) and draws icons from data: URLs;
 * "try it out" calls this origin.
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Record<string, string> = { js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8' };

function readManifest(dir: string): Manifest | undefined {
  try {
    const m = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as Manifest;
    return m.assets?.['bundle.js'] && m.assets['styles.css'] && m.assets['init.js'] ? m : undefined;
  } catch {
    return undefined;
  }
}

function page(m: Manifest): string {
  const a = (name: keyof Manifest['assets']) => `/docs/assets/${m.assets[name]}`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>sandboxd API reference</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${a('styles.css')}">
</head><body>
<div id="reference"></div>
<script src="${a('bundle.js')}"></script>
<script src="${a('init.js')}"></script>
</body></html>
`;
}

/**
 * GET /docs: the API reference (Swagger UI over /openapi.json, bundled at build time, served from
 * here with a content security policy), and its assets under content-hashed names, cached for good
 * and sent gzipped to clients that take it. Without a build of the UI, /docs is the plain HTML
 * reference.
 */
export function docsRoutes(app: FastifyInstance, openapi: () => Record<string, unknown>, dir = DOCS_UI_DIR): void {
  const manifest = readManifest(dir);
  const files = new Map<string, { body: Buffer; gzip: Buffer; type: string }>();
  if (manifest) {
    for (const name of Object.values(manifest.assets)) {
      files.set(name, { body: readFileSync(join(dir, name)), gzip: readFileSync(join(dir, `${name}.gz`)), type: TYPES[name.split('.').pop()!]! });
    }
  }
  const html = manifest ? page(manifest) : undefined;

  app.get('/docs', async (_req: FastifyRequest, reply: FastifyReply) => {
    void reply.header('content-security-policy', DOCS_CSP).header('x-content-type-options', 'nosniff').header('referrer-policy', 'no-referrer').header('cache-control', 'no-cache');
    return reply.type('text/html; charset=utf-8').send(html ?? renderDocsPage(openapi()));
  });

  app.get<{ Params: { name: string } }>('/docs/assets/:name', async (req, reply) => {
    const f = files.get(req.params.name);
    if (!f) throw new ServiceError('ROUTE_NOT_FOUND', `no asset ${JSON.stringify(req.params.name.slice(0, 100))} under /docs/assets`);
    const gz = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
    void reply
      .type(f.type)
      .header('cache-control', 'public, max-age=31536000, immutable')
      .header('x-content-type-options', 'nosniff')
      .header('vary', 'accept-encoding');
    if (gz) void reply.header('content-encoding', 'gzip');
    return reply.send(gz ? f.gzip : f.body);
  });
}
