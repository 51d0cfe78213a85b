import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';

/** What a build of browser assets leaves beside them: logical name → content-hashed file name. */
export interface AssetManifest {
  assets: Record<string, string>;
}

const TYPES: Record<string, string> = { js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8' };

/**
 * Serves the assets a build wrote to `dir` (its manifest.json names them, each with a `.gz` beside
 * it) at `${prefix}/:name`: by exact name only, cached for good (the names change with the
 * content), gzipped for clients that take it. Returns the manifest, or undefined (and serves
 * nothing) when the build is missing or lacks one of `required`.
 */
export function serveAssets(app: FastifyInstance, prefix: string, dir: string, required: string[]): AssetManifest | undefined {
  let manifest: AssetManifest;
  try {
    manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as AssetManifest;
  } catch {
    return undefined;
  }
  if (!required.every((r) => typeof manifest.assets?.[r] === 'string')) return undefined;
  const files = new Map<string, { body: Buffer; gzip: Buffer; type: string }>();
  for (const name of Object.values(manifest.assets)) {
    const type = TYPES[name.split('.').pop()!];
    if (!type || !/^[\w.-]+$/.test(name)) continue;
    files.set(name, { body: readFileSync(join(dir, name)), gzip: readFileSync(join(dir, `${name}.gz`)), type });
  }
  app.get<{ Params: { name: string } }>(`${prefix}/:name`, async (req, reply) => {
    const f = files.get(req.params.name);
    if (!f) throw new ServiceError('ROUTE_NOT_FOUND', `no asset ${JSON.stringify(req.params.name.slice(0, 100))} under ${prefix}`);
    const gz = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
    void reply.type(f.type).header('cache-control', 'public, max-age=31536000, immutable').header('x-content-type-options', 'nosniff').header('vary', 'accept-encoding');
    if (gz) void reply.header('content-encoding', 'gzip');
    return reply.send(gz ? f.gzip : f.body);
  });
  return manifest;
}
