export interface OrgRow {
  id: string;
  name: string;
  createdAt: string;
}

export interface ApiKeyRow {
  id: string;
  orgId: string;
  name: string;
  /** sha256 hex of the secret. */
  hash: string;
  scopes: string[];
  createdAt: string;
  revokedAt: string | null;
  lastUsedAt: string | null;
}

/**
 * An organization's overrides of the configured limits, by limit name (services/limits.ts): a
 * missing name inherits the default, null means no limit.
 */
export type LimitOverrides = Record<string, number | null>;

export interface OrgRepo {
  create(name: string): Promise<OrgRow>;
  byId(id: string): Promise<OrgRow | undefined>;
  byName(name: string): Promise<OrgRow | undefined>;
  list(): Promise<OrgRow[]>;
  remove(id: string): Promise<void>;
  /** The organization's overrides ({} when it has none). */
  limits(id: string): Promise<LimitOverrides>;
  /** Replaces the organization's overrides ({} removes them all). */
  setLimits(id: string, overrides: LimitOverrides): Promise<void>;
}

export interface ApiKeyRepo {
  insert(row: ApiKeyRow): Promise<void>;
  byHash(hash: string): Promise<ApiKeyRow | undefined>;
  byId(id: string): Promise<ApiKeyRow | undefined>;
  list(orgId?: string): Promise<ApiKeyRow[]>;
  revoke(id: string, at: string): Promise<boolean>;
  touch(id: string, at: string): Promise<void>;
  /** Keys revoked at or after `since` (an ISO time; '' for all), for the revocation lists of the processes that check tokens. */
  revokedSince(since: string): Promise<Array<{ id: string; revokedAt: string }>>;
  /** Removes every key of the organization (it is being deleted); returns how many. */
  removeForOrg(orgId: string): Promise<number>;
}
