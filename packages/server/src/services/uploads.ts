import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Readable } from 'node:stream';
import { ServiceError } from '@sandboxd/protocol';
import { BlobMismatchError, parseSha256 } from '../images/blob-store.js';
import type { Store, UploadRow } from '../store/types/index.js';
import type { DiskClaim } from './disk-room.js';
import type { UploadBlobs } from './upload-blobs.js';

export const MAX_UPLOAD_BYTES = 100 * 1024 * 1024;
export const MAX_FILES_PER_REQUEST = 100;
export const UPLOAD_URL_TTL_SECONDS = 3600;

interface UploadClaim {
  /** organization */
  o: string;
  /** file id */
  f: string;
  /** expected sha256 hex, or '' when only the size is known (tarball shape) */
  h: string;
  /** expected size */
  s: number;
  /** expiry, unix seconds */
  e: number;
  /** relative path the client named */
  p: string;
  k: UploadRow['kind'];
}

const invalidMeta = (message: string) => new ServiceError('INVALID_FILE_METADATA', message);

/** One machine: the upload URLs' HMAC key, made once and kept 0600 in the data dir. */
export function uploadKeyFromFile(keyFile: string): Buffer {
  if (!existsSync(keyFile)) {
    mkdirSync(dirname(keyFile), { recursive: true, mode: 0o700 });
    writeFileSync(keyFile, randomBytes(32).toString('hex'), { mode: 0o600, flag: 'wx' });
  }
  return Buffer.from(readFileSync(keyFile, 'utf8').trim(), 'hex');
}

/** Replicas: one HMAC key for all, made by the first and kept in the store, so a URL one signed is good on every other. */
export async function sharedUploadKey(store: Store): Promise<Buffer> {
  return Buffer.from(await store.kv.setIfAbsent('upload-hmac-key', randomBytes(32).toString('hex')), 'hex');
}

/** What an upload is admitted against before a byte of it is stored (absent: not checked). */
export interface UploadAdmission {
  /** The organization's quota (max_total_disk_gb): 409; counts the upload until the release. */
  claimQuota?: (orgId: string, bytes: number) => Promise<() => void>;
  /** Room on the filesystem of the blobs (services/disk-room.ts): 507. */
  claimDisk?: DiskClaim;
}

/**
 * Presigned upload URLs for template files: the claim (organization, file, hash, size, expiry) is
 * in the URL, signed with an HMAC key (uploadKeyFromFile, sharedUploadKey). The PUT needs no API
 * key; the body streams into the blobs and is kept only if its size and hash match.
 */
export class UploadService {
  constructor(
    private store: Store,
    private blobs: UploadBlobs,
    private key: Buffer,
    private publicUrl: string,
    private admission: UploadAdmission = {},
  ) {
    if (key.length < 32) throw new Error('an upload HMAC key has at least 32 bytes');
  }

  private sign(claim: UploadClaim): string {
    const payload = Buffer.from(JSON.stringify(claim)).toString('base64url');
    const mac = createHmac('sha256', this.key).update(payload).digest('base64url');
    return `${payload}.${mac}`;
  }

  private urlFor(claim: UploadClaim): string {
    return `${this.publicUrl}/v1/templates/files/upload/${this.sign(claim)}`;
  }

  /** The spec's shape: `{files:[{path, size, hash}]}`. */
  async linksForFiles(orgId: string, files: unknown): Promise<Array<Record<string, unknown>>> {
    if (!Array.isArray(files) || files.length === 0) throw invalidMeta('files must be a non-empty array of {path, size, hash}');
    if (files.length > MAX_FILES_PER_REQUEST) throw invalidMeta(`at most ${MAX_FILES_PER_REQUEST} files per request, got ${files.length}`);
    const exp = Math.floor(Date.now() / 1000) + UPLOAD_URL_TTL_SECONDS;
    const out = [];
    for (const [i, f] of files.entries()) {
      const m = f as Record<string, unknown>;
      if (!m || typeof m !== 'object') throw invalidMeta(`files[${i}] must be an object`);
      if (typeof m.path !== 'string' || m.path === '' || m.path.length > 4096 || m.path.includes('\0')) {
        throw invalidMeta(`files[${i}].path must be a non-empty relative path`);
      }
      if (typeof m.size !== 'number' || !Number.isInteger(m.size) || m.size < 0) throw invalidMeta(`files[${i}].size must be a non-negative integer`);
      if (m.size > MAX_UPLOAD_BYTES) throw invalidMeta(`files[${i}] is ${m.size} bytes; the limit is ${MAX_UPLOAD_BYTES} bytes (100 MB) per file`);
      if (typeof m.hash !== 'string' || !/^sha256:[0-9a-fA-F]{64}$/.test(m.hash)) {
        throw invalidMeta(`files[${i}].hash must be "sha256:<64 hex digits>"`);
      }
      const sha = parseSha256(m.hash);
      const fileId = `f_${sha}`;
      // Blobs are shared by content, but a file is this organization's only once it completed a PUT
      // of it (which proves it has the bytes): knowing a hash must neither give another
      // organization's file nor tell whether it exists.
      const own = await this.store.uploads.byFileId(orgId, fileId);
      const present = own !== undefined && own.size === m.size && (await this.blobs.stat(sha))?.size === m.size;
      // Already proven: the same content under another name needs no second upload.
      if (present) await this.store.uploads.upsert({ ...own, path: m.path, createdAt: new Date().toISOString() });
      out.push({
        path: m.path,
        file_id: fileId,
        upload_url: this.urlFor({ o: orgId, f: fileId, h: sha, s: m.size, e: exp, p: m.path, k: 'file' }),
        expires_at: new Date(exp * 1000).toISOString(),
        present,
      });
    }
    return out;
  }

  /**
   * The newer client shape: one gzip tarball named by the client's `files_hash`, which the client
   * chose (it is not the tarball's hash), so it names a tarball only within the organization that
   * uploaded it.
   */
  async linkForTarball(orgId: string, filesHash: unknown, contentLength: unknown): Promise<Record<string, unknown>> {
    if (typeof filesHash !== 'string' || !/^[A-Za-z0-9:_-]{8,128}$/.test(filesHash)) throw invalidMeta('files_hash must be a hash string');
    if (typeof contentLength !== 'number' || !Number.isInteger(contentLength) || contentLength < 0) {
      throw invalidMeta('content_length must be a non-negative integer');
    }
    if (contentLength > MAX_UPLOAD_BYTES) throw invalidMeta(`content_length ${contentLength} exceeds the ${MAX_UPLOAD_BYTES}-byte limit`);
    const fileId = `t_${filesHash.replace(/^sha256:/, '')}`;
    const existing = await this.store.uploads.byFileId(orgId, fileId);
    const present = existing !== undefined && (await this.blobs.stat(existing.sha256)) !== undefined;
    const exp = Math.floor(Date.now() / 1000) + UPLOAD_URL_TTL_SECONDS;
    return {
      present,
      files_hash: filesHash,
      upload_url: present ? null : this.urlFor({ o: orgId, f: fileId, h: '', s: contentLength, e: exp, p: filesHash, k: 'tarball' }),
      expires_at: new Date(exp * 1000).toISOString(),
    };
  }

  /** Verifies the signed URL token; tampered or expired → 403. */
  verify(token: string): UploadClaim {
    const [payload, mac] = token.split('.');
    if (!payload || !mac) throw new ServiceError('PERMISSION_DENIED', 'malformed upload URL');
    const expected = createHmac('sha256', this.key).update(payload).digest();
    const given = Buffer.from(mac, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw new ServiceError('PERMISSION_DENIED', 'upload URL signature is invalid');
    let claim: UploadClaim;
    try {
      claim = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as UploadClaim;
    } catch {
      throw new ServiceError('PERMISSION_DENIED', 'malformed upload URL');
    }
    if (typeof claim?.e !== 'number' || claim.e * 1000 < Date.now()) throw new ServiceError('PERMISSION_DENIED', 'upload URL expired; ask for a new one');
    return claim;
  }

  /**
   * Streams a PUT body into the blob store; nothing is kept unless size and hash match. This is the
   * only place a file becomes usable by an organization (see linksForFiles).
   */
  async receive(token: string, body: Readable, contentLength: number | undefined): Promise<{ file_id: string; size: number; sha256: string }> {
    const claim = this.verify(token);
    if (contentLength !== undefined && contentLength !== claim.s) {
      body.resume();
      throw new ServiceError('VALIDATION_ERROR', `Content-Length ${contentLength} does not match the declared size ${claim.s}`);
    }
    let releaseQuota: (() => void) | undefined;
    let releaseDisk: ((kept?: boolean) => void) | undefined;
    let kept = false;
    try {
      // The organization's quota, then room on the host, for the whole body before a byte of it is stored.
      releaseQuota = await this.admission.claimQuota?.(claim.o, claim.s);
      releaseDisk = await this.admission.claimDisk?.(claim.s, `an upload of ${claim.s} bytes`);
      const info = await this.blobs.put(body, { size: claim.s, maxBytes: MAX_UPLOAD_BYTES, ...(claim.h ? { sha256: claim.h } : {}) });
      await this.store.uploads.upsert({
        orgId: claim.o,
        fileId: claim.f,
        path: claim.p,
        sha256: info.sha256,
        size: info.size,
        kind: claim.k,
        createdAt: new Date().toISOString(),
      });
      kept = true;
      return { file_id: claim.f, size: info.size, sha256: info.sha256 };
    } catch (err) {
      if (err instanceof BlobMismatchError) {
        throw new ServiceError(err.kind === 'too-large' ? 'PAYLOAD_TOO_LARGE' : 'VALIDATION_ERROR', `upload rejected, nothing stored: ${err.message}`);
      }
      // Refused before reading (no room): the client's body is drained, not kept.
      body.resume();
      throw err;
    } finally {
      // The upload's row counts it from here (a refused one left nothing).
      releaseDisk?.(kept);
      releaseQuota?.();
    }
  }

  /** A file the organization itself uploaded, for a COPY step (by file_id, src path or files_hash). */
  async resolve(orgId: string, ref: { fileId?: string; path?: string }): Promise<UploadRow> {
    const row = ref.fileId ? await this.store.uploads.byFileId(orgId, ref.fileId) : await this.store.uploads.byPath(orgId, ref.path!);
    const what = ref.fileId ? `file_id ${ref.fileId}` : `src "${ref.path}"`;
    if (!row || (await this.blobs.stat(row.sha256)) === undefined) {
      throw new ServiceError('INVALID_TEMPLATE_DEFINITION', `${what} has not been uploaded: ask for an upload link and PUT the file first`);
    }
    return row;
  }

  /** A host file with the bytes of an upload resolve() found, checked against its sha256 (fetched from the store first in a cluster). */
  hostPath(row: UploadRow): Promise<string> {
    return this.blobs.localPath(row.sha256);
  }
}
