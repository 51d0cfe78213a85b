import { columnOf, insertSql, olderThan, Params, setSql, type SqlDb } from './db.js';
import { BUILD_FIELDS, buildFrom, SNAPSHOT_FIELDS, snapshotFrom, TEMPLATE_FIELDS, templateFrom, uploadFrom } from './rows.js';
import type { BuildRepo, BuildRow, SnapshotRepo, SnapshotRow, TemplateRepo, TemplateRow, UploadRepo, UploadRow } from '../types/index.js';

/** What an upsert of a template leaves as it was: who owns it and when it was made. */
const TEMPLATE_KEPT = new Set(['id', 'org_id', 'created_at']);

export class SqlTemplateRepo implements TemplateRepo {
  constructor(private readonly db: SqlDb) {}
  async upsert(t: TemplateRow) {
    const p = new Params();
    const insert = insertSql('templates', TEMPLATE_FIELDS, { ...t, orgId: t.orgId ?? '' }, p);
    const sets = Object.keys(TEMPLATE_FIELDS)
      .map(columnOf)
      .filter((c) => !TEMPLATE_KEPT.has(c))
      .map((c) => `${c} = excluded.${c}`);
    const sql = `${insert} ON CONFLICT (id) DO UPDATE SET ${sets.join(', ')}`;
    try {
      await this.db.run(sql, p.values);
    } catch (err) {
      // Two replicas recording the same built-in at once (PostgreSQL): the other's row is not yet
      // visible to the conflict on id, and its name then conflicts instead. Once more, it is.
      if (!this.db.dialect.isUniqueViolation(err)) throw err;
      await this.db.run(sql, p.values);
    }
  }
  async byId(id: string) {
    const r = await this.db.get('SELECT * FROM templates WHERE id = $1', [id]);
    return r && templateFrom(r);
  }
  async byName(name: string, orgId: string) {
    const r = await this.db.get(`SELECT * FROM templates WHERE name = $1 AND (org_id = $2 OR org_id = '') ORDER BY org_id = '' LIMIT 1`, [name, orgId]);
    return r && templateFrom(r);
  }
  async list(orgId: string) {
    return (await this.db.all(`SELECT * FROM templates WHERE org_id = $1 OR org_id = '' ORDER BY org_id <> '', name`, [orgId])).map(templateFrom);
  }
  async remove(id: string) {
    await this.db.run('DELETE FROM templates WHERE id = $1', [id]);
  }
}

export class SqlBuildRepo implements BuildRepo {
  constructor(private readonly db: SqlDb) {}
  async insert(b: BuildRow) {
    const p = new Params();
    await this.db.run(insertSql('builds', BUILD_FIELDS, b, p), p.values);
  }
  async byId(id: string) {
    const r = await this.db.get('SELECT * FROM builds WHERE id = $1', [id]);
    return r && buildFrom(r);
  }
  async latestForTemplate(templateId: string) {
    const r = await this.db.get('SELECT * FROM builds WHERE template_id = $1 ORDER BY created_at DESC LIMIT 1', [templateId]);
    return r && buildFrom(r);
  }
  async update(id: string, patch: Partial<Omit<BuildRow, 'id'>>) {
    const p = new Params();
    const sets = setSql(BUILD_FIELDS, patch, p, ['id']);
    if (sets.length === 0) return;
    await this.db.run(`UPDATE builds SET ${sets.join(', ')} WHERE id = ${p.add(id)}`, p.values);
  }
  async countSince(orgId: string, since: string) {
    const r = await this.db.get('SELECT count(*) AS n FROM builds WHERE org_id = $1 AND created_at > $2', [orgId, since]);
    return Number(r?.n ?? 0);
  }
  async unfinished() {
    return (await this.db.all(`SELECT * FROM builds WHERE status = 'building'`)).map(buildFrom);
  }
  async running(orgId: string) {
    return (await this.db.all(`SELECT * FROM builds WHERE org_id = $1 AND status = 'building'`, [orgId])).map(buildFrom);
  }
}

export class SqlUploadRepo implements UploadRepo {
  constructor(private readonly db: SqlDb) {}
  async upsert(u: UploadRow) {
    await this.db.run(
      `INSERT INTO uploads (org_id, file_id, path, sha256, size, kind, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (org_id, file_id, path) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size, created_at = excluded.created_at`,
      [u.orgId, u.fileId, u.path, u.sha256, u.size, u.kind, u.createdAt],
    );
  }
  async byFileId(orgId: string, fileId: string) {
    const r = await this.db.get('SELECT * FROM uploads WHERE org_id = $1 AND file_id = $2 ORDER BY created_at DESC LIMIT 1', [orgId, fileId]);
    return r && uploadFrom(r);
  }
  async byPath(orgId: string, path: string) {
    const r = await this.db.get('SELECT * FROM uploads WHERE org_id = $1 AND path = $2 ORDER BY created_at DESC LIMIT 1', [orgId, path]);
    return r && uploadFrom(r);
  }
  async removeForOrg(orgId: string) {
    return this.db.run('DELETE FROM uploads WHERE org_id = $1', [orgId]);
  }
  async bytesForOrg(orgId: string) {
    const r = await this.db.get('SELECT COALESCE(SUM(size), 0) AS n FROM (SELECT sha256, MAX(size) AS size FROM uploads WHERE org_id = $1 GROUP BY sha256) u', [orgId]);
    return Number(r?.n ?? 0);
  }
  async removeOlderThan(before: string) {
    return this.db.run('DELETE FROM uploads WHERE created_at < $1', [before]);
  }
  async referencedSha256s() {
    return new Set((await this.db.all('SELECT DISTINCT sha256 FROM uploads')).map((r) => String(r.sha256)));
  }
}

export class SqlSnapshotRepo implements SnapshotRepo {
  constructor(private readonly db: SqlDb) {}
  async insert(r: SnapshotRow) {
    const p = new Params();
    await this.db.run(insertSql('snapshots', SNAPSHOT_FIELDS, r, p), p.values);
  }
  async byId(id: string) {
    const r = await this.db.get('SELECT * FROM snapshots WHERE id = $1', [id]);
    return r && snapshotFrom(r);
  }
  async list(f: { orgId: string; sandboxId?: string; after?: { createdAt: string; id: string }; limit: number }) {
    const p = new Params();
    const where = [`org_id = ${p.add(f.orgId)}`];
    if (f.sandboxId) where.push(`sandbox_id = ${p.add(f.sandboxId)}`);
    if (f.after) where.push(olderThan(p, f.after));
    const rows = await this.db.all(`SELECT * FROM snapshots WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT ${p.add(f.limit)}`, p.values);
    return rows.map(snapshotFrom);
  }
  async remove(id: string) {
    return (await this.db.run('DELETE FROM snapshots WHERE id = $1', [id])) > 0;
  }
  async storageUsed(orgId: string) {
    const r = await this.db.get('SELECT coalesce(sum(size_bytes), 0) AS n FROM snapshots WHERE org_id = $1', [orgId]);
    return Number(r?.n ?? 0);
  }
  async referencedLayers() {
    const rows = await this.db.all(this.db.dialect.arrayTexts('snapshots', 'layers'));
    return new Set(rows.map((r) => String(r.value)));
  }
}
