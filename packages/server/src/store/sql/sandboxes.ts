import { insertSql, olderThan, Params, setSql, type SqlDb } from './db.js';
import { flag, previewFrom, SANDBOX_FIELDS, sandboxFrom, usageFrom } from './rows.js';
import { checkNodeFilter } from './checks.js';
import type { PreviewRepo, PreviewRow, SandboxListFilter, SandboxRepo, SandboxRow, SandboxUsage } from '../types/index.js';

/** The condition that keeps a sandbox query to one node's rows (none: every node's). */
function onNode(p: Params, nodeId: string | undefined): string {
  const node = checkNodeFilter(nodeId);
  return node === undefined ? '' : ` AND node_id = ${p.add(node)}`;
}

const ACTIVE = `status IN ('creating','running','paused')`;

export class SqlSandboxRepo implements SandboxRepo {
  constructor(private readonly db: SqlDb) {}
  async insert(s: SandboxRow) {
    const p = new Params();
    await this.db.run(insertSql('sandboxes', SANDBOX_FIELDS, s, p), p.values);
  }
  async replace(oldId: string, s: SandboxRow) {
    // One statement on the row itself: a reader sees it before or after, never both rows nor
    // neither; none to update when a clean-up took the placeholder.
    const p = new Params();
    const sets = setSql(SANDBOX_FIELDS, s, p);
    return (await this.db.run(`UPDATE sandboxes SET ${sets.join(', ')} WHERE id = ${p.add(oldId)}`, p.values)) === 1;
  }
  async byId(id: string) {
    const r = await this.db.get('SELECT * FROM sandboxes WHERE id = $1', [id]);
    return r && sandboxFrom(r);
  }
  async list(f: SandboxListFilter) {
    const p = new Params();
    const where = [`org_id = ${p.add(f.orgId)}`];
    if (f.status) where.push(`status = ${p.add(f.status)}`);
    else where.push(`status NOT IN ('deleted', 'creating')`);
    if (f.template) {
      const t = p.add(f.template);
      where.push(`(template_name = ${t} OR template_id = ${t})`);
    }
    if (f.region) where.push(`region = ${p.add(f.region)}`);
    if (f.after) where.push(olderThan(p, f.after));
    const rows = await this.db.all(`SELECT * FROM sandboxes WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT ${p.add(f.limit)}`, p.values);
    return rows.map(sandboxFrom);
  }
  async live(nodeId?: string) {
    const p = new Params();
    return (await this.db.all(`SELECT * FROM sandboxes WHERE status <> 'deleted'${onNode(p, nodeId)}`, p.values)).map(sandboxFrom);
  }
  async deletedAmong(nodeId: string, ids: string[]) {
    if (ids.length === 0) return [];
    if (ids.length > 1000) throw new RangeError('at most 1000 ids at a time');
    const p = new Params();
    const list = ids.map((id) => p.add(id)).join(', ');
    const rows = await this.db.all(`SELECT id FROM sandboxes WHERE status = 'deleted' AND id IN (${list})${onNode(p, nodeId)} ORDER BY id`, p.values);
    return rows.map((r) => String((r as { id: unknown }).id));
  }
  async update(id: string, version: number, patch: Partial<Omit<SandboxRow, 'id' | 'version'>>) {
    const p = new Params();
    const sets = setSql(SANDBOX_FIELDS, patch, p, ['id', 'version']);
    sets.push('version = version + 1');
    // The new row in the same statement: no second read that another writer could come before.
    const r = await this.db.get(`UPDATE sandboxes SET ${sets.join(', ')} WHERE id = ${p.add(id)} AND version = ${p.add(version)} RETURNING *`, p.values);
    return r && sandboxFrom(r);
  }
  async expired(now: string, nodeId?: string) {
    const p = new Params();
    const sql = `SELECT * FROM sandboxes WHERE status IN ('running', 'paused', 'stopped') AND expires_at IS NOT NULL AND expires_at <= ${p.add(now)}`;
    return (await this.db.all(sql + onNode(p, nodeId), p.values)).map(sandboxFrom);
  }
  async idleDue(now: string, nodeId?: string) {
    const p = new Params();
    const sql = `SELECT * FROM sandboxes WHERE status = 'running' AND idle_check_at IS NOT NULL AND idle_check_at <= ${p.add(now)}`;
    return (await this.db.all(sql + onNode(p, nodeId), p.values)).map(sandboxFrom);
  }
  async purgeDeleted(before: string) {
    return this.db.run(`DELETE FROM sandboxes WHERE status = 'deleted' AND deleted_at < $1`, [before]);
  }
  async gatewayPortUsed(port: number) {
    const r = await this.db.get(
      `SELECT EXISTS (SELECT 1 FROM sandboxes WHERE gateway_port = $1 AND status <> 'deleted')
           OR EXISTS (SELECT 1 FROM previews WHERE gateway_port = $1) AS used`,
      [port],
    );
    return flag(r?.used);
  }
  async usage(orgId: string): Promise<SandboxUsage> {
    // org_usage is kept by triggers (see the migrations): one row, whatever the organization holds.
    return usageFrom(await this.db.get('SELECT active, active_vcpu, active_memory_mb, stopped, disk_gb FROM org_usage WHERE org_id = $1', [orgId]));
  }
  async usageAll(): Promise<SandboxUsage> {
    return usageFrom(
      await this.db.get(
        'SELECT sum(active) AS active, sum(active_vcpu) AS active_vcpu, sum(active_memory_mb) AS active_memory_mb, sum(stopped) AS stopped, sum(disk_gb) AS disk_gb FROM org_usage',
      ),
    );
  }
  async countByStatus(): Promise<Record<string, number>> {
    const rows = await this.db.all(`SELECT status, count(*) AS n FROM sandboxes WHERE status <> 'deleted' GROUP BY status`);
    return Object.fromEntries(rows.map((r) => [String(r.status), Number(r.n)]));
  }
  async countByNode(): Promise<Record<string, number>> {
    const rows = await this.db.all(`SELECT node_id, count(*) AS n FROM sandboxes WHERE status <> 'deleted' GROUP BY node_id`);
    return Object.fromEntries(rows.map((r) => [String(r.node_id), Number(r.n)]));
  }
  async usageByNode(): Promise<Record<string, SandboxUsage>> {
    const rows = await this.db.all(`SELECT node_id,
      sum(CASE WHEN ${ACTIVE} THEN 1 ELSE 0 END) AS active,
      sum(CASE WHEN ${ACTIVE} THEN vcpu ELSE 0 END) AS active_vcpu,
      sum(CASE WHEN ${ACTIVE} THEN memory_mb ELSE 0 END) AS active_memory_mb,
      sum(CASE WHEN status = 'stopped' THEN 1 ELSE 0 END) AS stopped,
      sum(disk_gb) AS disk_gb
    FROM sandboxes WHERE status <> 'deleted' GROUP BY node_id`);
    return Object.fromEntries(rows.map((r) => [String(r.node_id), usageFrom(r)]));
  }
  async countByTemplate(templateId: string) {
    const r = await this.db.get(`SELECT count(*) AS n FROM sandboxes WHERE template_id = $1 AND status <> 'deleted'`, [templateId]);
    return Number(r?.n ?? 0);
  }
  async remove(id: string) {
    await this.db.run('DELETE FROM sandboxes WHERE id = $1', [id]);
  }
}

export class SqlPreviewRepo implements PreviewRepo {
  constructor(private readonly db: SqlDb) {}
  async get(sandboxId: string, port: number) {
    const r = await this.db.get('SELECT * FROM previews WHERE sandbox_id = $1 AND port = $2', [sandboxId, port]);
    return r && previewFrom(r);
  }
  async upsert(p: PreviewRow) {
    await this.db.run(
      `INSERT INTO previews (sandbox_id, port, public, gateway_port, created_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (sandbox_id, port) DO UPDATE SET public = excluded.public, gateway_port = excluded.gateway_port`,
      [p.sandboxId, p.port, p.public, p.gatewayPort, p.createdAt],
    );
  }
  async forSandbox(sandboxId: string) {
    return (await this.db.all('SELECT * FROM previews WHERE sandbox_id = $1 ORDER BY port', [sandboxId])).map(previewFrom);
  }
  async all() {
    return (await this.db.all('SELECT * FROM previews ORDER BY sandbox_id, port')).map(previewFrom);
  }
  async countForOrg(orgId: string) {
    const r = await this.db.get('SELECT count(*) AS n FROM previews p JOIN sandboxes s ON s.id = p.sandbox_id WHERE s.org_id = $1', [orgId]);
    return Number(r?.n ?? 0);
  }
  async remove(sandboxId: string, port: number) {
    await this.db.run('DELETE FROM previews WHERE sandbox_id = $1 AND port = $2', [sandboxId, port]);
  }
}
