import { open, type FileHandle } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { basename, dirname } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { fsError } from '../files/errors.js';
import { notWritable } from '../files/ops.js';
import { sendFile } from '../files/transfer.js';
import { drainRequest } from '../http/drain.js';
import { ServiceError } from '../proto.js';
import { logLine } from '../log.js';
import type { EnvdDeps } from './deps.js';
import { makeDirsAs } from './rt-fs.js';
import { userPath, type SandboxUser } from './users.js';

/** Files one multipart upload may carry. */
export const MAX_UPLOAD_FILES = 1000;

interface WrittenEntry {
  name: string;
  type: 'file';
  path: string;
}

/** E2B's error body: `{code, message}` with the HTTP status as the code. */
export function sendError(res: ServerResponse, err: unknown, what: string): void {
  const e = err instanceof ServiceError ? err : fsError(err, what);
  if (e.status >= 500) logLine(`e2b ${what}: ${e.message}${e.detail ? ` (${e.detail})` : ''}`);
  // E2B's daemon answers an unknown user with 401 (the client's AuthenticationError names it).
  const status = e.code === 'VALIDATION_ERROR' && e.extra.field === 'username' ? 401 : e.code === 'DISK_FULL' ? 507 : e.status;
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ code: status, message: e.message });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function userOf(d: EnvdDeps, url: URL): SandboxUser {
  return d.users.resolve(url.searchParams.get('username'));
}

/** GET /files?path=&username=: the file's bytes (ranges honoured), a JSON error otherwise. */
export async function downloadFile(d: EnvdDeps, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const user = userOf(d, url);
  await sendFile(req, res, userPath(url.searchParams.get('path') ?? '', user));
}

/**
 * Streams `source` into `dest` as `user`: parents made, the file truncated and written in place as
 * E2B's daemon does (so a watch sees the file created and written, no temp name), owned by the user.
 */
async function writeAs(source: Readable, dest: string, user: SandboxUser): Promise<void> {
  await makeDirsAs(dirname(dest), user);
  let fh: FileHandle;
  try {
    fh = await open(dest, 'w', 0o644);
  } catch (err) {
    throw fsError(notWritable(err as NodeJS.ErrnoException, dirname(dest)), dest);
  }
  try {
    if (user.uid !== 0) await fh.chown(user.uid, user.gid);
    await pipeline(source, fh.createWriteStream({ highWaterMark: 1024 * 1024 }));
  } catch (err) {
    throw fsError(err, dest);
  } finally {
    await fh.close().catch(() => undefined);
  }
}

/**
 * POST /files: multipart/form-data with one or more `file` parts (each part's filename is its
 * path unless ?path= names the one file), or a raw application/octet-stream body (gzip if
 * Content-Encoding says so) for ?path=. Answers the entries written, as E2B's daemon does.
 */
export async function uploadFiles(d: EnvdDeps, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const user = userOf(d, url);
  if (Object.keys(req.headers).some((h) => h.startsWith('x-metadata-'))) {
    throw new ServiceError('INVALID_FILE_METADATA', 'file metadata (X-Metadata-* headers) is not supported by sandboxd; write the file without metadata');
  }
  const queryPath = url.searchParams.get('path');
  const contentType = req.headers['content-type'] ?? '';
  const written: WrittenEntry[] = [];
  const done = (path: string) => written.push({ name: basename(path), type: 'file', path });

  if (!/^multipart\/form-data/i.test(contentType)) {
    if (!queryPath) throw new ServiceError('VALIDATION_ERROR', 'path is required for a raw upload', { field: 'path' });
    const dest = userPath(queryPath, user);
    const encoding = String(req.headers['content-encoding'] ?? '').trim().toLowerCase();
    if (encoding !== '' && encoding !== 'identity' && encoding !== 'gzip') {
      throw new ServiceError('UNSUPPORTED_MEDIA_TYPE', `Content-Encoding ${encoding} is not supported (gzip is)`);
    }
    try {
      await writeAs(encoding === 'gzip' ? req.pipe(createGunzip()) : req, dest, user);
    } catch (err) {
      await drainRequest(req);
      throw err;
    }
    done(dest);
    return sendJson(res, written);
  }

  const { default: busboy } = await import('busboy');
  const parser = busboy({ headers: req.headers, preservePath: true, limits: { files: MAX_UPLOAD_FILES, parts: MAX_UPLOAD_FILES + 64, fields: 64, fieldSize: 64 * 1024 } });
  const work: Array<Promise<void>> = [];
  const inOrder: WrittenEntry[] = [];
  let failure: unknown = null;
  let count = 0;
  await new Promise<void>((resolve) => {
    parser.on('file', (_name, stream: Readable, info) => {
      stream.on('error', () => undefined);
      count++;
      let dest: string;
      try {
        if (failure) throw failure;
        if (queryPath && count > 1) throw new ServiceError('VALIDATION_ERROR', 'with ?path= an upload carries one file; name each file by its part filename instead', { field: 'path' });
        dest = userPath(queryPath ?? info.filename ?? '', user);
      } catch (err) {
        failure ??= err;
        stream.resume();
        return;
      }
      const slot = count - 1;
      work.push(
        writeAs(stream, dest, user).then(
          () => void (inOrder[slot] = { name: basename(dest), type: 'file', path: dest }),
          (err: unknown) => {
            failure ??= err;
            stream.resume();
          },
        ),
      );
    });
    parser.on('filesLimit', () => {
      failure ??= new ServiceError('VALIDATION_ERROR', `at most ${MAX_UPLOAD_FILES} files per upload`);
    });
    parser.on('error', (err: Error) => {
      failure ??= err instanceof ServiceError ? err : new ServiceError('VALIDATION_ERROR', `malformed multipart/form-data body: ${err.message}`);
      resolve();
    });
    parser.on('close', resolve);
    req.on('aborted', () => {
      failure ??= new ServiceError('VALIDATION_ERROR', 'upload aborted by the client');
      parser.destroy();
      resolve();
    });
    req.pipe(parser);
  });
  await Promise.all(work);
  if (failure) {
    req.unpipe(parser);
    await drainRequest(req);
    throw failure;
  }
  written.push(...inOrder.filter((e) => e !== undefined));
  if (written.length === 0) throw new ServiceError('VALIDATION_ERROR', 'the upload has no file part', { field: 'file' });
  sendJson(res, written);
}

function sendJson(res: ServerResponse, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
