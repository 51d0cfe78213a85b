export interface UploadRow {
  orgId: string;
  /** `f_<sha256 hex>` for files, `t_<files_hash>` for tarballs of the newer client shape. */
  fileId: string;
  path: string;
  sha256: string;
  size: number;
  kind: 'file' | 'tarball';
  createdAt: string;
}

export interface UploadRepo {
  upsert(row: UploadRow): Promise<void>;
  byFileId(orgId: string, fileId: string): Promise<UploadRow | undefined>;
  /** The latest upload of `path` by the organization. */
  byPath(orgId: string, path: string): Promise<UploadRow | undefined>;
  /** Removes the organization's uploads (it is being deleted); returns how many. */
  removeForOrg(orgId: string): Promise<number>;
  /** Bytes the organization's uploads reference: each content (sha256) once, however many names it has. */
  bytesForOrg(orgId: string): Promise<number>;
  /** Every content some upload of any organization references (what blob collection must keep). */
  referencedSha256s(): Promise<Set<string>>;
  /** Removes uploads last uploaded or named (created_at) before `before`: a client uploads them again. */
  removeOlderThan(before: string): Promise<number>;
}

/**
 * Content-addressed blobs kept in the store in chunks of bounded size, so that a file any replica
 * received can be read by every other. A blob is written under an id of its own (`begin`,
 * `append`), and named by its content only once it is complete and checked (`commit`): a blob
 * readable under a sha256 is always whole. Nothing here checks the hash; the caller does.
 */
export interface BlobRepo {
  /** Starts a blob under `id` (a fresh random id), not readable by any sha256 yet. */
  begin(id: string, at: string): Promise<void>;
  /** Adds chunk number `seq` (0, 1, 2, ...) of a blob begun and not committed. */
  append(id: string, seq: number, data: Uint8Array): Promise<void>;
  /**
   * Names the blob by its content. When a blob of that content is there already (another upload
   * of the same bytes), this one is dropped and the answer is 'exists'.
   */
  commit(id: string, sha256: string, size: number): Promise<'stored' | 'exists'>;
  /** Drops a blob that is not committed, with its chunks (a write that failed). */
  discard(id: string): Promise<void>;
  stat(sha256: string): Promise<{ size: number } | undefined>;
  /** Chunks `fromSeq` and on of the committed blob, at most `limit` of them, in order ([] past its end or for no such blob). */
  chunks(sha256: string, fromSeq: number, limit: number): Promise<Buffer[]>;
  /** Drops blobs begun before `before` and never committed (their writer died); returns how many. */
  purgeUncommitted(before: string): Promise<number>;
  /** Committed blobs begun before `before` that no upload of any organization references. */
  unreferenced(before: string): Promise<string[]>;
  /** Drops a committed blob with its chunks, unless an upload references it (by then); whether it went. */
  removeUnreferenced(sha256: string): Promise<boolean>;
}
