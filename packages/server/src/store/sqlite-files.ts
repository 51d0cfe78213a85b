import type { Statements } from './sqlite.js';
import { sliceRows } from './log-rows.js';
import { checkBlobSha256, checkWhole, type BlobRepo, type BuildLogRepo } from './types.js';

type Raw = Record<string, unknown>;

export class SqliteBlobRepo implements BlobRepo {
  constructor(private db: Statements) {}
  async begin(id: string, at: string) {
    this.db.prepare('INSERT INTO upload_blobs (id, sha256, size, created_at) VALUES (?, NULL, NULL, ?)').run(id, at);
  }
  async append(id: string, seq: number, data: Uint8Array) {
    checkWhole(seq, "a chunk's number");
    const open = this.db.prepare('SELECT 1 FROM upload_blobs WHERE id = ? AND sha256 IS NULL').get(id);
    if (!open) throw new Error(`blob ${id} is not being written`);
    this.db.prepare('INSERT INTO upload_blob_chunks (blob_id, seq, data) VALUES (?, ?, ?)').run(id, seq, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  }
  async commit(id: string, sha256: string, size: number) {
    checkBlobSha256(sha256);
    checkWhole(size, "a blob's size");
    if (await this.stat(sha256)) {
      await this.discard(id);
      return 'exists' as const;
    }
    try {
      const changed = this.db.prepare('UPDATE upload_blobs SET sha256 = ?, size = ? WHERE id = ? AND sha256 IS NULL').run(sha256, size, id).changes;
      if (changed === 0) throw new Error(`blob ${id} is not being written`);
      return 'stored' as const;
    } catch (err) {
      // Another commit of the same content between the look and the write.
      if ((err as { code?: unknown }).code !== 'SQLITE_CONSTRAINT_UNIQUE') throw err;
      await this.discard(id);
      return 'exists' as const;
    }
  }
  async discard(id: string) {
    const open = this.db.prepare('SELECT 1 FROM upload_blobs WHERE id = ? AND sha256 IS NULL').get(id);
    if (!open) return;
    this.db.prepare('DELETE FROM upload_blob_chunks WHERE blob_id = ?').run(id);
    this.db.prepare('DELETE FROM upload_blobs WHERE id = ?').run(id);
  }
  async stat(sha256: string) {
    const r = this.db.prepare('SELECT size FROM upload_blobs WHERE sha256 = ?').get(checkBlobSha256(sha256)) as Raw | undefined;
    return r && { size: Number(r.size) };
  }
  async chunks(sha256: string, fromSeq: number, limit: number) {
    const rows = this.db
      .prepare('SELECT c.data FROM upload_blob_chunks c JOIN upload_blobs b ON b.id = c.blob_id WHERE b.sha256 = ? AND c.seq >= ? ORDER BY c.seq LIMIT ?')
      .all(checkBlobSha256(sha256), checkWhole(fromSeq, "a chunk's number"), checkWhole(limit, 'a chunk count', 1)) as Raw[];
    return rows.map((r) => r.data as Buffer);
  }
  async purgeUncommitted(before: string) {
    const ids = (this.db.prepare('SELECT id FROM upload_blobs WHERE sha256 IS NULL AND created_at < ?').all(before) as Raw[]).map((r) => String(r.id));
    for (const id of ids) await this.discard(id);
    return ids.length;
  }
}

export class SqliteBuildLogRepo implements BuildLogRepo {
  constructor(private db: Statements) {}
  async append(buildId: string, data: Uint8Array) {
    const r = this.db
      .prepare(
        `INSERT INTO build_logs (build_id, start_offset, end_offset, data)
         SELECT @id, s, s + @len, @data FROM (SELECT coalesce(max(end_offset), 0) AS s FROM build_logs WHERE build_id = @id) RETURNING end_offset`,
      )
      .get({ id: buildId, len: data.byteLength, data: Buffer.from(data.buffer, data.byteOffset, data.byteLength) }) as Raw;
    return Number(r.end_offset);
  }
  async read(buildId: string, offset: number, maxBytes: number) {
    checkWhole(offset, 'a log offset');
    checkWhole(maxBytes, 'a log read length', 1);
    const size = Number((this.db.prepare('SELECT coalesce(max(end_offset), 0) AS n FROM build_logs WHERE build_id = ?').get(buildId) as Raw).n);
    if (offset >= size) return { data: Buffer.alloc(0), size };
    const rows = this.db
      .prepare('SELECT start_offset, data FROM build_logs WHERE build_id = ? AND end_offset > ? AND start_offset < ? ORDER BY start_offset')
      .all(buildId, offset, offset + maxBytes) as Raw[];
    return { data: sliceRows(rows, offset, maxBytes), size };
  }
}
