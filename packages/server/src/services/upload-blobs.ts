import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { BlobMismatchError, parseSha256, type BlobInfo, type FsBlobStore } from '../images/blob-store.js';
import type { Store } from '../store/types/index.js';

/** Where uploaded files' bytes live: the data directory (one machine) or the store (replicas). */
export interface UploadBlobs {
  /** Streams `body` in; keeps it only if its size and sha256 match (else BlobMismatchError). */
  put(body: Readable, opts: { sha256?: string; size: number; maxBytes: number }): Promise<BlobInfo>;
  stat(sha256: string): Promise<BlobInfo | undefined>;
  /** A host file with the blob's bytes, checked against its sha256, for a build step to copy from. */
  localPath(sha256: string): Promise<string>;
}

/** One machine: the blobs in the data directory, as they always were. */
export function localUploadBlobs(fs: FsBlobStore): UploadBlobs {
  return {
    put: (body, opts) => fs.put(body, opts),
    stat: (sha256) => fs.stat(sha256),
    localPath: async (sha256) => {
      if (!(await fs.has(sha256))) throw new Error(`blob ${sha256} is not here`);
      return fs.path(sha256);
    },
  };
}

/** A blob's bytes are stored in chunks of this size: a row is bounded, and so is what a read holds. */
export const BLOB_CHUNK_BYTES = 1024 * 1024;
/** Uncommitted blobs older than this were left by a replica that died mid-upload. */
export const STALE_BLOB_MS = 6 * 3600 * 1000;

/**
 * Replicas of control: uploaded bytes go into the store in chunks, so a file one replica received is
 * there for a build on any other. The body streams through (one chunk in memory, never the file),
 * hashed as it goes, and is named by its content only once its size and hash match. A build copies
 * the blob into this replica's data directory first (FsBlobStore checks the hash again on the way),
 * and reuses that copy for later builds.
 */
export class StoreUploadBlobs implements UploadBlobs {
  private fetching = new Map<string, Promise<string>>();

  constructor(
    private store: Store,
    private cache: FsBlobStore,
  ) {}

  async put(body: Readable, opts: { sha256?: string; size: number; maxBytes: number }): Promise<BlobInfo> {
    const want = opts.sha256 === undefined ? undefined : parseSha256(opts.sha256);
    const limit = Math.min(opts.size, opts.maxBytes);
    const id = `up_${randomBytes(12).toString('hex')}`;
    await this.store.blobs.begin(id, new Date().toISOString());
    try {
      const hash = createHash('sha256');
      let size = 0;
      let seq = 0;
      let pending: Buffer[] = [];
      let pendingBytes = 0;
      const flush = async () => {
        const chunk = Buffer.concat(pending, pendingBytes);
        pending = [];
        pendingBytes = 0;
        await this.store.blobs.append(id, seq++, chunk);
      };
      for await (const piece of body as AsyncIterable<Buffer>) {
        size += piece.length;
        if (size > limit) throw new BlobMismatchError(`body exceeds ${limit} bytes`, limit === opts.size ? 'size' : 'too-large');
        hash.update(piece);
        for (let at = 0; at < piece.length; ) {
          const take = Math.min(piece.length - at, BLOB_CHUNK_BYTES - pendingBytes);
          pending.push(piece.subarray(at, at + take));
          pendingBytes += take;
          at += take;
          if (pendingBytes === BLOB_CHUNK_BYTES) await flush();
        }
      }
      if (pendingBytes > 0) await flush();
      if (size !== opts.size) throw new BlobMismatchError(`body has ${size} bytes, expected ${opts.size}`, 'size');
      const got = hash.digest('hex');
      if (want !== undefined && got !== want) throw new BlobMismatchError(`body has sha256 ${got}, expected ${want}`, 'sha256');
      await this.store.blobs.commit(id, got, size);
      return { sha256: got, size };
    } catch (err) {
      body.resume();
      await this.store.blobs.discard(id).catch(() => undefined);
      throw err;
    }
  }

  async stat(sha256: string): Promise<BlobInfo | undefined> {
    const hex = parseSha256(sha256);
    const st = await this.store.blobs.stat(hex);
    return st && { sha256: hex, size: st.size };
  }

  localPath(sha256: string): Promise<string> {
    const hex = parseSha256(sha256);
    let p = this.fetching.get(hex);
    if (!p) {
      // Concurrent builds that copy the same file share one download.
      p = this.fetch(hex).finally(() => this.fetching.delete(hex));
      this.fetching.set(hex, p);
    }
    return p;
  }

  private async fetch(hex: string): Promise<string> {
    if (await this.cache.has(hex)) return this.cache.path(hex);
    const st = await this.store.blobs.stat(hex);
    if (!st) throw new Error(`the uploaded file sha256:${hex} is not in the store`);
    await this.cache.put(Readable.from(this.chunks(hex)), { sha256: hex, size: st.size });
    return this.cache.path(hex);
  }

  private async *chunks(hex: string): AsyncGenerator<Buffer> {
    for (let seq = 0; ; seq++) {
      const [chunk] = await this.store.blobs.chunks(hex, seq, 1);
      if (!chunk) return;
      yield chunk;
    }
  }

  /** Drops what uploads cut short by a replica's death left in the store. */
  purgeStale(now = Date.now()): Promise<number> {
    return this.store.blobs.purgeUncommitted(new Date(now - STALE_BLOB_MS).toISOString());
  }
}
