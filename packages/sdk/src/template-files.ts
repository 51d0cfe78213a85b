import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { basename, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { streamFrom } from './body.js';
import type { ApiClient, CallOptions } from './client.js';
import { ValidationError } from './errors.js';

export interface LocalFile {
  /** Path sent to the service (relative, `/`-separated). */
  path: string;
  localPath: string;
  size: number;
  /** `sha256:<hex>`. */
  hash: string;
  /** The copy source named this file itself (not a directory holding it). */
  fromFile: boolean;
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
  const add = async (file: string, path: string, fromFile: boolean): Promise<void> => {
    const s = await stat(file);
    if (s.size > MAX_FILE_BYTES) throw new ValidationError(`${file} is larger than the 100 MB limit for template files`, { code: 'FILE_TOO_LARGE' });
    out.push({ path, localPath: file, size: s.size, hash: await hashFile(file), fromFile });
  };
  if (st.isFile()) {
    await add(abs, basename(abs), true);
  } else if (st.isDirectory()) {
    const walk = async (dir: string): Promise<void> => {
      const entries = await readdir(dir, { withFileTypes: true });
      entries.sort((a, b) => a.name.localeCompare(b.name));
      for (const e of entries) {
        const p = join(dir, e.name);
        if (e.isDirectory()) await walk(p);
        else if (e.isFile()) await add(p, toPosix(relative(abs, p)), false);
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
