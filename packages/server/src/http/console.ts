import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { REPO_ROOT } from '../config.js';
import { serveAssets } from './assets.js';

/** Where `npm run build` puts the console (packages/console/build.mjs). */
export const CONSOLE_DIR = join(REPO_ROOT, 'packages/console/dist/console-ui');

/** The console loads its own script and styles and calls this origin, nothing else. */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/**
 * GET /console: the web console (packages/console), its assets under /console/assets. Without a
 * build of it, /console answers 404 saying how to build it.
 */
export function consoleRoutes(app: FastifyInstance, dir = CONSOLE_DIR): void {
  const m = serveAssets(app, '/console/assets', dir, ['console.js', 'console.css']);
  const html = m
    ? `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>sandboxd console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/console/assets/${m.assets['console.css']}">
</head><body><main id="app"></main>
<script src="/console/assets/${m.assets['console.js']}"></script>
</body></html>
`
    : undefined;
  // The service's root is where a person lands first: the console.
  app.get('/', async (_req, reply) => reply.redirect('/console', 302));
  app.get('/console', async (_req, reply) => {
    if (!html) return reply.code(404).type('text/plain; charset=utf-8').send('the console is not built: run npm run build\n');
    void reply.header('content-security-policy', CONSOLE_CSP).header('x-content-type-options', 'nosniff').header('referrer-policy', 'no-referrer').header('cache-control', 'no-cache');
    return reply.type('text/html; charset=utf-8').send(html);
  });
}
