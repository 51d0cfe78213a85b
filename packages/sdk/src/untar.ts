import { createWriteStream } from 'node:fs';
import { chmod, lstat, mkdir, symlink, utimes } from 'node:fs/promises';
import { dirname, isAbsolute, join, normalize, relative, sep } from 'node:path';
import { once } from 'node:events';

/**
 * Extracts a tar stream (ustar, pax and GNU long names: what GNU tar, busybox and our own writer
 * make) into `dest`, refusing anything that would land outside it: absolute names, `..`, and paths
 * through a symlink the archive itself made. Regular files, directories and symlinks are extracted;
 * hard links, devices and fifos are skipped. The archive comes from a sandbox, so it is untrusted.
 */
export async function extractTar(source: AsyncIterable<Uint8Array>, dest: string): Promise<{ files: number; bytes: number }> {
  const reader = new BlockReader(source);
  let longName: string | undefined;
  let longLink: string | undefined;
  let pax: Record<string, string> = {};
  let files = 0;
  let bytes = 0;
  const dirTimes: Array<{ path: string; mtime: number }> = [];
  await mkdir(dest, { recursive: true });

  for (;;) {
    const h = await reader.read(512);
    if (!h) throw new Error('the archive ended without its end marker');
    if (h.every((b) => b === 0)) break;
    verifyChecksum(h);
    const type = String.fromCharCode(h[156]!) || '0';
    const size = parseNumber(h.subarray(124, 136));
    const mode = parseNumber(h.subarray(100, 108));
    const mtime = parseNumber(h.subarray(136, 148));
    const magic = h.subarray(257, 263).toString('latin1');
    const prefix = magic.startsWith('ustar') ? cstr(h.subarray(345, 500)) : '';
    let name = pax.path ?? longName ?? (prefix ? `${prefix}/${cstr(h.subarray(0, 100))}` : cstr(h.subarray(0, 100)));
    const linkname = pax.linkpath ?? longLink ?? cstr(h.subarray(157, 257));

    if (type === 'x' || type === 'L' || type === 'K' || type === 'g') {
      const data = (await reader.readPadded(size)).toString('utf8');
      if (type === 'x') pax = parsePax(data);
      else if (type === 'L') longName = data.replace(/\0+$/, '');
      else if (type === 'K') longLink = data.replace(/\0+$/, '');
      continue;
    }
    pax = {};
    longName = undefined;
    longLink = undefined;

    name = name.replace(/^(\.\/)+/, '');
    if (name === '' || name === '.' || name === './') {
      await reader.skipPadded(size);
      continue;
    }
    const target = await safeTarget(dest, name);
    if (type === '5') {
      await mkdir(target, { recursive: true });
      await chmod(target, (mode & 0o7777) | 0o700);
      dirTimes.push({ path: target, mtime });
    } else if (type === '0' || type === '7' || type === '\0') {
      await mkdir(dirname(target), { recursive: true });
      const out = createWriteStream(target, { mode: mode & 0o777 });
      let failure: Error | undefined;
      out.on('error', (err) => (failure ??= err));
      // 'error' is recorded above; the close that follows it ends the wait either way.
      const closed = once(out, 'close').catch(() => undefined);
      try {
        let left = size;
        while (left > 0 && !failure) {
          const chunk = await reader.readSome(left);
          if (!chunk) throw new Error(`the archive ended inside ${name}`);
          left -= chunk.length;
          if (!out.write(chunk) && !failure) await Promise.race([once(out, 'drain'), closed]);
        }
      } finally {
        out.end();
        await closed;
      }
      if (failure) throw failure;
      await reader.skip((512 - (size % 512)) % 512);
      await chmod(target, mode & 0o7777);
      await utimes(target, mtime, mtime);
      files++;
      bytes += size;
    } else if (type === '2') {
      await mkdir(dirname(target), { recursive: true });
      await symlink(linkname, target);
    } else {
      await reader.skipPadded(size);
    }
  }
  // Directory times last: extracting into a directory changes its mtime.
  for (const d of dirTimes.reverse()) await utimes(d.path, d.mtime, d.mtime).catch(() => undefined);
  return { files, bytes };
}

/** `name` inside `dest`, checked: no absolute path, no `..`, no existing symlink on the way. */
async function safeTarget(dest: string, name: string): Promise<string> {
  const clean = normalize(name.replace(/\/+$/, ''));
  if (isAbsolute(name) || clean === '..' || clean.startsWith(`..${sep}`)) throw new Error(`the archive holds a path outside the destination: ${name}`);
  const target = join(dest, clean);
  const rel = relative(dest, target);
  if (rel.startsWith('..') || isAbsolute(rel)) throw new Error(`the archive holds a path outside the destination: ${name}`);
  // Every existing parent must be a real directory (a symlink made by an earlier entry could point anywhere).
  const parts = rel.split(sep);
  let at = dest;
  for (const p of parts.slice(0, -1)) {
    at = join(at, p);
    const st = await lstat(at).catch(() => null);
    if (!st) break;
    if (!st.isDirectory()) throw new Error(`the archive writes through ${relative(dest, at)}, which is not a directory`);
  }
  const existing = await lstat(target).catch(() => null);
  if (existing?.isSymbolicLink()) throw new Error(`the archive overwrites the symlink ${rel}`);
  return target;
}

function cstr(b: Buffer): string {
  const end = b.indexOf(0);
  return b.subarray(0, end === -1 ? b.length : end).toString('utf8');
}

function parseNumber(b: Buffer): number {
  // GNU base-256 for big values: high bit of the first byte set.
  if (b[0]! & 0x80) {
    let n = b[0]! & 0x7f;
    for (let i = 1; i < b.length; i++) n = n * 256 + b[i]!;
    return n;
  }
  const s = cstr(b).trim();
  return s ? parseInt(s, 8) : 0;
}

function verifyChecksum(h: Buffer): void {
  const stored = parseNumber(h.subarray(148, 156));
  let sum = 0;
  for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 32 : h[i]!;
  if (sum !== stored) throw new Error('the archive is corrupt (bad header checksum)');
}

function parsePax(data: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of data.split('\n')) {
    const m = /^\d+ ([^=]+)=(.*)$/s.exec(line);
    if (m) out[m[1]!] = m[2]!;
  }
  return out;
}

/** Reads exact byte counts from a chunked stream. */
class BlockReader {
  private buf: Buffer = Buffer.alloc(0);
  private readonly it: AsyncIterator<Uint8Array>;
  private done = false;

  constructor(source: AsyncIterable<Uint8Array>) {
    this.it = source[Symbol.asyncIterator]();
  }

  private async fill(): Promise<boolean> {
    if (this.done) return false;
    const r = await this.it.next();
    if (r.done) {
      this.done = true;
      return false;
    }
    const chunk = Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength);
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    return true;
  }

  /** Exactly n bytes, or null at the end of the stream. */
  async read(n: number): Promise<Buffer | null> {
    while (this.buf.length < n) if (!(await this.fill())) return null;
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** Up to n bytes (at least one), or null at the end of the stream. */
  async readSome(n: number): Promise<Buffer | null> {
    if (this.buf.length === 0 && !(await this.fill())) return null;
    const out = this.buf.subarray(0, Math.min(n, this.buf.length));
    this.buf = this.buf.subarray(out.length);
    return out;
  }

  async readPadded(size: number): Promise<Buffer> {
    const data = size > 0 ? await this.read(size) : Buffer.alloc(0);
    if (!data) throw new Error('the archive ended inside a header');
    const copy = Buffer.from(data);
    await this.skip((512 - (size % 512)) % 512);
    return copy;
  }

  async skipPadded(size: number): Promise<void> {
    await this.skip(size + ((512 - (size % 512)) % 512));
  }

  async skip(n: number): Promise<void> {
    while (n > 0) {
      const c = await this.readSome(n);
      if (!c) throw new Error('the archive ended early');
      n -= c.length;
    }
  }
}
