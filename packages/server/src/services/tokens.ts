import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { generateKeyPairSync, createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { ServiceError } from '@sandboxd/protocol';

export interface SandboxClaims {
  sandboxId: string;
  orgId: string;
  expiresAt: number;
}

const ISSUER = 'sandboxd';
const AUDIENCE = 'sandbox-agent';

/**
 * Sandbox access tokens: EdDSA JWTs signed with a key kept 0600 in the data directory, so tokens
 * stay valid across restarts. Verified tokens are cached until their expiry (the gateway's hot path).
 */
export class TokenService {
  private privateKey: KeyObject;
  private publicKey: KeyObject;
  private cache = new Map<string, SandboxClaims>();

  constructor(keyFile: string, private ttlSeconds: number) {
    if (!existsSync(keyFile)) {
      mkdirSync(dirname(keyFile), { recursive: true, mode: 0o700 });
      const { privateKey } = generateKeyPairSync('ed25519');
      writeFileSync(keyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
    }
    this.privateKey = createPrivateKey(readFileSync(keyFile));
    this.publicKey = createPublicKey(this.privateKey);
  }

  async issue(sandboxId: string, orgId: string): Promise<{ token: string; expiresAt: Date }> {
    const nowS = Math.floor(Date.now() / 1000);
    const exp = nowS + this.ttlSeconds;
    const token = await new SignJWT({ org: orgId })
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
        this.cache.delete(token);
        throw new ServiceError('TOKEN_EXPIRED', 'token expired: refresh it with POST /v1/sandboxes/{id}/token/refresh');
      }
      if (cached.sandboxId !== sandboxId) throw new ServiceError('AUTHENTICATION_ERROR', 'token was issued for another sandbox');
      return cached;
    }
    let claims: SandboxClaims;
    try {
      const { payload } = await jwtVerify(token, this.publicKey, { algorithms: ['EdDSA'], issuer: ISSUER, audience: AUDIENCE });
      claims = { sandboxId: String(payload.sub), orgId: String(payload.org), expiresAt: Number(payload.exp) };
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) {
        throw new ServiceError('TOKEN_EXPIRED', 'token expired: refresh it with POST /v1/sandboxes/{id}/token/refresh');
      }
      throw new ServiceError('AUTHENTICATION_ERROR', 'invalid token');
    }
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(token, claims);
    if (claims.sandboxId !== sandboxId) throw new ServiceError('AUTHENTICATION_ERROR', 'token was issued for another sandbox');
    return claims;
  }
}
