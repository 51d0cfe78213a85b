import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { REPO_ROOT, type Config } from '../config/index.js';
import { serveAssets } from './assets.js';

/** Where `npm run build` puts the console (packages/console/build.mjs). */
export const CONSOLE_DIR = join(REPO_ROOT, 'packages/console/dist/console-ui');

/**
 * The console loads its own script and styles, and calls this origin and the sandboxes' gateway
 * (their public_host: the agent API and its terminal WebSocket), nothing else. xterm.js adds style
 * elements of its own: they carry the page's nonce, new for every load of the page.
 */
export function consoleCsp(gatewaySources: string[], styleNonce: string): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    `style-src 'self' 'nonce-${styleNonce}'`,
    "img-src 'self' data:",
    `connect-src 'self' ${gatewaySources.join(' ')}`.trim(),
    // A desktop sandbox's screen: noVNC on its preview, in a frame (packages/console/src/desktop.ts).
    `frame-src ${gatewaySources.filter((s) => s.startsWith('http')).join(' ') || "'none'"}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** Where sandboxes' public_host URLs point, as CSP sources (HTTP and WebSocket). */
export function gatewaySources(g: Config['gateway']): string[] {
  if (g.mode === 'host') {
    const port = g.hostModePort === 80 ? '' : `:${g.hostModePort}`;
    return [`http://*.${g.domain}${port}`, `ws://*.${g.domain}${port}`];
  }
  const host = g.publicHostname.includes(':') ? `[${g.publicHostname}]` : g.publicHostname;
  return [`http://${host}:*`, `ws://${host}:*`];
}

/**
 * GET /console: the web console (packages/console), its assets under /console/assets. Without a
 * build of it, /console answers 404 saying how to build it.
 */
export function consoleRoutes(app: FastifyInstance, gateway: Config['gateway'], dir = CONSOLE_DIR): void {
  const m = serveAssets(app, '/console/assets', dir, ['console.js', 'console.css']);
  const sources = gatewaySources(gateway);
  const page = (nonce: string) =>
    m
      ? `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="style-nonce" content="${nonce}">
<title>sandboxd console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/console/assets/${m.assets['console.css']}">
</head><body><main id="app"></main>
<script type="module" src="/console/assets/${m.assets['console.js']}"></script>
</body></html>
`
      : undefined;
  // The service's root is where a person lands first: the console.
  app.get('/', async (_req, reply) => reply.redirect('/console', 302));
  app.get('/console', async (_req, reply) => {
    const nonce = randomBytes(16).toString('base64');
    const html = page(nonce);
    if (!html) return reply.code(404).type('text/plain; charset=utf-8').send('the console is not built: run npm run build\n');
    void reply.header('content-security-policy', consoleCsp(sources, nonce)).header('x-content-type-options', 'nosniff').header('referrer-policy', 'no-referrer').header('cache-control', 'no-store');
    return reply.type('text/html; charset=utf-8').send(html);
  });
}
