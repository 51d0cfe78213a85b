import { insertSql, Params, type Fields, type Raw, type SqlDb } from './db.js';
import type { VolumeRepo, VolumeRow } from '../types/index.js';

const VOLUME_FIELDS: Fields<VolumeRow> = { id: 'value', orgId: 'value', name: 'value', sizeGb: 'value', nodeId: 'value', createdAt: 'value' };

function volumeFrom(r: Raw): VolumeRow {
  return { id: String(r.id), orgId: String(r.org_id), name: String(r.name), sizeGb: Number(r.size_gb), nodeId: String(r.node_id), createdAt: String(r.created_at) };
}

/** Volumes (issue 32): one row each; UNIQUE (org_id, name) makes names unique per organization. */
export class SqlVolumeRepo implements VolumeRepo {
  constructor(private readonly db: SqlDb) {}
  async insert(row: VolumeRow): Promise<boolean> {
    const p = new Params();
    try {
      await this.db.run(insertSql('volumes', VOLUME_FIELDS, row, p), p.values);
      return true;
    } catch (err) {
      if (this.db.dialect.isUniqueViolation(err)) return false;
      throw err;
    }
  }
  async byId(id: string) {
    const r = await this.db.get('SELECT * FROM volumes WHERE id = $1', [id]);
    return r && volumeFrom(r);
  }
  async byName(orgId: string, name: string) {
    const r = await this.db.get('SELECT * FROM volumes WHERE org_id = $1 AND name = $2', [orgId, name]);
    return r && volumeFrom(r);
  }
  async list(orgId: string) {
    return (await this.db.all('SELECT * FROM volumes WHERE org_id = $1 ORDER BY name', [orgId])).map(volumeFrom);
  }
  async all() {
    return (await this.db.all('SELECT * FROM volumes ORDER BY id')).map(volumeFrom);
  }
  async remove(id: string) {
    return (await this.db.run('DELETE FROM volumes WHERE id = $1', [id])) > 0;
  }
  async sizeGbForOrg(orgId: string) {
    const r = await this.db.get('SELECT coalesce(sum(size_gb), 0) AS n FROM volumes WHERE org_id = $1', [orgId]);
    return Number(r?.n ?? 0);
  }
}
