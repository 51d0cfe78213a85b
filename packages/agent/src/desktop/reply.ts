import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Route, RouteContext } from '../context.js';

export const ok = (extra: Record<string, unknown> = {}) => ({ success: true, ...extra });

export const both = (path: string, handler: Route['handler']): Route[] => [
  { method: 'GET', path, handler },
  { method: 'POST', path, handler },
];

/** Asked for the bytes themselves (Accept: image/png, or ?raw=true / ?format=png). */
export function wantsRaw(req: IncomingMessage, url: URL): boolean {
  const q = url.searchParams.get('raw') ?? url.searchParams.get('format');
  if (q === 'true' || q === '1' || q === 'png') return true;
  return /\bimage\/png\b/.test(String(req.headers.accept ?? ''));
}

/**
 * Bytes for a client that parses JSON (the official TypeScript client runs Buffer.from on what it
 * parsed, so only an array of byte values reaches it as bytes) or raw for any other (the Python
 * client, curl, our SDK).
 */
export function binary(ctx: RouteContext, bytes: Buffer, type: string): unknown {
  const accept = String(ctx.req.headers.accept ?? '');
  if (/\bapplication\/json\b/.test(accept) && !/\bimage\/|\bvideo\/|application\/octet-stream/.test(accept)) return [...bytes];
  return sendBytes(ctx.res, bytes, type);
}

export function sendBytes(res: ServerResponse, bytes: Buffer, type: string): undefined {
  res.writeHead(200, { 'content-type': type, 'content-length': bytes.length, 'cache-control': 'no-store' });
  res.end(bytes);
  return undefined;
}
