import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { SignJWT, decodeJwt, jwtVerify, errors as joseErrors } from 'jose';
import { ServiceError } from '@sandboxd/protocol';

/** How long a token control sends a node stays valid: short, a stolen one is soon worth nothing. */
export const NODE_TOKEN_TTL_SECONDS = 60;
const ISSUER = 'sandboxd-control';
const AUDIENCE_PREFIX = 'sandboxd-node:';
/** How far the clocks of control and a node may differ for a token's times. */
const CLOCK_TOLERANCE_SECONDS = 5;
/** The most tokens a node keeps as checked (all are forgotten past it: checked again). */
const CHECKED_KEPT = 1024;
/** How long a layer token lasts: long enough for a node to start the fetch, not to keep it. */
export const LAYER_TOKEN_TTL_SECONDS = 120;
/**
 * Layer tokens: a kind of their own (their audience names the layer, their type header says so),
 * checked by control only; a node's call token is never one, nor the other way round.
 */
const LAYER_AUDIENCE_PREFIX = 'sandboxd-layer:';
const LAYER_TYP = 'sandboxd-layer+jwt';
/**
 * A node's credential for control's registry (it registers and heartbeats through control, not in
 * the database): long-lived, a type of its own, naming the node as its subject. It is good only
 * for that node's own entry, until its exp (the node renews it past half its life); a removal of
 * the node (services/node-registry.ts) refuses those issued before it, a new key pair every one.
 */
const NODE_CREDENTIAL_TYP = 'sandboxd-node-credential+jwt';
const NODE_CREDENTIAL_AUDIENCE = 'sandboxd-control:registry';
/** How long a registry credential lasts unless told (`sandboxd cluster node-credential --days`). */
export const NODE_CREDENTIAL_DAYS = 30;
/** The longest a registry credential may last: one that leaks is refused a year on at the latest. */
export const NODE_CREDENTIAL_MAX_DAYS = 365;
const DAY_SECONDS = 86_400;
const NODE_ID_RE = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
/** The one algorithm of the roles' tokens: Ed25519 signatures (RFC 8037). */
const ALG = 'EdDSA';

/*
 * Authentication between the roles of a cluster. Control holds the cluster's Ed25519 private key
 * (the signing key) and signs a short-lived token naming the one node a call is for; every node
 * holds only the public key (the verify key) and accepts only tokens for itself. A node taken over
 * can therefore neither drive the other nodes (it cannot sign) nor replay its own tokens elsewhere
 * (they name it). The two halves are two classes, so that nothing on a node can sign.
 */

/** A PEM's private key, whatever its encoding (PKCS8, SEC1, PKCS1, encrypted), told by its armour. */
const PRIVATE_PEM_RE = /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/;

/**
 * The signing key in a PEM (PKCS8, as `sandboxd cluster keygen` writes it). Throws an Error saying
 * what is wrong with it (the caller names where it came from).
 */
export function signingKeyFromPem(pem: string | Buffer): KeyObject {
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: pem, format: 'pem' });
  } catch (err) {
    const text = pem.toString();
    if (/-----BEGIN PUBLIC KEY-----/.test(text)) throw new Error('it holds a public key: control signs with the private key (cluster-signing.pem of `sandboxd cluster keygen`)');
    if (/-----BEGIN ENCRYPTED PRIVATE KEY-----/.test(text)) throw new Error('it is encrypted with a passphrase, which sandboxd cannot ask for: give it the key unencrypted (file mode 0600)');
    throw new Error(`it is not a PEM private key (PKCS8, "-----BEGIN PRIVATE KEY-----"): ${(err as Error).message}`);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new Error(`it is an ${key.asymmetricKeyType ?? 'unknown'} key; the cluster's key is Ed25519 (make one with \`sandboxd cluster keygen\`)`);
  return key;
}

/**
 * The verify key in a PEM (SPKI, "-----BEGIN PUBLIC KEY-----"). A private key is refused, not
 * reduced to its public half: a node must never hold what signs for control.
 */
export function verifyKeyFromPem(pem: string | Buffer): KeyObject {
  const text = pem.toString();
  let isPrivate = PRIVATE_PEM_RE.test(text);
  if (!isPrivate) {
    try {
      createPrivateKey({ key: pem, format: 'pem' });
      isPrivate = true;
    } catch {
      // Not a private key: as it should be.
    }
  }
  if (isPrivate) {
    throw new Error("it holds a private key: a node needs the public key only (cluster-verify.pem of `sandboxd cluster keygen`); the private key is control's alone, remove it from this machine");
  }
  let key: KeyObject;
  try {
    key = createPublicKey({ key: pem, format: 'pem' });
  } catch (err) {
    throw new Error(`it is not a PEM public key (SPKI, "-----BEGIN PUBLIC KEY-----"): ${(err as Error).message}`);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new Error(`it is an ${key.asymmetricKeyType ?? 'unknown'} key; the cluster's key is Ed25519 (make one with \`sandboxd cluster keygen\`)`);
  return key;
}

/** A new key pair of a cluster, as PEM: the signing key (PKCS8) for control, the verify key (SPKI) for the nodes. */
export function generateClusterKeyPair(): { signingPem: string; verifyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    signingPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    verifyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

function ed25519(key: KeyObject, type: 'private' | 'public', what: string): KeyObject {
  if (key.type !== type || key.asymmetricKeyType !== 'ed25519') throw new TypeError(`${what} takes an Ed25519 ${type} key, got a ${key.asymmetricKeyType ?? key.type} ${key.type} key`);
  return key;
}

/** Control's half: signs the tokens of its calls to nodes. */
export class ClusterSigner {
  readonly #key: KeyObject;
  readonly #public: KeyObject;
  readonly #cached = new Map<string, { token: string; renewAt: number }>();

  /** `key`: the cluster's Ed25519 private key (a KeyObject, or its PEM). */
  constructor(key: KeyObject | string) {
    this.#key = typeof key === 'string' ? signingKeyFromPem(key) : ed25519(key, 'private', 'ClusterSigner');
    this.#public = createPublicKey(this.#key);
  }

  /** A token with which node `nodeId` may fetch layer `layerId` from control (any replica), for a short while. */
  async layerTokenFor(nodeId: string, layerId: string): Promise<string> {
    const now = Date.now();
    const key = `layer\0${nodeId}\0${layerId}`;
    const hit = this.#cached.get(key);
    if (hit && hit.renewAt > now) return hit.token;
    const token = await new SignJWT({})
      .setProtectedHeader({ alg: ALG, typ: LAYER_TYP })
      .setIssuer(ISSUER)
      .setSubject(nodeId)
      .setAudience(`${LAYER_AUDIENCE_PREFIX}${layerId}`)
      .setIssuedAt()
      .setExpirationTime(`${LAYER_TOKEN_TTL_SECONDS}s`)
      .sign(this.#key);
    this.#cached.set(key, { token, renewAt: now + (LAYER_TOKEN_TTL_SECONDS * 1000) / 2 });
    return token;
  }

  /** The node a layer token was signed for; AUTHENTICATION_ERROR unless it is a valid one for `layerId`. */
  async checkLayerToken(token: string | undefined, layerId: string): Promise<string> {
    if (!token) throw new ServiceError('AUTHENTICATION_ERROR', 'layers are for the nodes of the cluster: no token');
    try {
      const { payload } = await jwtVerify(token, this.#public, {
        issuer: ISSUER,
        audience: `${LAYER_AUDIENCE_PREFIX}${layerId}`,
        algorithms: [ALG],
        typ: LAYER_TYP,
        clockTolerance: 5,
        requiredClaims: ['iat', 'exp', 'sub'],
        maxTokenAge: LAYER_TOKEN_TTL_SECONDS,
      });
      return payload.sub!;
    } catch {
      throw new ServiceError('AUTHENTICATION_ERROR', 'layers are for the nodes of the cluster: the token is not valid for this layer');
    }
  }

  /**
   * The registry credential of node `nodeId` (`sandboxd cluster node-credential`, and control's
   * renewals), good for `lifetimeSeconds` (whole, at most NODE_CREDENTIAL_MAX_DAYS; default
   * NODE_CREDENTIAL_DAYS) from `now` (ms; tests date one back).
   */
  async nodeCredentialFor(nodeId: string, opts: { lifetimeSeconds?: number; now?: number } = {}): Promise<string> {
    if (!NODE_ID_RE.test(nodeId)) throw new TypeError(`not a node id: ${JSON.stringify(nodeId)}`);
    const lifetime = opts.lifetimeSeconds ?? NODE_CREDENTIAL_DAYS * DAY_SECONDS;
    if (!Number.isInteger(lifetime) || lifetime < 1 || lifetime > NODE_CREDENTIAL_MAX_DAYS * DAY_SECONDS) {
      throw new TypeError(`a registry credential lasts from 1 s to ${NODE_CREDENTIAL_MAX_DAYS} days, not ${lifetime} s`);
    }
    const iat = Math.floor((opts.now ?? Date.now()) / 1000);
    return new SignJWT({})
      .setProtectedHeader({ alg: ALG, typ: NODE_CREDENTIAL_TYP })
      .setIssuer(ISSUER)
      .setSubject(nodeId)
      .setAudience(NODE_CREDENTIAL_AUDIENCE)
      .setIssuedAt(iat)
      .setExpirationTime(iat + lifetime)
      .sign(this.#key);
  }

  /**
   * What a valid registry credential says: AUTHENTICATION_ERROR unless it is one, and one that has
   * not expired. One without exp (made before credentials expired) passes, with no expiresAt: the
   * node renews it at once, and the registry says so in its log.
   */
  async checkNodeCredential(token: string | undefined): Promise<NodeCredentialClaims> {
    if (!token) throw new ServiceError('AUTHENTICATION_ERROR', "the registry is for the cluster's nodes: no credential");
    try {
      const { payload } = await jwtVerify(token, this.#public, {
        issuer: ISSUER,
        audience: NODE_CREDENTIAL_AUDIENCE,
        algorithms: [ALG],
        typ: NODE_CREDENTIAL_TYP,
        clockTolerance: CLOCK_TOLERANCE_SECONDS,
        requiredClaims: ['iat', 'sub'],
      });
      if (!NODE_ID_RE.test(payload.sub!)) throw new Error('not a node id');
      return { nodeId: payload.sub!, issuedAt: payload.iat!, expiresAt: payload.exp };
    } catch (err) {
      // jose checks the times once the signature holds: an expired one's claims are control's own.
      if (err instanceof joseErrors.JWTExpired && typeof err.payload.sub === 'string' && NODE_ID_RE.test(err.payload.sub) && typeof err.payload.exp === 'number') {
        const id = err.payload.sub;
        throw new ServiceError(
          'AUTHENTICATION_ERROR',
          `node ${id}'s registry credential expired at ${new Date(err.payload.exp * 1000).toISOString()} (a node renews its own past half its life; this one was not): make it a new one where the signing key is (\`sandboxd cluster node-credential ${id} --out FILE\`), put it in the node's SANDBOXD_NODE_CREDENTIAL_FILE and restart the node`,
        );
      }
      throw new ServiceError('AUTHENTICATION_ERROR', "the registry is for the cluster's nodes: the credential is not valid");
    }
  }

  /** A token for calls to `nodeId`, renewed when half its life is gone. */
  async tokenFor(nodeId: string): Promise<string> {
    const now = Date.now();
    const hit = this.#cached.get(nodeId);
    if (hit && hit.renewAt > now) return hit.token;
    const token = await new SignJWT({})
      .setProtectedHeader({ alg: ALG, typ: 'JWT' })
      .setIssuer(ISSUER)
      .setAudience(`${AUDIENCE_PREFIX}${nodeId}`)
      .setIssuedAt()
      .setExpirationTime(`${NODE_TOKEN_TTL_SECONDS}s`)
      .sign(this.#key);
    this.#cached.set(nodeId, { token, renewAt: now + (NODE_TOKEN_TTL_SECONDS * 1000) / 2 });
    return token;
  }
}

/** A node's half: checks that a call is control's, for this node. It has no key that signs. */
export class ClusterVerifier {
  readonly #key: KeyObject;
  /**
   * Tokens checked already, each with the instant it stops being good: control sends the same
   * token for half its life (ClusterSigner.tokenFor), and the node checks one on every call and
   * every relayed connection (a signature check is 0.2 to 0.3 ms here). The same bytes carry the
   * same signature and claims, so only the time is checked again.
   */
  readonly #checked = new Map<string, number>();
  #signatureChecks = 0;

  /** How many signatures this verifier checked (tokens taken from what it checked already are not). */
  get signatureChecks(): number {
    return this.#signatureChecks;
  }

  readonly #now: () => number;

  /**
   * `key`: the cluster's Ed25519 public key (a KeyObject, or its PEM); a private key is refused.
   * `now`: the clock, in ms (tests).
   */
  constructor(key: KeyObject | string, opts: { now?: () => number } = {}) {
    this.#key = typeof key === 'string' ? verifyKeyFromPem(key) : ed25519(key, 'public', 'ClusterVerifier');
    this.#now = opts.now ?? Date.now;
  }

  /** Throws AUTHENTICATION_ERROR unless `token` is control's, for `nodeId`, and not expired. */
  async verify(token: string | undefined, nodeId: string): Promise<void> {
    if (!token) throw new ServiceError('AUTHENTICATION_ERROR', 'a node takes calls from control only: no token');
    try {
      // Only EdDSA: an HS256 token "signed" with the public key's bytes (algorithm confusion) or an
      // unsigned one (alg none) never reaches a signature check. The lifetime is ours to enforce,
      // not the token's to claim: iat and exp are required, and a token is good for
      // NODE_TOKEN_TTL_SECONDS from its iat whatever its exp says.
      const key = `${nodeId}\0${token}`;
      const goodUntil = this.#checked.get(key);
      const now = this.#now();
      if (goodUntil !== undefined && now < goodUntil) return;
      this.#checked.delete(key);
      this.#signatureChecks++;
      const { payload } = await jwtVerify(token, this.#key, {
        issuer: ISSUER,
        audience: `${AUDIENCE_PREFIX}${nodeId}`,
        algorithms: [ALG],
        clockTolerance: CLOCK_TOLERANCE_SECONDS,
        requiredClaims: ['iat', 'exp'],
        maxTokenAge: NODE_TOKEN_TTL_SECONDS,
        currentDate: new Date(now),
      });
      // What jwtVerify checks of the time, as an instant: before exp and within the age from iat,
      // each with the tolerance.
      if (this.#checked.size >= CHECKED_KEPT) this.#checked.clear();
      this.#checked.set(key, (Math.min(payload.exp!, payload.iat! + NODE_TOKEN_TTL_SECONDS) + CLOCK_TOLERANCE_SECONDS) * 1000);
    } catch (err) {
      const why = err instanceof joseErrors.JWTExpired ? 'the token has expired' : 'the token is not valid for this node';
      throw new ServiceError('AUTHENTICATION_ERROR', `a node takes calls from control only: ${why}`);
    }
  }
}

/** What a registry credential says of its node and times (seconds since the epoch). */
export interface NodeCredentialClaims {
  nodeId: string;
  issuedAt: number;
  /** Absent in a credential made before credentials expired. */
  expiresAt: number | undefined;
}

/**
 * A registry credential's claims, read without checking its signature (control checks it at every
 * call): for the node, to know when to renew what it was given. undefined: it is not one.
 */
export function readNodeCredential(token: string): NodeCredentialClaims | undefined {
  try {
    const p = decodeJwt(token);
    if (typeof p.sub !== 'string' || !NODE_ID_RE.test(p.sub) || typeof p.iat !== 'number') return undefined;
    return { nodeId: p.sub, issuedAt: p.iat, expiresAt: typeof p.exp === 'number' ? p.exp : undefined };
  } catch {
    return undefined;
  }
}

/** The bearer token of an `Authorization` (or `Proxy-Authorization`) header. */
export function bearer(header: string | string[] | undefined): string | undefined {
  const v = Array.isArray(header) ? header[0] : header;
  const m = v ? /^Bearer\s+(\S+)$/i.exec(v) : null;
  return m?.[1];
}
