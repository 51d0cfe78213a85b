import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { ServiceError } from '@sandboxd/protocol';

/** How long a token control sends a node stays valid: short, a stolen one is soon worth nothing. */
export const NODE_TOKEN_TTL_SECONDS = 60;
const ISSUER = 'sandboxd-control';
const AUDIENCE_PREFIX = 'sandboxd-node:';

/**
 * Authentication between the roles of a cluster: control signs a short-lived token (HS256, with
 * the cluster's shared secret) naming the one node it is for; the node accepts only tokens for
 * itself, so a token taken from one node cannot drive another. The secret is at least 32 bytes.
 */
export class ClusterAuth {
  private readonly key: Uint8Array;
  private readonly cached = new Map<string, { token: string; renewAt: number }>();

  constructor(secret: string | Uint8Array) {
    this.key = typeof secret === 'string' ? new TextEncoder().encode(secret) : secret;
    if (this.key.length < 32) throw new Error('the cluster secret must be at least 32 bytes');
  }

  /** A token for calls to `nodeId`, renewed when half its life is gone. */
  async tokenFor(nodeId: string): Promise<string> {
    const now = Date.now();
    const hit = this.cached.get(nodeId);
    if (hit && hit.renewAt > now) return hit.token;
    const token = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setIssuer(ISSUER)
      .setAudience(`${AUDIENCE_PREFIX}${nodeId}`)
      .setIssuedAt()
      .setExpirationTime(`${NODE_TOKEN_TTL_SECONDS}s`)
      .sign(this.key);
    this.cached.set(nodeId, { token, renewAt: now + (NODE_TOKEN_TTL_SECONDS * 1000) / 2 });
    return token;
  }

  /** Throws AUTHENTICATION_ERROR unless `token` is control's, for `nodeId`, and not expired. */
  async verify(token: string | undefined, nodeId: string): Promise<void> {
    if (!token) throw new ServiceError('AUTHENTICATION_ERROR', 'a node takes calls from control only: no token');
    try {
      // The lifetime is ours to enforce, not the token's to claim: iat and exp are required, and a
      // token is good for NODE_TOKEN_TTL_SECONDS from its iat whatever its exp says.
      await jwtVerify(token, this.key, {
        issuer: ISSUER,
        audience: `${AUDIENCE_PREFIX}${nodeId}`,
        algorithms: ['HS256'],
        clockTolerance: 5,
        requiredClaims: ['iat', 'exp'],
        maxTokenAge: NODE_TOKEN_TTL_SECONDS,
      });
    } catch (err) {
      const why = err instanceof joseErrors.JWTExpired ? 'the token has expired' : 'the token is not valid for this node';
      throw new ServiceError('AUTHENTICATION_ERROR', `a node takes calls from control only: ${why}`);
    }
  }
}

/** The bearer token of an `Authorization` (or `Proxy-Authorization`) header. */
export function bearer(header: string | string[] | undefined): string | undefined {
  const v = Array.isArray(header) ? header[0] : header;
  const m = v ? /^Bearer\s+(\S+)$/i.exec(v) : null;
  return m?.[1];
}
