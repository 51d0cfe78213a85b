import { randomBytes } from 'node:crypto';
import type { Stats } from 'node:fs';
import { chmod, chown, lstat, mkdir, open, readdir, realpath, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { isUtf8 } from 'node:buffer';
import { basename, dirname, join } from 'node:path';
import { ServiceError, type FileEntry, type FileListResult } from '../proto.js';
import { fsError } from './errors.js';

/** Parses a file mode: "0644", "644", "0o644", or a number written with octal digits (644). */
export function parseMode(value: unknown): number | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  const text = typeof value === 'number' ? String(value) : typeof value === 'string' ? value.trim().replace(/^0o/i, '') : null;
  if (text === null || !/^[0-7]{1,4}$/.test(text)) {
    throw new ServiceError('VALIDATION_ERROR', 'mode must be an octal file mode such as "0644"', { field: 'mode' });
  }
  return parseInt(text, 8);
}

/** `ls -l` style permissions, e.g. "drwxr-xr-x". */
export function permissionString(st: Stats): string {
  const type = st.isDirectory() ? 'd' : st.isSymbolicLink() ? 'l' : st.isCharacterDevice() ? 'c' : st.isBlockDevice() ? 'b' : st.isFIFO() ? 'p' : st.isSocket() ? 's' : '-';
  const m = st.mode;
  const bits = ['r', 'w', 'x'];
  let out = type;
  for (let shift = 6; shift >= 0; shift -= 3) {
    for (let i = 0; i < 3; i++) out += m & (1 << (shift + 2 - i)) ? bits[i] : '-';
  }
  if (m & 0o4000) out = out.slice(0, 3) + (m & 0o100 ? 's' : 'S') + out.slice(4);
  if (m & 0o2000) out = out.slice(0, 6) + (m & 0o010 ? 's' : 'S') + out.slice(7);
  if (m & 0o1000) out = out.slice(0, 9) + (m & 0o001 ? 't' : 'T');
  return out;
}

export function octalMode(st: Stats): string {
  return `0${(st.mode & 0o7777).toString(8).padStart(3, '0')}`;
}

export function entryOf(name: string, path: string, st: Stats, isLink: boolean): FileEntry {
  const modified = st.mtime.toISOString();
  const isDir = st.isDirectory();
  return {
    name,
    path,
    size: isDir ? 0 : st.size,
    is_dir: isDir,
    is_directory: isDir,
    is_file: st.isFile(),
    is_symlink: isLink,
    permissions: permissionString(st),
    mode: octalMode(st),
    modified,
    modified_time: modified,
  };
}

export async function listDir(path: string): Promise<FileListResult> {
  let names: string[];
  try {
    const st = await stat(path);
    if (!st.isDirectory()) throw new ServiceError('NOT_A_DIRECTORY', `${path} is not a directory`, { path });
    names = await readdir(path);
  } catch (err) {
    throw fsError(err, path);
  }
  names.sort();
  const entries = await Promise.all(
    names.map(async (name) => {
      const full = path === '/' ? `/${name}` : `${path}/${name}`;
      try {
        const l = await lstat(full);
        // A symlink is listed as what it points to (a dangling one as the link itself).
        const st = l.isSymbolicLink() ? await stat(full).catch(() => l) : l;
        return entryOf(name, full, st, l.isSymbolicLink());
      } catch {
        return null; // removed while listing
      }
    }),
  );
  const files = entries.filter((e): e is FileEntry => e !== null);
  return { files, path, count: files.length };
}

/**
 * Reads a regular file of at most maxBytes. Text comes back as UTF-8; other content only on request
 * (base64), since JSON cannot carry it faithfully.
 */
export async function readFileForJson(path: string, maxBytes: number, encoding: 'utf8' | 'base64'): Promise<{ content: string; size: number }> {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    throw fsError(err, path);
  }
  try {
    const st = await fh.stat();
    if (st.isDirectory()) throw new ServiceError('NOT_A_FILE', `${path} is a directory, not a file`, { path });
    if (!st.isFile()) throw new ServiceError('NOT_A_FILE', `${path} is not a regular file; use /files/download`, { path });
    if (st.size > maxBytes) {
      throw new ServiceError('FILE_TOO_LARGE', `${path} is ${st.size} bytes, more than /files/read returns (${maxBytes}); use /files/download`, { path, size: st.size, max_size: maxBytes });
    }
    // Files such as those in /proc report size 0 and are read until EOF, within the same cap.
    const buf = Buffer.allocUnsafe(Math.min(maxBytes + 1, Math.max(st.size, 65536)));
    let len = 0;
    for (;;) {
      if (len === buf.length) {
        if (len > maxBytes) {
          throw new ServiceError('FILE_TOO_LARGE', `${path} is larger than /files/read returns (${maxBytes} bytes); use /files/download`, { path, max_size: maxBytes });
        }
        break;
      }
      const { bytesRead } = await fh.read(buf, len, buf.length - len, null);
      if (bytesRead === 0) break;
      len += bytesRead;
    }
    const data = buf.subarray(0, len);
    if (encoding === 'base64') return { content: data.toString('base64'), size: len };
    if (!isUtf8(data) || data.includes(0)) {
      throw new ServiceError('BINARY_FILE', `${path} is not a UTF-8 text file; use /files/download or encoding=base64`, { path });
    }
    return { content: data.toString('utf8'), size: len };
  } catch (err) {
    throw fsError(err, path);
  } finally {
    await fh.close();
  }
}

/** Where to write when the path names an existing symlink: its target, like a shell redirect would. */
async function writeTarget(path: string): Promise<{ target: string; existing: Stats | null }> {
  try {
    const l = await lstat(path);
    if (!l.isSymbolicLink()) return { target: path, existing: l };
    const target = await realpath(path);
    return { target, existing: await stat(target) };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { target: path, existing: null };
    throw err;
  }
}

export function tempNameBeside(target: string): string {
  return join(dirname(target), `.${basename(target).slice(0, 100)}.sbx-${randomBytes(6).toString('hex')}.tmp`);
}

/**
 * Puts a finished temp file in place atomically: parents created, a replaced file keeps its mode
 * and owner unless a mode is given. A failure leaves the old file (or nothing) in place.
 */
export async function commitFile(temp: string, path: string, mode: number | undefined, overwrite: boolean): Promise<void> {
  const { target, existing } = await writeTarget(path);
  if (existing?.isDirectory()) throw new ServiceError('NOT_A_FILE', `${path} is a directory, not a file`, { path });
  if (existing && !overwrite) throw new ServiceError('ALREADY_EXISTS', `${path} already exists`, { path });
  const finalMode = mode ?? (existing ? existing.mode & 0o7777 : 0o644);
  await chmod(temp, finalMode);
  if (existing && (existing.uid !== 0 || existing.gid !== 0)) await chown(temp, existing.uid, existing.gid).catch(() => undefined);
  await rename(temp, target);
}

/** mkdir -p of a file's directory; a file in the way is the caller's mistake, not a conflict. */
export async function ensureParentDir(path: string): Promise<void> {
  try {
    await mkdir(dirname(path), { recursive: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ENOTDIR') {
      throw new ServiceError('NOT_A_DIRECTORY', `A parent of ${path} is not a directory`, { path });
    }
    throw err;
  }
}

/**
 * A file cannot be created in a directory that exists (e.g. /proc, a read-only mount): say so rather
 * than "not found".
 */
export function notWritable(err: NodeJS.ErrnoException, path: string): unknown {
  if (err.code === 'ENOENT' || err.code === 'EACCES' || err.code === 'EPERM' || err.code === 'EROFS') {
    return new ServiceError('PERMISSION_DENIED', `Cannot write ${path}: its directory does not accept new files (${err.code})`, { path });
  }
  return err;
}

export async function writeFileAtomic(path: string, data: Buffer, mode: number | undefined, overwrite: boolean): Promise<void> {
  let temp: string | null = null;
  try {
    await ensureParentDir(path);
    const { target, existing } = await writeTarget(path);
    if (existing?.isDirectory()) throw new ServiceError('NOT_A_FILE', `${path} is a directory, not a file`, { path });
    if (existing && !overwrite) throw new ServiceError('ALREADY_EXISTS', `${path} already exists`, { path });
    temp = tempNameBeside(target);
    await writeFile(temp, data, { flag: 'wx', mode: 0o600 }).catch((err: NodeJS.ErrnoException) => {
      throw notWritable(err, path);
    });
    await commitFile(temp, path, mode, overwrite);
    temp = null;
  } catch (err) {
    throw fsError(err, path);
  } finally {
    if (temp) await unlink(temp).catch(() => undefined);
  }
}

export async function exists(path: string): Promise<{ exists: boolean; path: string; is_dir?: boolean; is_file?: boolean; size?: number }> {
  try {
    const st = await stat(path);
    return { exists: true, path, is_dir: st.isDirectory(), is_file: st.isFile(), size: st.isDirectory() ? 0 : st.size };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return { exists: false, path };
    throw fsError(err, path);
  }
}

export async function remove(path: string): Promise<void> {
  if (path === '/') throw new ServiceError('INVALID_PATH', 'refusing to remove /', { path });
  try {
    await lstat(path);
    await rm(path, { recursive: true, force: false });
  } catch (err) {
    throw fsError(err, path);
  }
}

export async function makeDir(path: string): Promise<void> {
  try {
    await mkdir(path, { recursive: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') {
      throw new ServiceError('ALREADY_EXISTS', `${path} exists and is not a directory`, { path });
    }
    throw fsError(err, path);
  }
}
