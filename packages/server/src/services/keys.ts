import { createHash, randomBytes } from 'node:crypto';
import { API_SCOPES, DEFAULT_KEY_SCOPES, ServiceError, type ApiScope } from '@sandboxd/protocol';
import type { ApiKeyRow, OrgRow, Store } from '../store/types/index.js';
import type { ApiShare } from './api-share.js';
import { storedOrgId } from './org-ids.js';

export interface Principal {
  orgId: string;
  keyId: string;
  scopes: Set<string>;
}

export const ALL_SCOPES: ApiScope[] = [...API_SCOPES];
export const DEFAULT_ORG = 'default';

const KEY_PREFIX = 'sbd_';

/** The shape of a new key's secret: ours, or E2B's (for its clients: http/routes/e2b.ts). */
export type KeyFormat = 'sandboxd' | 'e2b';
export const KEY_FORMATS: readonly KeyFormat[] = ['sandboxd', 'e2b'];

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** A key's scopes from a comma list; none named: DEFAULT_KEY_SCOPES (the sandboxes and templates scopes). */
export function parseScopes(input: string[] | string | undefined): ApiScope[] {
  if (input === undefined) return [...DEFAULT_KEY_SCOPES];
  const list = (Array.isArray(input) ? input : input.split(',')).map((s) => s.trim()).filter(Boolean);
  for (const s of list) {
    if (!(API_SCOPES as readonly string[]).includes(s)) {
      throw new ServiceError('VALIDATION_ERROR', `unknown scope "${s}"; valid scopes: ${API_SCOPES.join(', ')}`);
    }
  }
  return list as ApiScope[];
}

/** Organizations and API keys. Keys are stored as sha256 of the secret; the secret is shown once. */
export class KeyService {
  /**
   * @param share each organization's share of the API (http/auth.ts admits every authenticated
   * request through it; absent: no limit, as in the CLI and on edges)
   */
  constructor(
    private store: Store,
    readonly share?: ApiShare,
  ) {}

  async ensureOrg(name: string): Promise<OrgRow> {
    const found = await this.store.orgs.byName(name);
    if (found) return found;
    try {
      return await this.store.orgs.create(name);
    } catch (err) {
      // Another replica starting at the same time made it first (the name is unique): that one.
      const made = await this.store.orgs.byName(name);
      if (made) return made;
      throw err;
    }
  }

  async createOrg(name: string): Promise<OrgRow> {
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/.test(name)) {
      throw new ServiceError('VALIDATION_ERROR', 'organization name must be 1-63 letters, digits, ".", "_" or "-"');
    }
    // A name that looks like an id would shadow the organization that has that id.
    if (/^org_/i.test(name)) throw new ServiceError('VALIDATION_ERROR', 'organization name must not start with "org_" (ids do)');
    if (/^[0-9]+$/.test(name)) throw new ServiceError('VALIDATION_ERROR', 'organization name must not be only digits (the ids the API shows are)');
    if (await this.store.orgs.byName(name)) throw new ServiceError('ALREADY_EXISTS', `organization "${name}" already exists`);
    return this.store.orgs.create(name);
  }

  /** Creates a key; `secret` lets the operator pin an exact key (SANDBOXD_BOOTSTRAP_API_KEY). */
  async createKey(orgId: string, opts: { name?: string; scopes?: ApiScope[]; secret?: string; format?: KeyFormat } = {}): Promise<{ key: ApiKeyRow; secret: string }> {
    const id = `key_${randomBytes(8).toString('hex')}`;
    // 'e2b': the shape E2B's clients check before they send a key (`e2b_` and 40 hex digits, as E2B's own keys: 160 random bits).
    const secret = opts.secret ?? (opts.format === 'e2b' ? `e2b_${randomBytes(20).toString('hex')}` : `${KEY_PREFIX}${randomBytes(24).toString('base64url')}`);
    const key: ApiKeyRow = {
      id,
      orgId,
      name: opts.name ?? 'default',
      hash: hashSecret(secret),
      scopes: opts.scopes ?? [...DEFAULT_KEY_SCOPES],
      createdAt: new Date().toISOString(),
      revokedAt: null,
      lastUsedAt: null,
    };
    await this.store.keys.insert(key);
    return { key, secret };
  }

  /** Makes sure `secret` is a live admin key of the default organization (idempotent). */
  async ensureBootstrapKey(secret: string): Promise<ApiKeyRow> {
    const existing = await this.store.keys.byHash(hashSecret(secret));
    if (existing && !existing.revokedAt) return existing;
    if (existing) throw new ServiceError('PERMISSION_DENIED', 'the bootstrap API key was revoked; set another SANDBOXD_BOOTSTRAP_API_KEY');
    const org = await this.ensureOrg(DEFAULT_ORG);
    try {
      return (await this.createKey(org.id, { name: 'bootstrap', secret, scopes: [...ALL_SCOPES] })).key;
    } catch (err) {
      // Replicas sharing the key, started together: another one recorded it first.
      const made = await this.store.keys.byHash(hashSecret(secret));
      if (made && !made.revokedAt) return made;
      throw err;
    }
  }

  async revoke(id: string): Promise<ApiKeyRow> {
    const key = await this.store.keys.byId(id);
    if (!key) throw new ServiceError('KEY_NOT_FOUND', `no API key with id ${id}`);
    if (!key.revokedAt) await this.store.keys.revoke(id, new Date().toISOString());
    this.revoked?.(id);
    return (await this.store.keys.byId(id))!;
  }

  private revoked: ((id: string) => void) | undefined;

  /** Told of every key this process revokes (the tokens it made end here at once; see services/revocations.ts). */
  whenRevoked(fn: (id: string) => void): void {
    this.revoked = fn;
  }

  /** An organization by name or id (404 ORG_NOT_FOUND). */
  async org(nameOrId: string): Promise<OrgRow> {
    // An id is looked up as an id first (names made before "org_" was refused could shadow one); the
    // decimal id the API shows (services/org-ids.ts) names the same organization.
    const stored = storedOrgId(nameOrId);
    if (stored) {
      const byNumber = await this.store.orgs.byId(stored);
      if (byNumber) return byNumber;
    }
    const org = /^org_/.test(nameOrId)
      ? ((await this.store.orgs.byId(nameOrId)) ?? (await this.store.orgs.byName(nameOrId)))
      : ((await this.store.orgs.byName(nameOrId)) ?? (await this.store.orgs.byId(nameOrId)));
    if (!org) throw new ServiceError('ORG_NOT_FOUND', `organization ${JSON.stringify(nameOrId.slice(0, 100))} not found`);
    return org;
  }

  /** The key `sandboxd` started with (the operator's way in): it is revoked on the host only. */
  async isBootstrapKey(key: ApiKeyRow): Promise<boolean> {
    const operator = await this.store.orgs.byName(DEFAULT_ORG);
    return key.name === 'bootstrap' && key.orgId === operator?.id;
  }

  /**
   * The admin API is the operator's: a key of the operator's organization (`default`, where the
   * bootstrap key lives) with the `admin` scope. `admin` on another organization's key stands for
   * every scope within that organization only (keys made before admin left the default scopes have
   * it), so it never reaches other organizations.
   */
  async requireOperator(p: Principal): Promise<void> {
    const operator = await this.store.orgs.byName(DEFAULT_ORG);
    if (!p.scopes.has('admin')) throw new ServiceError('PERMISSION_DENIED', 'the admin API needs a key with the "admin" scope');
    if (!operator || p.orgId !== operator.id) {
      throw new ServiceError('PERMISSION_DENIED', `the admin API is for keys of the operator's organization (${DEFAULT_ORG}); this key belongs to another`);
    }
  }

  /** Whether the key may use the admin API (requireOperator): a key without `admin` costs no read. */
  async isOperator(p: Principal): Promise<boolean> {
    if (!p.scopes.has('admin')) return false;
    return this.requireOperator(p).then(
      () => true,
      () => false,
    );
  }

  /** Who a key is: its organization, its name and scopes, and whether it may use the admin API. */
  async whoami(p: Principal): Promise<{ org: OrgRow; keyName: string; scopes: string[]; operator: boolean }> {
    const [org, key] = await Promise.all([this.store.orgs.byId(p.orgId), this.store.keys.byId(p.keyId)]);
    if (!org || !key) throw new ServiceError('AUTHENTICATION_ERROR', 'this key no longer exists');
    return { org, keyName: key.name, scopes: [...p.scopes].sort(), operator: await this.isOperator(p) };
  }

  /** Resolves a presented secret to its principal, or throws 401. */
  async authenticate(secret: string | undefined): Promise<Principal> {
    if (!secret) throw new ServiceError('AUTHENTICATION_ERROR', 'missing API key: send X-API-Key or Authorization: Bearer');
    // Looked up by the secret's hash: what timing could reveal is about hashes, not the secret.
    const key = await this.store.keys.byHash(hashSecret(secret));
    if (!key || key.revokedAt) {
      throw new ServiceError('AUTHENTICATION_ERROR', 'invalid or revoked API key');
    }
    return { orgId: key.orgId, keyId: key.id, scopes: new Set(key.scopes) };
  }

  /**
   * The principal of a token minted by key `keyId` of `orgId`: the key must still be live, so a
   * revocation also ends the tokens it made (401).
   */
  async authenticateKeyId(keyId: string, orgId: string): Promise<Principal> {
    const key = await this.store.keys.byId(keyId);
    if (!key || key.revokedAt || key.orgId !== orgId) throw new ServiceError('AUTHENTICATION_ERROR', 'the API key that made this token was revoked');
    return { orgId: key.orgId, keyId: key.id, scopes: new Set(key.scopes) };
  }
}

export function requireScope(p: Principal, scope: ApiScope): void {
  if (p.scopes.has(scope) || p.scopes.has('admin')) return;
  throw new ServiceError('PERMISSION_DENIED', `this API key lacks the "${scope}" scope`);
}
