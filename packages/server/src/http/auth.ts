import type { FastifyRequest } from 'fastify';
import { ServiceError, type ApiScope } from '@sandboxd/protocol';
import { requireScope, type KeyService, type Principal } from '../services/keys.js';
import type { TokenService } from '../services/tokens.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
    /** Set when an events token limited to one sandbox opened the request. */
    eventsSandboxId?: string | null;
  }
}

/** The API key from `X-API-Key` or `Authorization: Bearer` (never from the URL: logs keep URLs). */
export function presentedKey(req: FastifyRequest): string | undefined {
  const header = req.headers['x-api-key'];
  if (typeof header === 'string' && header) return header.trim();
  const auth = req.headers.authorization;
  if (auth && /^bearer\s+/i.test(auth)) return auth.replace(/^bearer\s+/i, '').trim();
  return undefined;
}

function queryToken(req: FastifyRequest): string | undefined {
  const t = (req.query as Record<string, unknown> | undefined)?.token;
  return typeof t === 'string' && t !== '' ? t : undefined;
}

/** A preHandler that authenticates the key (401) and checks the scope (403). */
export function guard(keys: KeyService, scope: ApiScope) {
  return async (req: FastifyRequest): Promise<void> => {
    const key = presentedKey(req);
    if (key === undefined && queryToken(req) !== undefined) {
      throw new ServiceError('AUTHENTICATION_ERROR', 'API keys are not accepted in the URL (?token=), where proxies and logs keep them: send the key in the X-API-Key or Authorization: Bearer header');
    }
    const p = await keys.authenticate(key);
    requireScope(p, scope);
    req.principal = p;
    await keys.share?.admit(p.orgId);
  };
}

/** The admin API's preHandler: a key with `admin` (401, 403), of the operator's organization (403). */
export function operatorOnly(keys: KeyService) {
  return async (req: FastifyRequest): Promise<void> => {
    await guard(keys, 'admin')(req);
    await keys.requireOperator(principalOf(req));
  };
}

/** A preHandler that only authenticates the key (401): for what any key may ask of itself. */
export function authenticated(keys: KeyService) {
  return async (req: FastifyRequest): Promise<void> => {
    req.principal = await keys.authenticate(presentedKey(req));
    await keys.share?.admit(req.principal.orgId);
  };
}

/**
 * The events endpoints' guard: an API key in a header, or in `?token=` an events token (browsers'
 * EventSource cannot send headers). Whatever else is in `?token=` (an API key, a sandbox token) is
 * refused with a 401 saying what to send. A token works only while the key that made it is live.
 */
export function eventsGuard(keys: KeyService, tokens: TokenService) {
  return async (req: FastifyRequest): Promise<void> => {
    const t = queryToken(req);
    if (t === undefined || presentedKey(req) !== undefined) {
      await guard(keys, 'sandboxes:read')(req);
      req.eventsSandboxId = null;
      return;
    }
    const claims = await tokens.verifyEvents(t);
    const p = await keys.authenticateKeyId(claims.keyId, claims.orgId);
    requireScope(p, 'sandboxes:read');
    req.principal = p;
    req.eventsSandboxId = claims.sandboxId;
    await keys.share?.admit(p.orgId);
  };
}

/** An events token limited to one sandbox opens that sandbox's stream only (403 otherwise). */
export function requireEventsScope(req: FastifyRequest, sandboxId: string | null): void {
  const only = req.eventsSandboxId;
  if (only && only !== sandboxId) {
    throw new ServiceError('PERMISSION_DENIED', `this events token is for sandbox ${only} only: open /v1/sandboxes/${only}/events`);
  }
}

export function principalOf(req: FastifyRequest): Principal {
  if (!req.principal) throw new Error('route without guard');
  return req.principal;
}
