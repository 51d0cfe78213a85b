import { createWriteStream } from 'node:fs';
import { copyFile, mkdir, open, stat, unlink } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { basename, dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { drainRequest } from '../http/drain.js';
import { TransferGc } from '../memory.js';
import { isProgrammingError, ServiceError } from '../proto.js';
import { fsError } from './errors.js';
import { mimeType } from './mime.js';
import { commitFile, ensureParentDir, notWritable, parseMode, tempNameBeside } from './ops.js';
import { resolvePath } from './paths.js';

/** Streams a file: correct length and type, single byte ranges, never the whole file in memory. */
export async function sendFile(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    throw fsError(err, path);
  }
  let handedOver = false;
  try {
    const st = await fh.stat();
    if (st.isDirectory()) throw new ServiceError('NOT_A_FILE', `${path} is a directory, not a file`, { path });
    if (!st.isFile()) throw new ServiceError('NOT_A_FILE', `${path} is not a regular file`, { path });
    const name = basename(path);
    const headers: Record<string, string | number> = {
      'content-type': mimeType(name),
      'content-disposition': `attachment; filename="${name.replace(/[^\x20-\x7e]|["\\]/g, '_')}"; filename*=UTF-8''${encodeURIComponent(name)}`,
      'last-modified': st.mtime.toUTCString(),
      'accept-ranges': 'bytes',
    };
    let start = 0;
    let end = st.size - 1;
    let status = 200;
    const range = typeof req.headers.range === 'string' ? /^bytes=(\d*)-(\d*)$/.exec(req.headers.range.trim()) : null;
    if (range && st.size > 0 && (range[1] || range[2])) {
      if (range[1]) {
        start = Number(range[1]);
        end = range[2] ? Math.min(Number(range[2]), st.size - 1) : st.size - 1;
      } else {
        start = Math.max(0, st.size - Number(range[2]));
      }
      if (start > end || start >= st.size) {
        res.writeHead(416, { 'content-range': `bytes */${st.size}`, 'content-length': 0 });
        res.end();
        return;
      }
      status = 206;
      headers['content-range'] = `bytes ${start}-${end}/${st.size}`;
    }
    headers['content-length'] = st.size === 0 ? 0 : end - start + 1;
    res.writeHead(status, headers);
    if (req.method === 'HEAD' || st.size === 0) {
      res.end();
      return;
    }
    const stream = fh.createReadStream({ start, end, highWaterMark: 256 * 1024, autoClose: true });
    const gc = new TransferGc();
    stream.on('data', (c: Buffer | string) => gc.count(c.length));
    handedOver = true;
    await pipeline(stream, res).catch(() => res.destroy());
    gc.done();
  } finally {
    if (!handedOver) await fh.close();
  }
}

export interface UploadResult {
  success: true;
  path: string;
  size: number;
  files?: Array<{ path: string; size: number }>;
}

/**
 * Receives `multipart/form-data` with a `file` part and a `path` field, in either order (real
 * clients send the file first). The file streams to a temp file beside its destination (or in the
 * staging dir until the path is known) and is renamed into place only once complete, so a failure
 * (client gone, disk full) leaves no partial file behind. A raw body with `?path=` works too.
 */
export async function receiveUpload(req: IncomingMessage, url: URL, workspaceDir: string, stagingDir: string): Promise<UploadResult> {
  const queryPath = url.searchParams.get('path');
  const contentType = req.headers['content-type'] ?? '';
  const mode = parseMode(url.searchParams.get('mode') ?? undefined);
  if (!/^multipart\/form-data/i.test(contentType)) {
    if (!queryPath) {
      throw new ServiceError('UNSUPPORTED_MEDIA_TYPE', 'send multipart/form-data with a file part and a path field, or a raw body with ?path=');
    }
    const dest = resolvePath(queryPath, workspaceDir);
    const size = await streamToFile(req, dest, dest, mode);
    return { success: true, path: dest, size };
  }

  const { default: busboy } = await import('busboy');
  const parser = busboy({ headers: req.headers, limits: { fields: 32, fieldSize: 64 * 1024, files: 1, parts: 64 } });
  let dest: string | null = queryPath ? resolvePath(queryPath, workspaceDir) : null;
  let fieldMode = mode;
  let fileWork: Promise<{ temp: string; size: number; filename: string }> | null = null;
  let failure: unknown = null;
  const uploadGc = new TransferGc();

  await new Promise<void>((resolve, reject) => {
    parser.on('field', (name, value) => {
      try {
        if (name === 'path' || name === 'destination' || name === 'remote_path') dest = resolvePath(value, workspaceDir, name);
        else if (name === 'mode') fieldMode = parseMode(value);
      } catch (err) {
        failure ??= err;
      }
    });
    parser.on('file', (name, stream: Readable, info) => {
      if (fileWork || failure) {
        stream.resume();
        return;
      }
      // It may fail before the pipeline below is attached (client gone during the mkdir).
      stream.on('error', () => undefined);
      const filename = info.filename ?? name;
      // Known destination: write beside it (same filesystem, so the final rename is atomic).
      const tempTarget = dest ?? join(stagingDir, 'upload');
      fileWork = (async () => {
        await mkdir(dirname(tempTarget), { recursive: true });
        const temp = tempNameBeside(tempTarget);
        const size = await streamToTemp(stream, temp);
        return { temp, size, filename };
      })();
      // Writing failed (disk full...): stop parsing; the rest of the body is drained and dropped.
      fileWork.catch((err: unknown) => {
        failure ??= err;
        parser.destroy(err instanceof Error ? err : new Error(String(err)));
      });
    });
    parser.on('filesLimit', () => {
      failure ??= new ServiceError('VALIDATION_ERROR', 'only one file per upload request');
    });
    // busboy's own errors (a truncated or malformed body) are the client's; ours arrive as
    // ServiceErrors or errno errors, and a bug (a TypeError) stays one.
    parser.on('error', (err: Error) =>
      reject(
        err instanceof ServiceError || 'errno' in err || isProgrammingError(err)
          ? err
          : new ServiceError('VALIDATION_ERROR', `malformed multipart/form-data body: ${err.message}`),
      ),
    );
    parser.on('close', resolve);
    // The client went away: stop the parser, which fails the file stream, which removes the temp file.
    const abort = (message: string) => {
      const err = new ServiceError('VALIDATION_ERROR', message);
      parser.destroy(err);
      reject(err);
    };
    req.on('aborted', () => abort('upload aborted by the client'));
    req.on('error', (err) => abort(`upload failed: ${err.message}`));
    req.on('data', (c: Buffer) => uploadGc.count(c.length));
    req.pipe(parser);
  }).catch((err: unknown) => {
    failure ??= err;
  });
  uploadGc.done();

  const file = fileWork ? await (fileWork as Promise<{ temp: string; size: number; filename: string }>).catch(() => null) : null;
  try {
    if (failure) throw failure;
    if (!file) throw new ServiceError('VALIDATION_ERROR', 'the upload has no file part', { field: 'file' });
    if (!dest) throw new ServiceError('VALIDATION_ERROR', 'path is required (a form field or ?path=)', { field: 'path' });
    let finalPath: string = dest;
    if (dest.endsWith('/') || (await stat(dest).then((s) => s.isDirectory(), () => false))) {
      finalPath = join(dest, basename(file.filename) || 'upload');
    }
    await placeFile(file.temp, finalPath, fieldMode);
    return { success: true, path: finalPath, size: file.size };
  } catch (err) {
    if (file) await unlink(file.temp).catch(() => undefined);
    req.unpipe(parser);
    await drainRequest(req);
    throw fsError(err, dest ?? 'the upload');
  }
}

async function streamToTemp(stream: Readable, temp: string): Promise<number> {
  const out = createWriteStream(temp, { flags: 'wx', mode: 0o600, highWaterMark: 1024 * 1024 });
  let opened = false;
  out.once('open', () => (opened = true));
  try {
    await pipeline(stream, out);
  } catch (err) {
    await unlink(temp).catch(() => undefined);
    throw opened ? err : notWritable(err as NodeJS.ErrnoException, temp.slice(0, temp.lastIndexOf('/')) || '/');
  }
  return out.bytesWritten;
}

async function streamToFile(req: IncomingMessage, dest: string, label: string, mode: number | undefined): Promise<number> {
  let temp: string | null = null;
  try {
    await ensureParentDir(dest);
    temp = tempNameBeside(dest);
    const size = await streamToTemp(req, temp);
    await commitFile(temp, dest, mode, true);
    temp = null;
    return size;
  } catch (err) {
    await drainRequest(req);
    throw fsError(err, label);
  } finally {
    if (temp) await unlink(temp).catch(() => undefined);
  }
}

/** Moves a finished temp file to its destination; across filesystems it is copied first. */
async function placeFile(temp: string, finalPath: string, mode: number | undefined): Promise<void> {
  await ensureParentDir(finalPath);
  try {
    await commitFile(temp, finalPath, mode, true);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
    const beside = tempNameBeside(finalPath);
    try {
      await copyFile(temp, beside);
      await commitFile(beside, finalPath, mode, true);
    } catch (copyErr) {
      await unlink(beside).catch(() => undefined);
      throw copyErr;
    }
    await unlink(temp).catch(() => undefined);
  }
}
