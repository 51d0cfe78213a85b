import { randomUUID } from 'node:crypto';
import { insertSql, Params, type SqlDb } from './db.js';
import { json, KEY_FIELDS, keyFrom, orgFrom } from './rows.js';
import type { ApiKeyRepo, ApiKeyRow, LimitOverrides, OrgRepo, OrgRow, Store } from '../types/index.js';

export class SqlOrgRepo implements OrgRepo {
  constructor(private readonly db: SqlDb) {}
  async create(name: string): Promise<OrgRow> {
    const row = { id: `org_${randomUUID().replace(/-/g, '').slice(0, 20)}`, name, createdAt: new Date().toISOString() };
    await this.db.run('INSERT INTO organizations (id, name, created_at) VALUES ($1, $2, $3)', [row.id, row.name, row.createdAt]);
    return row;
  }
  async byId(id: string) {
    const r = await this.db.get('SELECT * FROM organizations WHERE id = $1', [id]);
    return r && orgFrom(r);
  }
  async byName(name: string) {
    const r = await this.db.get('SELECT * FROM organizations WHERE name = $1', [name]);
    return r && orgFrom(r);
  }
  async list() {
    return (await this.db.all('SELECT * FROM organizations ORDER BY created_at')).map(orgFrom);
  }
  async remove(id: string) {
    // Its org_limits row goes with it, in the same statement: ON DELETE CASCADE in both schemas
    // (SQLite's connection turns foreign keys on, see sqlite.ts).
    await this.db.run('DELETE FROM organizations WHERE id = $1', [id]);
  }
  async limits(id: string) {
    const r = await this.db.get('SELECT limits FROM org_limits WHERE org_id = $1', [id]);
    return r ? json<LimitOverrides>(r.limits) : {};
  }
  async setLimits(id: string, overrides: LimitOverrides) {
    if (Object.keys(overrides).length === 0) {
      await this.db.run('DELETE FROM org_limits WHERE org_id = $1', [id]);
      return;
    }
    await this.db.run(
      `INSERT INTO org_limits (org_id, limits, updated_at) VALUES ($1, $2, $3)
       ON CONFLICT (org_id) DO UPDATE SET limits = excluded.limits, updated_at = excluded.updated_at`,
      [id, JSON.stringify(overrides), new Date().toISOString()],
    );
  }
}

export class SqlApiKeyRepo implements ApiKeyRepo {
  constructor(private readonly db: SqlDb) {}
  async insert(k: ApiKeyRow) {
    const p = new Params();
    await this.db.run(insertSql('api_keys', KEY_FIELDS, k, p), p.values);
  }
  async byHash(hash: string) {
    const r = await this.db.get('SELECT * FROM api_keys WHERE hash = $1', [hash]);
    return r && keyFrom(r);
  }
  async byId(id: string) {
    const r = await this.db.get('SELECT * FROM api_keys WHERE id = $1', [id]);
    return r && keyFrom(r);
  }
  async removeForOrg(orgId: string) {
    return this.db.run('DELETE FROM api_keys WHERE org_id = $1', [orgId]);
  }
  async revokedSince(since: string) {
    const rows = await this.db.all('SELECT id, revoked_at FROM api_keys WHERE revoked_at IS NOT NULL AND revoked_at >= $1 ORDER BY revoked_at', [since]);
    return rows.map((r) => ({ id: String(r.id), revokedAt: String(r.revoked_at) }));
  }
  async list(orgId?: string) {
    const rows = orgId
      ? await this.db.all('SELECT * FROM api_keys WHERE org_id = $1 ORDER BY created_at', [orgId])
      : await this.db.all('SELECT * FROM api_keys ORDER BY created_at');
    return rows.map(keyFrom);
  }
  async revoke(id: string, at: string) {
    return (await this.db.run('UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL', [at, id])) > 0;
  }
  async touch(id: string, at: string) {
    await this.db.run('UPDATE api_keys SET last_used_at = $1 WHERE id = $2', [at, id]);
  }
}

export function sqlKv(db: SqlDb): Store['kv'] {
  const get = async (key: string) => {
    const r = await db.get('SELECT value FROM kv WHERE key = $1', [key]);
    return r === undefined ? undefined : String(r.value);
  };
  return {
    get,
    set: async (key, value) => {
      await db.run('INSERT INTO kv (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value', [key, value]);
    },
    setIfAbsent: async (key, value) => {
      await db.run('INSERT INTO kv (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING', [key, value]);
      return (await get(key))!;
    },
  };
}

export function sqlRates(db: SqlDb): Store['rates'] {
  return {
    record: async (key, at, id) => {
      await db.run('INSERT INTO rate_events (id, key, at) VALUES ($1, $2, $3)', [id, key, at]);
    },
    count: async (key, since) => {
      const r = (await db.get('SELECT count(*) AS n, min(at) AS oldest FROM rate_events WHERE key = $1 AND at > $2', [key, since]))!;
      return { n: Number(r.n), oldest: r.oldest === null || r.oldest === undefined ? null : Number(r.oldest) };
    },
    remove: async (id) => {
      await db.run('DELETE FROM rate_events WHERE id = $1', [id]);
    },
    purge: async (before) => db.run('DELETE FROM rate_events WHERE at < $1', [before]),
  };
}
