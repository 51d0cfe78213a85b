import type { Raw, SqlDb } from './db.js';
import { checkBlobSha256, checkWhole } from './checks.js';
import type { BlobRepo, BuildLogRepo } from '../types/index.js';

const bytes = (data: Uint8Array): Buffer => Buffer.from(data.buffer, data.byteOffset, data.byteLength);

/*
 * Each statement guards itself (`... AND sha256 IS NULL`, `WHERE EXISTS`): with replicas, or with
 * SQLite's calls interleaving at each await, another writer may come between two of them.
 */
export class SqlBlobRepo implements BlobRepo {
  constructor(private readonly db: SqlDb) {}
  async begin(id: string, at: string) {
    await this.db.run('INSERT INTO upload_blobs (id, sha256, size, created_at) VALUES ($1, NULL, NULL, $2)', [id, at]);
  }
  async append(id: string, seq: number, data: Uint8Array) {
    checkWhole(seq, "a chunk's number");
    const n = await this.db.run(
      'INSERT INTO upload_blob_chunks (blob_id, seq, data) SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM upload_blobs WHERE id = $1 AND sha256 IS NULL)',
      [id, seq, bytes(data)],
    );
    if (n === 0) throw new Error(`blob ${id} is not being written`);
  }
  async commit(id: string, sha256: string, size: number) {
    checkBlobSha256(sha256);
    checkWhole(size, "a blob's size");
    if (await this.stat(sha256)) {
      await this.discard(id);
      return 'exists' as const;
    }
    try {
      const changed = await this.db.run('UPDATE upload_blobs SET sha256 = $1, size = $2 WHERE id = $3 AND sha256 IS NULL', [sha256, size, id]);
      if (changed === 0) throw new Error(`blob ${id} is not being written`);
      return 'stored' as const;
    } catch (err) {
      // Another commit of the same content between the look and the write.
      if (!this.db.dialect.isUniqueViolation(err)) throw err;
      await this.discard(id);
      return 'exists' as const;
    }
  }
  async discard(id: string) {
    // Chunks first: a process that dies in between leaves an uncommitted row, which purgeUncommitted finds.
    await this.db.run('DELETE FROM upload_blob_chunks WHERE blob_id = $1 AND EXISTS (SELECT 1 FROM upload_blobs WHERE id = $1 AND sha256 IS NULL)', [id]);
    await this.db.run('DELETE FROM upload_blobs WHERE id = $1 AND sha256 IS NULL', [id]);
  }
  async stat(sha256: string) {
    const r = await this.db.get('SELECT size FROM upload_blobs WHERE sha256 = $1', [checkBlobSha256(sha256)]);
    return r && { size: Number(r.size) };
  }
  async chunks(sha256: string, fromSeq: number, limit: number) {
    const rows = await this.db.all(
      'SELECT c.data FROM upload_blob_chunks c JOIN upload_blobs b ON b.id = c.blob_id WHERE b.sha256 = $1 AND c.seq >= $2 ORDER BY c.seq LIMIT $3',
      [checkBlobSha256(sha256), checkWhole(fromSeq, "a chunk's number"), checkWhole(limit, 'a chunk count', 1)],
    );
    return rows.map((r) => r.data as Buffer);
  }
  async unreferenced(before: string) {
    const rows = await this.db.all('SELECT sha256 FROM upload_blobs b WHERE sha256 IS NOT NULL AND created_at < $1 AND NOT EXISTS (SELECT 1 FROM uploads u WHERE u.sha256 = b.sha256)', [before]);
    return rows.map((r) => String(r.sha256));
  }
  async removeUnreferenced(sha256: string) {
    checkBlobSha256(sha256);
    // The row first, guarded by the reference check in the same statement; then its chunks, which
    // no reader finds without the row (a process dying in between leaves chunks of no blob:
    // purgeUncommitted drops those).
    const r = await this.db.get('SELECT id FROM upload_blobs WHERE sha256 = $1', [sha256]);
    if (!r) return false;
    const n = await this.db.run('DELETE FROM upload_blobs WHERE sha256 = $1 AND NOT EXISTS (SELECT 1 FROM uploads WHERE sha256 = $1)', [sha256]);
    if (n === 0) return false;
    await this.db.run('DELETE FROM upload_blob_chunks WHERE blob_id = $1', [String(r.id)]);
    return true;
  }
  async purgeUncommitted(before: string) {
    const ids = (await this.db.all('SELECT id FROM upload_blobs WHERE sha256 IS NULL AND created_at < $1', [before])).map((r) => String(r.id));
    for (const id of ids) await this.discard(id);
    await this.db.run('DELETE FROM upload_blob_chunks WHERE NOT EXISTS (SELECT 1 FROM upload_blobs b WHERE b.id = upload_blob_chunks.blob_id)');
    return ids.length;
  }
}

/** The bytes [offset, offset + maxBytes) of log rows that cover them, in order. */
function sliceRows(rows: Raw[], offset: number, maxBytes: number): Buffer {
  const parts = rows.map((r) => {
    const start = Number(r.start_offset);
    const data = r.data as Buffer;
    return data.subarray(Math.max(0, offset - start), Math.max(0, offset + maxBytes - start));
  });
  return Buffer.concat(parts);
}

export class SqlBuildLogRepo implements BuildLogRepo {
  constructor(private readonly db: SqlDb) {}
  async append(buildId: string, data: Uint8Array) {
    // One writer per build; two at once would collide on the primary key rather than overlap.
    const r = await this.db.get(
      `INSERT INTO build_logs (build_id, start_offset, end_offset, data)
       SELECT $1, s, s + $2, $3 FROM (SELECT coalesce(max(end_offset), 0) AS s FROM build_logs WHERE build_id = $1) t RETURNING end_offset`,
      [buildId, data.byteLength, bytes(data)],
    );
    return Number(r!.end_offset);
  }
  async read(buildId: string, offset: number, maxBytes: number) {
    checkWhole(offset, 'a log offset');
    checkWhole(maxBytes, 'a log read length', 1);
    const size = Number((await this.db.get('SELECT coalesce(max(end_offset), 0) AS n FROM build_logs WHERE build_id = $1', [buildId]))!.n);
    if (offset >= size) return { data: Buffer.alloc(0), size };
    const rows = await this.db.all('SELECT start_offset, data FROM build_logs WHERE build_id = $1 AND end_offset > $2 AND start_offset < $3 ORDER BY start_offset', [
      buildId,
      offset,
      offset + maxBytes,
    ]);
    return { data: sliceRows(rows, offset, maxBytes), size };
  }
}
