import type { FastifyRequest } from 'fastify';
import type { ApiScope } from '@sandboxd/protocol';
import { requireScope, type KeyService, type Principal } from '../services/keys.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

/** The API key from `X-API-Key`, `Authorization: Bearer`, or (for SSE in browsers) `?token=`. */
export function presentedKey(req: FastifyRequest, allowQuery = false): string | undefined {
  const header = req.headers['x-api-key'];
  if (typeof header === 'string' && header) return header.trim();
  const auth = req.headers.authorization;
  if (auth && /^bearer\s+/i.test(auth)) return auth.replace(/^bearer\s+/i, '').trim();
  if (allowQuery) {
    const t = (req.query as Record<string, unknown> | undefined)?.token;
    if (typeof t === 'string') return t;
  }
  return undefined;
}

/** A preHandler that authenticates the key (401) and checks the scope (403). */
export function guard(keys: KeyService, scope: ApiScope, opts: { allowQueryToken?: boolean } = {}) {
  return async (req: FastifyRequest): Promise<void> => {
    const p = await keys.authenticate(presentedKey(req, opts.allowQueryToken));
    requireScope(p, scope);
    req.principal = p;
  };
}

export function principalOf(req: FastifyRequest): Principal {
  if (!req.principal) throw new Error('route without guard');
  return req.principal;
}
