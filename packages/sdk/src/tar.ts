import { createReadStream } from 'node:fs';
import { lstat, readdir, readlink } from 'node:fs/promises';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import { ValidationError } from './errors.js';

/**
 * A minimal, deterministic POSIX (ustar + pax) tar writer for template build contexts: regular files,
 * directories and symlinks, entries sorted, owner 0:0, real modes and mtimes. Long names use pax
 * headers. Enough to send a build context without a dependency.
 */

const BLOCK = 512;
const enc = new TextEncoder();

interface EntryMeta {
  name: string;
  type: '0' | '2' | '5' | 'x';
  mode: number;
  size: number;
  mtime: number;
  linkname?: string;
}

function octal(value: number, width: number): string {
  return value.toString(8).padStart(width - 1, '0') + '\0';
}

function writeStr(buf: Buffer, offset: number, width: number, s: string): void {
  buf.write(s, offset, Math.min(width, Buffer.byteLength(s)), 'utf8');
}

/** Splits a long path into ustar prefix/name, or undefined if it cannot fit. */
function splitName(name: string): { prefix: string; name: string } | undefined {
  if (Buffer.byteLength(name) <= 100) return { prefix: '', name };
  for (let i = name.indexOf('/'); i !== -1; i = name.indexOf('/', i + 1)) {
    const prefix = name.slice(0, i);
    const rest = name.slice(i + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(rest) <= 100 && rest) return { prefix, name: rest };
  }
  return undefined;
}

function header(meta: EntryMeta, names: { prefix: string; name: string }, linkname: string): Buffer {
  const h = Buffer.alloc(BLOCK);
  writeStr(h, 0, 100, names.name);
  writeStr(h, 100, 8, octal(meta.mode & 0o7777, 8));
  writeStr(h, 108, 8, octal(0, 8));
  writeStr(h, 116, 8, octal(0, 8));
  writeStr(h, 124, 12, octal(meta.size, 12));
  writeStr(h, 136, 12, octal(Math.max(0, Math.floor(meta.mtime)), 12));
  h.fill(' ', 148, 156);
  writeStr(h, 156, 1, meta.type);
  writeStr(h, 157, 100, linkname);
  writeStr(h, 257, 6, 'ustar\0');
  writeStr(h, 263, 2, '00');
  writeStr(h, 265, 32, 'root');
  writeStr(h, 297, 32, 'root');
  writeStr(h, 345, 155, names.prefix);
  let sum = 0;
  for (const b of h) sum += b;
  writeStr(h, 148, 8, sum.toString(8).padStart(6, '0') + '\0 ');
  return h;
}

/** A pax record "LEN key=value\n", where LEN counts the whole record. */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
  return `${len}${body}`;
}

function padding(size: number): Uint8Array {
  const rest = size % BLOCK;
  return rest === 0 ? new Uint8Array(0) : new Uint8Array(BLOCK - rest);
}

function* headers(meta: EntryMeta): Generator<Uint8Array> {
  const names = splitName(meta.name);
  const link = meta.linkname ?? '';
  const linkFits = Buffer.byteLength(link) <= 100;
  if (!names || !linkFits) {
    let pax = '';
    if (!names) pax += paxRecord('path', meta.name);
    if (!linkFits) pax += paxRecord('linkpath', link);
    const data = enc.encode(pax);
    yield header({ name: 'pax', type: 'x', mode: 0o644, size: data.byteLength, mtime: meta.mtime }, { prefix: '', name: 'PaxHeader' }, '');
    yield data;
    yield padding(data.byteLength);
  }
  yield header(meta, names ?? { prefix: '', name: meta.name.slice(0, 100) }, linkFits ? link : link.slice(0, 100));
}

function toPosix(p: string): string {
  return p.split(sep).join('/');
}

/** A copy source as a path inside the context directory; refuses paths that leave it. */
export function contextPath(src: string, contextDir: string): string {
  const abs = isAbsolute(src) ? src : resolve(contextDir, src);
  const rel = relative(resolve(contextDir), abs);
  if (rel.startsWith('..') || isAbsolute(rel)) throw new ValidationError(`copy source ${src} is outside the context directory ${contextDir}`, { code: 'VALIDATION_ERROR' });
  return rel === '' ? '.' : toPosix(rel);
}

/** The tar stream of `sources` (paths relative to `root`), each directory with all it holds. */
export async function* tarStream(root: string, sources: string[]): AsyncGenerator<Uint8Array, void, undefined> {
  const done = new Set<string>();
  async function* entry(rel: string): AsyncGenerator<Uint8Array, void, undefined> {
    if (done.has(rel)) return;
    done.add(rel);
    const abs = rel === '.' ? root : join(root, rel);
    const st = await lstat(abs);
    const mtime = Math.floor(st.mtimeMs / 1000);
    if (st.isDirectory()) {
      if (rel !== '.') yield* headers({ name: rel + '/', type: '5', mode: st.mode, size: 0, mtime });
      const names = (await readdir(abs)).sort();
      for (const n of names) yield* entry(rel === '.' ? n : `${rel}/${n}`);
    } else if (st.isSymbolicLink()) {
      yield* headers({ name: rel, type: '2', mode: st.mode, size: 0, mtime, linkname: await readlink(abs) });
    } else if (st.isFile()) {
      yield* headers({ name: rel, type: '0', mode: st.mode, size: st.size, mtime });
      let n = 0;
      for await (const chunk of createReadStream(abs)) {
        n += (chunk as Buffer).byteLength;
        if (n > st.size) throw new Error(`${abs} grew while it was being read`);
        yield chunk as Buffer;
      }
      if (n !== st.size) throw new Error(`${abs} changed size while it was being read`);
      yield padding(st.size);
    }
    // Sockets, devices and fifos have no place in an image build context: skipped.
  }
  for (const s of [...sources].sort()) {
    // Parent directories first, so that extraction recreates them with their modes.
    const parts = s === '.' ? [] : s.split('/');
    for (let i = 1; i < parts.length; i++) {
      const dir = parts.slice(0, i).join('/');
      if (done.has(dir)) continue;
      done.add(dir);
      const st = await lstat(join(root, dir));
      yield* headers({ name: dir + '/', type: '5', mode: st.mode, size: 0, mtime: Math.floor(st.mtimeMs / 1000) });
    }
    yield* entry(s);
  }
  yield new Uint8Array(BLOCK * 2);
}
