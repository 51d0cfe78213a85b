import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { generateKeyPairSync, createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import { SignJWT, decodeJwt, jwtVerify, errors as joseErrors } from 'jose';
import { ServiceError } from '@sandboxd/protocol';

export interface SandboxClaims {
  sandboxId: string;
  orgId: string;
  /** The API key that made it (absent in tokens made before keys were recorded in them). */
  keyId?: string;
  expiresAt: number;
}

export interface EventsClaims {
  orgId: string;
  /** The API key that asked for the token: it must still be live when the token is used. */
  keyId: string;
  /** Only this sandbox's events, or null for the organization's. */
  sandboxId: string | null;
  expiresAt: number;
}

const ISSUER = 'sandboxd';
const AUDIENCE = 'sandbox-agent';
/**
 * Events tokens have their own audience, `use` claim and header type, so neither kind of token is
 * ever taken for the other: the gateway (AUDIENCE only) refuses an events token, the events
 * endpoints (EVENTS_AUDIENCE only) refuse a sandbox token.
 */
const EVENTS_AUDIENCE = 'sandboxd-events';
const EVENTS_USE = 'events';
const EVENTS_TYP = 'sandboxd-events+jwt';
const NEW_EVENTS_TOKEN = 'get an events token from POST /v1/events/token';
/** Preview tokens (a signed link's, and the browser session's cookie that it sets): their own audience, type and uses. */
const PREVIEW_AUDIENCE = 'sandboxd-preview';
const PREVIEW_TYP = 'sandboxd-preview+jwt';
export type PreviewTokenKind = 'link' | 'session';

export interface PreviewClaims {
  sandboxId: string;
  port: number;
  /** Its holder may wake the sandbox (the link was asked for by a key that may resume it). */
  wake: boolean;
  /** The API key the link was asked for with (a session keeps its link's). */
  keyId?: string;
  expiresAt: number;
}

/**
 * Sandbox access tokens and events tokens: EdDSA JWTs signed with a key kept 0600 in the data
 * directory, so tokens stay valid across restarts. Verified sandbox tokens are cached until their
 * expiry (the gateway's hot path).
 */
export class TokenService {
  private privateKey: KeyObject;
  private publicKey: KeyObject;
  /** Verified sandbox tokens, oldest first (Map order), and which tokens each sandbox has cached. */
  private cache = new Map<string, SandboxClaims>();
  private bySandbox = new Map<string, Set<string>>();

  /**
   * API keys revoked (a key is never un-revoked): the sandbox and preview tokens they made stop
   * working, cached or not. Kept in step with the store by services/revocations.ts.
   */
  private revokedKeys = new Set<string>();

  /** `cacheMax`: verified sandbox tokens kept; past it the oldest is dropped. */
  constructor(
    keyFile: string | { pem: string },
    private ttlSeconds: number,
    private cacheMax = 10_000,
  ) {
    if (typeof keyFile !== 'string') {
      this.privateKey = createPrivateKey(keyFile.pem);
      this.publicKey = createPublicKey(this.privateKey);
      return;
    }
    if (!existsSync(keyFile)) {
      mkdirSync(dirname(keyFile), { recursive: true, mode: 0o700 });
      const { privateKey } = generateKeyPairSync('ed25519');
      writeFileSync(keyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
    }
    this.privateKey = createPrivateKey(readFileSync(keyFile));
    this.publicKey = createPublicKey(this.privateKey);
  }

  /** A new signing key, PEM (PKCS8). */
  static newKeyPem(): string {
    return generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  }

  /** These API keys were revoked. */
  keysRevoked(ids: Iterable<string>): void {
    for (const id of ids) this.revokedKeys.add(id);
  }

  private checkKey(keyId: string | undefined, what: string): void {
    if (keyId !== undefined && this.revokedKeys.has(keyId)) throw new ServiceError('AUTHENTICATION_ERROR', `the API key that made this ${what} was revoked`);
  }

  /** A sandbox's access token, made with API key `keyId` (revoking the key ends the token). */
  async issue(sandboxId: string, orgId: string, keyId?: string): Promise<{ token: string; expiresAt: Date }> {
    const nowS = Math.floor(Date.now() / 1000);
    const exp = nowS + this.ttlSeconds;
    const token = await new SignJWT({ org: orgId, ...(keyId ? { key: keyId } : {}) })
      .setProtectedHeader({ alg: 'EdDSA', typ: 'JWT' })
      .setSubject(sandboxId)
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setIssuedAt(nowS)
      .setJti(Math.random().toString(36).slice(2))
      .setExpirationTime(exp)
      .sign(this.privateKey);
    return { token, expiresAt: new Date(exp * 1000) };
  }

  /** Verifies a token for `sandboxId`; throws 401 (TOKEN_EXPIRED or AUTHENTICATION_ERROR). */
  async verify(token: string, sandboxId: string): Promise<SandboxClaims> {
    const cached = this.cache.get(token);
    if (cached) {
      if (cached.expiresAt * 1000 <= Date.now()) {
        this.uncache(token, cached.sandboxId);
        throw new ServiceError('TOKEN_EXPIRED', 'token expired: refresh it with POST /v1/sandboxes/{id}/token/refresh');
      }
      if (cached.sandboxId !== sandboxId) throw new ServiceError('AUTHENTICATION_ERROR', 'token was issued for another sandbox');
      this.checkKey(cached.keyId, 'token');
      return cached;
    }
    let claims: SandboxClaims;
    try {
      const { payload } = await jwtVerify(token, this.publicKey, { algorithms: ['EdDSA'], issuer: ISSUER, audience: AUDIENCE });
      if (payload.use !== undefined) throw new Error('not a sandbox token');
      claims = { sandboxId: String(payload.sub), orgId: String(payload.org), ...(typeof payload.key === 'string' ? { keyId: payload.key } : {}), expiresAt: Number(payload.exp) };
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) {
        throw new ServiceError('TOKEN_EXPIRED', 'token expired: refresh it with POST /v1/sandboxes/{id}/token/refresh');
      }
      throw new ServiceError('AUTHENTICATION_ERROR', 'invalid token');
    }
    this.remember(token, claims);
    if (claims.sandboxId !== sandboxId) throw new ServiceError('AUTHENTICATION_ERROR', 'token was issued for another sandbox');
    this.checkKey(claims.keyId, 'token');
    return claims;
  }

  /** A deleted sandbox's tokens leave the cache (they could only fail its lookup now). */
  forget(sandboxId: string): void {
    const tokens = this.bySandbox.get(sandboxId);
    if (!tokens) return;
    for (const t of tokens) this.cache.delete(t);
    this.bySandbox.delete(sandboxId);
  }

  /** How many verified tokens are cached (for tests and the soak). */
  cachedTokens(): number {
    return this.cache.size;
  }

  private remember(token: string, claims: SandboxClaims): void {
    // Bounded: past the cap the oldest entry goes (a sandbox that is still used verifies it again).
    while (this.cache.size >= this.cacheMax) {
      const [oldest, c] = this.cache.entries().next().value as [string, SandboxClaims];
      this.uncache(oldest, c.sandboxId);
    }
    this.cache.set(token, claims);
    let set = this.bySandbox.get(claims.sandboxId);
    if (!set) this.bySandbox.set(claims.sandboxId, (set = new Set()));
    set.add(token);
  }

  private uncache(token: string, sandboxId: string): void {
    this.cache.delete(token);
    const set = this.bySandbox.get(sandboxId);
    if (!set) return;
    set.delete(token);
    if (set.size === 0) this.bySandbox.delete(sandboxId);
  }

  /** A short-lived token for the events streams of `orgId` (only `sandboxId`'s when given). */
  async issueEvents(orgId: string, keyId: string, sandboxId: string | null, ttlSeconds: number): Promise<{ token: string; expiresAt: Date }> {
    const nowS = Math.floor(Date.now() / 1000);
    const exp = nowS + ttlSeconds;
    const token = await new SignJWT({ org: orgId, kid: keyId, use: EVENTS_USE, ...(sandboxId ? { sbx: sandboxId } : {}) })
      .setProtectedHeader({ alg: 'EdDSA', typ: EVENTS_TYP })
      .setSubject(keyId)
      .setIssuer(ISSUER)
      .setAudience(EVENTS_AUDIENCE)
      .setIssuedAt(nowS)
      .setJti(Math.random().toString(36).slice(2))
      .setExpirationTime(exp)
      .sign(this.privateKey);
    return { token, expiresAt: new Date(exp * 1000) };
  }

  /**
   * Verifies what came in `?token=` on an events endpoint: only an events token. An API key there
   * (it would end up in proxy and access logs) and a sandbox token are refused with a 401 that says
   * what to send instead.
   */
  async verifyEvents(token: string): Promise<EventsClaims> {
    if (token.split('.').length !== 3) {
      throw new ServiceError(
        'AUTHENTICATION_ERROR',
        `API keys are not accepted in the URL (?token=), where proxies and logs keep them: send the key in the X-API-Key or Authorization: Bearer header, or ${NEW_EVENTS_TOKEN} and pass that as ?token=`,
      );
    }
    try {
      const { payload } = await jwtVerify(token, this.publicKey, { algorithms: ['EdDSA'], issuer: ISSUER, audience: EVENTS_AUDIENCE, typ: EVENTS_TYP });
      if (payload.use !== EVENTS_USE || typeof payload.org !== 'string' || typeof payload.kid !== 'string') throw new Error('not an events token');
      return { orgId: payload.org, keyId: payload.kid, sandboxId: typeof payload.sbx === 'string' ? payload.sbx : null, expiresAt: Number(payload.exp) };
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw new ServiceError('TOKEN_EXPIRED', `events token expired: ${NEW_EVENTS_TOKEN}`);
      const aud = (() => {
        try {
          return decodeJwt(token).aud;
        } catch {
          return undefined;
        }
      })();
      if (aud === AUDIENCE) throw new ServiceError('AUTHENTICATION_ERROR', `a sandbox auth_token does not open the events streams: ${NEW_EVENTS_TOKEN}`);
      throw new ServiceError('AUTHENTICATION_ERROR', `invalid events token: ${NEW_EVENTS_TOKEN}`);
    }
  }

  /** Verified preview tokens, by kind and token (a browser sends its session cookie on every request). */
  private previewCache = new Map<string, PreviewClaims>();

  /**
   * A token that opens one port's preview of one sandbox: `link` goes in a signed URL (short-lived,
   * it is seen in a browser's history), `session` in the cookie that the link sets.
   */
  async issuePreview(kind: PreviewTokenKind, sandboxId: string, port: number, wake: boolean, ttlSeconds: number, keyId?: string): Promise<{ token: string; expiresAt: Date }> {
    const nowS = Math.floor(Date.now() / 1000);
    const exp = nowS + ttlSeconds;
    const token = await new SignJWT({ use: `preview-${kind}`, port, wake, ...(keyId ? { key: keyId } : {}) })
      .setProtectedHeader({ alg: 'EdDSA', typ: PREVIEW_TYP })
      .setSubject(sandboxId)
      .setIssuer(ISSUER)
      .setAudience(PREVIEW_AUDIENCE)
      .setIssuedAt(nowS)
      .setJti(Math.random().toString(36).slice(2))
      .setExpirationTime(exp)
      .sign(this.privateKey);
    return { token, expiresAt: new Date(exp * 1000) };
  }

  /** Verifies a preview token of `kind` for this sandbox's port; throws 401 otherwise. */
  async verifyPreview(token: string, kind: PreviewTokenKind, sandboxId: string, port: number): Promise<PreviewClaims> {
    const key = `${kind} ${token}`;
    let claims = this.previewCache.get(key);
    if (!claims) {
      try {
        const { payload } = await jwtVerify(token, this.publicKey, { algorithms: ['EdDSA'], issuer: ISSUER, audience: PREVIEW_AUDIENCE, typ: PREVIEW_TYP });
        if (payload.use !== `preview-${kind}` || typeof payload.sub !== 'string' || !Number.isInteger(payload.port)) throw new Error('not a preview token');
        claims = { sandboxId: payload.sub, port: Number(payload.port), wake: payload.wake === true, ...(typeof payload.key === 'string' ? { keyId: payload.key } : {}), expiresAt: Number(payload.exp) };
      } catch (err) {
        if (err instanceof joseErrors.JWTExpired) {
          throw new ServiceError('TOKEN_EXPIRED', `the preview ${kind === 'link' ? 'link' : 'session'} expired: get a new link from GET /v1/sandboxes/{id}/ports/{port}`);
        }
        throw new ServiceError('AUTHENTICATION_ERROR', `invalid preview ${kind === 'link' ? 'link' : 'session'}`);
      }
      while (this.previewCache.size >= this.cacheMax) this.previewCache.delete(this.previewCache.keys().next().value as string);
      this.previewCache.set(key, claims);
    }
    if (claims.expiresAt * 1000 <= Date.now()) {
      this.previewCache.delete(key);
      throw new ServiceError('TOKEN_EXPIRED', 'the preview session expired: get a new link from GET /v1/sandboxes/{id}/ports/{port}');
    }
    if (claims.sandboxId !== sandboxId || claims.port !== port) throw new ServiceError('AUTHENTICATION_ERROR', `this preview ${kind} is for another sandbox or port`);
    this.checkKey(claims.keyId, `preview ${kind}`);
    return claims;
  }
}
