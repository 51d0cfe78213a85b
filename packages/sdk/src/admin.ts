import { ApiClient, enc, type CallOptions } from './client.js';
import type { ClientOptions } from './config.js';
import type { HttpMethod } from './http.js';

/**
 * The admin API (`/v1/admin`): organizations and API keys. It needs a key of the operator's
 * organization (`default`) with the `admin` scope; any other key gets a PermissionDeniedError.
 */
export interface AdminOptions extends ClientOptions, CallOptions {
  client?: ApiClient;
}

export interface OrgInfo {
  id: string;
  name: string;
  createdAt: string;
}

export interface ApiKeyInfo {
  id: string;
  orgId: string;
  /** The organization's name. */
  org: string | null;
  name: string;
  scopes: string[];
  createdAt: string;
  revokedAt: string | null;
  lastUsedAt: string | null;
}

/** A new key: `secret` is what clients send, returned by the service this once only. */
export interface CreatedApiKey extends ApiKeyInfo {
  secret: string;
}

const str = (v: unknown) => (typeof v === 'string' ? v : '');
const strOrNull = (v: unknown) => (typeof v === 'string' ? v : null);

function toOrg(o: Record<string, unknown>): OrgInfo {
  return { id: str(o.id), name: str(o.name), createdAt: str(o.created_at) };
}

function toKey(k: Record<string, unknown>): ApiKeyInfo {
  return {
    id: str(k.id),
    orgId: str(k.org_id),
    org: strOrNull(k.org),
    name: str(k.name),
    scopes: Array.isArray(k.scopes) ? k.scopes.map(String) : [],
    createdAt: str(k.created_at),
    revokedAt: strOrNull(k.revoked_at),
    lastUsedAt: strOrNull(k.last_used_at),
  };
}

export class Admin {
  private static async call(options: AdminOptions, method: HttpMethod, path: string, what: string, extra: { json?: unknown; query?: Record<string, string | undefined> } = {}): Promise<Record<string, unknown>> {
    const client = options.client ?? new ApiClient(options);
    return client.http.json<Record<string, unknown>>({ method, path, ...extra, signal: options.signal, timeoutMs: options.requestTimeoutMs, what });
  }

  static async listOrgs(options: AdminOptions = {}): Promise<OrgInfo[]> {
    const body = await Admin.call(options, 'GET', '/v1/admin/orgs', 'list organizations');
    return ((body.data as Record<string, unknown>[] | undefined) ?? []).map(toOrg);
  }

  static async createOrg(name: string, options: AdminOptions = {}): Promise<OrgInfo> {
    return toOrg(await Admin.call(options, 'POST', '/v1/admin/orgs', `create organization ${name}`, { json: { name } }));
  }

  /**
   * Deletes an organization (name or id) and everything it made: its keys are revoked, its
   * sandboxes, snapshots, templates and uploads deleted. Says how many of each went.
   */
  static async deleteOrg(nameOrId: string, options: AdminOptions = {}): Promise<OrgInfo & { deleted: Record<'keys' | 'sandboxes' | 'snapshots' | 'templates' | 'uploads', number> }> {
    const body = await Admin.call(options, 'DELETE', `/v1/admin/orgs/${enc(nameOrId)}`, `delete organization ${nameOrId}`);
    const d = (body.deleted ?? {}) as Record<string, unknown>;
    const n = (k: string) => (typeof d[k] === 'number' ? (d[k] as number) : 0);
    return { ...toOrg(body), deleted: { keys: n('keys'), sandboxes: n('sandboxes'), snapshots: n('snapshots'), templates: n('templates'), uploads: n('uploads') } };
  }

  /** Every key (of one organization with `org`: its name or id), revoked ones included; never a secret. */
  static async listKeys(options: AdminOptions & { org?: string } = {}): Promise<ApiKeyInfo[]> {
    const body = await Admin.call(options, 'GET', '/v1/admin/keys', 'list API keys', { query: { org: options.org } });
    return ((body.data as Record<string, unknown>[] | undefined) ?? []).map(toKey);
  }

  /**
   * A new key of organization `org` (name or id); without `scopes` it gets the sandboxes and
   * templates scopes. `format: 'e2b'`: its secret is shaped `e2b_<hex>`, as E2B's clients expect.
   */
  static async createKey(key: { org: string; name?: string; scopes?: string[]; format?: 'sandboxd' | 'e2b' }, options: AdminOptions = {}): Promise<CreatedApiKey> {
    const body = await Admin.call(options, 'POST', '/v1/admin/keys', `create an API key for ${key.org}`, { json: key });
    return { ...toKey(body), secret: str(body.secret) };
  }

  /** Revokes a key at once (the tokens it made stop working too). */
  static async revokeKey(id: string, options: AdminOptions = {}): Promise<ApiKeyInfo> {
    return toKey(await Admin.call(options, 'DELETE', `/v1/admin/keys/${enc(id)}`, `revoke API key ${id}`));
  }
}
