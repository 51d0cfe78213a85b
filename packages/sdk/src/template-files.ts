import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { streamFrom } from './body.js';
import type { ApiClient, CallOptions } from './client.js';
import { ValidationError } from './errors.js';
import { contextPath, tarStream } from './tar.js';

export interface LocalFile {
  /** Path sent to the service (relative, `/`-separated). */
  path: string;
  localPath: string;
  size: number;
  /** `sha256:<hex>`. */
  hash: string;
}

export interface UploadedFile {
  path: string;
  fileId: string;
}

/** The service's limits on upload-link requests. */
export const MAX_FILES_PER_REQUEST = 100;
export const MAX_FILE_BYTES = 100 * 1024 * 1024;

export async function hashFile(localPath: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(localPath)) h.update(chunk as Buffer);
  return `sha256:${h.digest('hex')}`;
}

function toPosix(p: string): string {
  return p.split(sep).join('/');
}

/**
 * The files a copy source names: a file is sent under its base name; a directory's files under
 * their paths inside it (as `COPY dir /dest` copies the directory's content).
 */
export async function collectFiles(src: string, contextDir: string): Promise<LocalFile[]> {
  const abs = isAbsolute(src) ? src : resolve(contextDir, src);
  let st;
  try {
    st = await stat(abs);
  } catch {
    throw new ValidationError(`copy source ${src} not found (looked in ${abs})`, { code: 'VALIDATION_ERROR' });
  }
  const out: LocalFile[] = [];
  const add = async (file: string, path: string): Promise<void> => {
    const s = await stat(file);
    if (s.size > MAX_FILE_BYTES) throw new ValidationError(`${file} is larger than the 100 MB limit for template files`, { code: 'FILE_TOO_LARGE' });
    out.push({ path, localPath: file, size: s.size, hash: await hashFile(file) });
  };
  if (st.isFile()) {
    await add(abs, basename(abs));
  } else if (st.isDirectory()) {
    const walk = async (dir: string): Promise<void> => {
      const entries = await readdir(dir, { withFileTypes: true });
      entries.sort((a, b) => a.name.localeCompare(b.name));
      for (const e of entries) {
        const p = join(dir, e.name);
        if (e.isDirectory()) await walk(p);
        else if (e.isFile()) await add(p, toPosix(relative(abs, p)));
      }
    };
    await walk(abs);
    if (out.length === 0) throw new ValidationError(`copy source ${src} is an empty directory`, { code: 'VALIDATION_ERROR' });
  } else {
    throw new ValidationError(`copy source ${src} is not a file or directory`, { code: 'VALIDATION_ERROR' });
  }
  return out;
}

/** Asks for upload links (100 files per request) and PUTs each file's bytes, streamed from disk. */
export async function uploadTemplateFiles(client: ApiClient, files: LocalFile[], options: CallOptions = {}): Promise<UploadedFile[]> {
  const out: UploadedFile[] = [];
  for (let i = 0; i < files.length; i += MAX_FILES_PER_REQUEST) {
    const batch = files.slice(i, i + MAX_FILES_PER_REQUEST);
    const body = await client.http.json<{ upload_urls?: Array<{ path?: string; upload_url?: string | null; file_id?: string; present?: boolean }> }>({
      method: 'POST',
      path: '/v1/templates/files/upload-link',
      json: { files: batch.map((f) => ({ path: f.path, size: f.size, hash: f.hash })) },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: 'get upload links',
    });
    const links = body.upload_urls ?? [];
    for (const [j, f] of batch.entries()) {
      const link = links.find((l) => l.path === f.path) ?? links[j];
      if (!link?.file_id) throw new ValidationError(`the service gave no upload link for ${f.path}`, { code: 'INVALID_RESPONSE' });
      if (link.upload_url && link.present !== true) {
        await client.http.json({
          method: 'PUT',
          path: link.upload_url,
          body: () => streamFrom(createReadStream(f.localPath)),
          contentType: 'application/octet-stream',
          headers: { 'content-length': String(f.size) },
          noAuth: true,
          signal: options.signal,
          timeoutMs: options.requestTimeoutMs ?? 0,
          what: `upload ${f.path}`,
        });
      }
      out.push({ path: f.path, fileId: link.file_id });
    }
  }
  return out;
}

/**
 * Packs copy sources (relative to `contextDir`) into a gzip tarball, uploads it unless the service
 * already has it, and returns its `files_hash` and the sources as paths inside the tarball. This
 * keeps directory structure, modes and symlinks, as Docker's COPY does.
 */
export async function uploadContext(
  client: ApiClient,
  contextDir: string,
  sources: string[],
  options: CallOptions = {},
): Promise<{ filesHash: string; paths: string[] }> {
  const paths = sources.map((s) => contextPath(s, contextDir));
  for (const [i, p] of paths.entries()) {
    if (p.includes(',')) throw new ValidationError(`copy source ${sources[i]}: names with a comma cannot be sent`, { code: 'VALIDATION_ERROR' });
    await stat(join(contextDir, p)).catch(() => {
      throw new ValidationError(`copy source ${sources[i]} not found (looked in ${resolve(contextDir, p)})`, { code: 'VALIDATION_ERROR' });
    });
  }
  const tmp = join(tmpdir(), `sandboxd-context-${randomBytes(6).toString('hex')}.tar.gz`);
  try {
    const hash = createHash('sha256');
    let size = 0;
    const measure = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        hash.update(chunk);
        size += chunk.byteLength;
        if (size > MAX_FILE_BYTES) cb(new ValidationError('the copy sources are larger than the 100 MB limit for an upload (compressed)', { code: 'FILE_TOO_LARGE' }));
        else cb(null, chunk);
      },
    });
    await pipeline(Readable.from(tarStream(resolve(contextDir), paths)), createGzip(), measure, createWriteStream(tmp), { signal: options.signal });
    const filesHash = `sha256:${hash.digest('hex')}`;
    const link = await client.http.json<{ present?: boolean; upload_url?: string | null }>({
      method: 'POST',
      path: '/v1/templates/files/upload-link',
      json: { files_hash: filesHash, content_length: size },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: 'get upload link',
    });
    if (!link.present && link.upload_url) {
      await client.http.json({
        method: 'PUT',
        path: link.upload_url,
        body: () => streamFrom(createReadStream(tmp)),
        contentType: 'application/gzip',
        headers: { 'content-length': String(size) },
        noAuth: true,
        signal: options.signal,
        timeoutMs: options.requestTimeoutMs ?? 0,
        what: 'upload build context',
      });
    }
    return { filesHash, paths };
  } finally {
    await rm(tmp, { force: true });
  }
}
