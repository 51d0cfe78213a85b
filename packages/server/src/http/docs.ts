import { join } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { REPO_ROOT } from '../config/index.js';
import { renderDocsPage } from './openapi.js';
import { serveAssets, type AssetManifest } from './assets.js';

/** Where `npm run build` puts the reference UI (packages/server/build-docs.mjs). */
export const DOCS_UI_DIR = join(REPO_ROOT, 'packages/server/dist/docs-ui');

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

function page(m: AssetManifest): string {
  const a = (name: string) => `/docs/assets/${m.assets[name]}`;
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
  const manifest = serveAssets(app, '/docs/assets', dir, ['bundle.js', 'styles.css', 'init.js']);
  const html = manifest ? page(manifest) : undefined;
  app.get('/docs', async (_req: FastifyRequest, reply: FastifyReply) => {
    void reply.header('content-security-policy', DOCS_CSP).header('x-content-type-options', 'nosniff').header('referrer-policy', 'no-referrer').header('cache-control', 'no-cache');
    return reply.type('text/html; charset=utf-8').send(html ?? renderDocsPage(openapi()));
  });
}
