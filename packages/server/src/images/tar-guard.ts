import { createHash } from 'node:crypto';
import { posix } from 'node:path';
import { CANONICAL_ID_OFFSET, ID_RANGE, LEGACY_ID_OFFSET } from '../runtime/ids.js';

/**
 * A layer archive from the network is read here before GNU tar sees a byte of it: every header is
 * checked, and only what passes is forwarded to `tar -x`. The accepted format is exactly what
 * layer-tar.ts writes (POSIX pax, names sorted, parents before children), nothing more, so that
 * there is no reading of the archive on which this check and tar could disagree:
 * - one root directory first, then entries whose parent is a directory of the archive seen earlier,
 *   each name once: nothing can be written through a symlink or replace what was checked;
 * - no absolute names, no `.` or `..` components, no empty ones;
 * - regular files, directories, symlinks, fifos, hard links to regular files of the archive, and
 *   character devices only as overlay whiteouts (0:0) or the harmless ones of a rootfs's /dev;
 * - owners inside the layer id range of the root entry (canonical, or the legacy offset);
 * - pax records from a short list, extended attributes from a shorter one;
 * - checksums right, sizes octal (no base-256), the end marker present and only zeros after it.
 */

export class TarRefused extends Error {}

export interface TarGuardLimits {
  /** Most bytes of the archive. */
  maxBytes: number;
  /** Most entries (inodes are a resource too). */
  maxEntries?: number;
  /** Most bytes of regular files, all together (a tar's length also counts its headers). */
  maxFileBytes?: number;
  /** Owners in the canonical id range only (a layer made now: a snapshot's), not the legacy one too. */
  canonicalOnly?: boolean;
}

const BLOCK = 512;
const MAX_PAX_BYTES = 1024 * 1024;
const MAX_PATH = 4096;
const DEFAULT_MAX_ENTRIES = 4_000_000;
/** Character devices a layer may carry: overlay whiteouts, and what mmdebstrap puts in /dev. */
const SAFE_DEVICES = new Set(['0:0', '1:3', '1:5', '1:7', '1:8', '1:9', '5:0', '5:1', '5:2']);
const PAX_KEYS = new Set(['path', 'linkpath', 'size', 'uid', 'gid', 'uname', 'gname', 'mtime', 'atime', 'ctime']);
const XATTR_PREFIX = 'SCHILY.xattr.';

type Kind = 'file' | 'dir' | 'symlink' | 'hardlink' | 'char' | 'fifo';
const TYPES: Record<string, Kind> = { '0': 'file', '\0': 'file', '1': 'hardlink', '2': 'symlink', '3': 'char', '5': 'dir', '6': 'fifo' };

type State = 'header' | 'pax' | 'data' | 'end';

export class TarGuard {
  /** Entries accepted so far. */
  entries = 0;
  /** Bytes of regular files. */
  fileBytes = 0;
  /** Bytes of the archive read. */
  bytes = 0;
  private state: State = 'header';
  private pending = Buffer.alloc(0);
  /** Bytes left of the current entry's data (padded to blocks), or of the pax data. */
  private left = 0;
  private paxChunks: Buffer[] = [];
  private paxSize = 0;
  private pax: Map<string, Buffer> | undefined;
  private zeroBlocks = 0;
  /** Every name of the archive so far, by nameKey. */
  private readonly kinds = new Map<string, Kind>();
  private idOffset: number | undefined;
  private readonly maxEntries: number;

  constructor(private readonly limits: TarGuardLimits) {
    this.maxEntries = limits.maxEntries ?? DEFAULT_MAX_ENTRIES;
  }

  /** Checks the next bytes of the archive; returns what may go on to tar (throws TarRefused). */
  push(chunk: Buffer): Buffer[] {
    this.bytes += chunk.length;
    if (this.bytes > this.limits.maxBytes) throw new TarRefused(`the archive is larger than ${this.limits.maxBytes} bytes`);
    const out: Buffer[] = [];
    const buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    let pos = 0;
    while (pos < buf.length) {
      if (this.state === 'data') {
        const n = Math.min(this.left, buf.length - pos);
        out.push(buf.subarray(pos, pos + n));
        pos += n;
        this.left -= n;
        if (this.left === 0) this.state = 'header';
        continue;
      }
      if (buf.length - pos < BLOCK) break;
      const block = buf.subarray(pos, pos + BLOCK);
      pos += BLOCK;
      if (this.state === 'pax') {
        this.paxChunks.push(Buffer.from(block));
        this.left -= BLOCK;
        out.push(block);
        if (this.left === 0) {
          this.pax = parsePax(Buffer.concat(this.paxChunks).subarray(0, this.paxSize));
          this.paxChunks = [];
          this.state = 'header';
        }
      } else if (this.state === 'end') {
        if (!isZero(block)) throw new TarRefused('data after the end of the archive');
        if (this.zeroBlocks++ < 2) out.push(block);
      } else if (isZero(block)) {
        if (this.pax) throw new TarRefused('a pax header with no entry');
        if (this.entries === 0) throw new TarRefused('an empty archive');
        this.state = 'end';
        this.zeroBlocks = 1;
        out.push(block);
      } else {
        this.header(block);
        out.push(block);
      }
    }
    this.pending = pos < buf.length ? Buffer.from(buf.subarray(pos)) : Buffer.alloc(0);
    return out;
  }

  /** The end marker was read (what follows is padding). */
  get ended(): boolean {
    return this.state === 'end';
  }

  /** The archive ended: throws unless it ended where an archive ends. */
  finish(): void {
    if (this.state !== 'end' || this.zeroBlocks < 2 || this.pending.length > 0) throw new TarRefused('the archive is cut short');
  }

  private header(h: Buffer): void {
    checkChecksum(h);
    if (h.toString('latin1', 257, 263) !== 'ustar\0' || h.toString('latin1', 263, 265) !== '00') throw new TarRefused('not a POSIX (pax) tar header');
    const flag = String.fromCharCode(h[156]!);
    const rawSize = octal(h, 124, 12, 'size');
    if (flag === 'x') {
      if (this.pax) throw new TarRefused('two pax headers in a row');
      if (rawSize > MAX_PAX_BYTES) throw new TarRefused('a pax header too large');
      this.paxSize = rawSize;
      this.left = padded(rawSize);
      if (this.left === 0) this.pax = new Map();
      else this.state = 'pax';
      return;
    }
    const kind = TYPES[flag];
    if (!kind) throw new TarRefused(`entry type ${JSON.stringify(flag)} is not allowed in a layer`);
    const pax = this.pax ?? new Map<string, Buffer>();
    this.pax = undefined;
    if (++this.entries > this.maxEntries) throw new TarRefused(`more than ${this.maxEntries} entries`);

    const rawName = pax.has('path') ? text(pax.get('path')!, 'path') : ustarName(h);
    if (kind === 'file' && rawName.endsWith('/')) throw new TarRefused(`a regular file named like a directory: ${rawName}`);
    const name = normalize(rawName);
    if (this.kinds.has(nameKey(name))) throw new TarRefused(`${show(name)} appears twice`);
    if (this.entries === 1) {
      if (name !== '' || kind !== 'dir') throw new TarRefused('the archive must begin with its root directory');
    } else {
      if (name === '') throw new TarRefused('the root directory appears twice');
      const parent = posix.dirname(name) === '.' ? '' : posix.dirname(name);
      if (this.kinds.get(nameKey(parent)) !== 'dir') throw new TarRefused(`${show(name)}: its parent is not a directory the archive made before it`);
    }

    const size = pax.has('size') ? decimal(pax.get('size')!, 'size') : rawSize;
    if (kind !== 'file' && size !== 0) throw new TarRefused(`${show(name)}: a ${kind} with data`);
    const mode = octal(h, 100, 8, 'mode');
    if (mode > 0o7777) throw new TarRefused(`${show(name)}: mode ${mode.toString(8)}`);
    const uid = pax.has('uid') ? decimal(pax.get('uid')!, 'uid') : octal(h, 108, 8, 'uid');
    const gid = pax.has('gid') ? decimal(pax.get('gid')!, 'gid') : octal(h, 116, 8, 'gid');
    this.checkOwner(name, uid, gid);

    const link = pax.has('linkpath') ? text(pax.get('linkpath')!, 'linkpath') : cstr(h, 157, 100);
    if (kind === 'symlink') {
      if (link === '' || link.length > MAX_PATH) throw new TarRefused(`${show(name)}: a symlink with no target or one too long`);
    } else if (kind === 'hardlink') {
      const target = normalize(link);
      if (this.kinds.get(nameKey(target)) !== 'file') throw new TarRefused(`${show(name)}: a hard link to ${show(target)}, which is not a regular file of the archive`);
    } else if (link !== '') {
      throw new TarRefused(`${show(name)}: a link target on a ${kind}`);
    }
    if (kind === 'char') {
      const dev = `${octal(h, 329, 8, 'devmajor')}:${octal(h, 337, 8, 'devminor')}`;
      if (!SAFE_DEVICES.has(dev)) throw new TarRefused(`${show(name)}: device ${dev} is not allowed in a layer`);
    }
    for (const [key, value] of pax) {
      if (PAX_KEYS.has(key)) continue;
      if (!key.startsWith(XATTR_PREFIX)) throw new TarRefused(`pax record ${key} is not allowed in a layer`);
      checkXattr(name, kind, key.slice(XATTR_PREFIX.length), value);
    }
    for (const key of ['mtime', 'atime', 'ctime']) {
      if (pax.has(key) && !/^-?\d{1,20}(\.\d{1,9})?$/.test(text(pax.get(key)!, key))) throw new TarRefused(`pax ${key} is not a time`);
    }

    this.kinds.set(nameKey(name), kind);
    if (kind === 'file') {
      if (this.limits.maxFileBytes !== undefined && this.fileBytes + size > this.limits.maxFileBytes) throw new TarRefused(`${show(name)}: the layer's files hold more than ${this.limits.maxFileBytes} bytes`);
      this.fileBytes += size;
      this.left = padded(size);
      if (this.left > 0) this.state = 'data';
    }
  }

  private checkOwner(name: string, uid: number, gid: number): void {
    if (this.idOffset === undefined) {
      this.idOffset = (this.limits.canonicalOnly ? [CANONICAL_ID_OFFSET] : [CANONICAL_ID_OFFSET, LEGACY_ID_OFFSET]).find((o) => uid >= o && uid < o + ID_RANGE && gid >= o && gid < o + ID_RANGE);
      if (this.idOffset === undefined) throw new TarRefused(`the root directory is owned by ${uid}:${gid}, not by a layer id range`);
    }
    const o = this.idOffset;
    if (!(uid >= o && uid < o + ID_RANGE && gid >= o && gid < o + ID_RANGE)) throw new TarRefused(`${show(name)}: owner ${uid}:${gid} is outside the layer's id range`);
  }
}

function checkXattr(name: string, kind: Kind, attr: string, value: Buffer): void {
  if (value.length > 64 * 1024) throw new TarRefused(`${show(name)}: extended attribute ${attr} too large`);
  if (attr.startsWith('user.') && attr.length <= 255) return;
  if (attr === 'security.capability') return;
  if (attr === 'trusted.overlay.opaque' && kind === 'dir' && value.toString('latin1') === 'y') return;
  throw new TarRefused(`${show(name)}: extended attribute ${attr} is not allowed in a layer`);
}

/**
 * What the guard keeps of a name: short ones as they are, long ones as a NUL (never in a name) and
 * 16 bytes of their sha256. Millions of names of up to 4096 bytes (a hostile sender's) would
 * otherwise be gigabytes held for the whole archive.
 */
function nameKey(name: string): string {
  return name.length <= 48 ? name : `\0${createHash('sha256').update(name).digest().toString('latin1', 0, 16)}`;
}

function show(name: string): string {
  return JSON.stringify(name === '' ? '.' : name.slice(0, 200));
}

function padded(n: number): number {
  return Math.ceil(n / BLOCK) * BLOCK;
}

function isZero(b: Buffer): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] !== 0) return false;
  return true;
}

function checkChecksum(h: Buffer): void {
  const want = octal(h, 148, 8, 'checksum');
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i]!;
  if (sum !== want) throw new TarRefused('a tar header with a wrong checksum');
}

/** A NUL-terminated field. */
function cstr(h: Buffer, off: number, len: number): string {
  const f = h.subarray(off, off + len);
  const end = f.indexOf(0);
  return f.toString('utf8', 0, end < 0 ? len : end);
}

function ustarName(h: Buffer): string {
  const name = cstr(h, 0, 100);
  const prefix = cstr(h, 345, 155);
  return prefix ? `${prefix}/${name}` : name;
}

/** An octal number field; base-256 and anything but digits, spaces and NULs are refused. */
function octal(h: Buffer, off: number, len: number, what: string): number {
  const s = h.toString('latin1', off, off + len).replace(/[\0 ]+$/, '').replace(/^ +/, '');
  if (!/^[0-7]{0,12}$/.test(s)) throw new TarRefused(`tar header field ${what} is not an octal number`);
  return s === '' ? 0 : parseInt(s, 8);
}

function text(v: Buffer, what: string): string {
  const s = v.toString('utf8');
  if (s.includes('\0') || !Buffer.from(s, 'utf8').equals(v)) throw new TarRefused(`pax ${what} is not text`);
  return s;
}

function decimal(v: Buffer, what: string): number {
  const s = text(v, what);
  if (!/^\d{1,15}$/.test(s)) throw new TarRefused(`pax ${what} is not a number`);
  return Number(s);
}

/** `./a/b/` → `a/b`; the root is ''. Refuses absolute names and `.`, `..` or empty components. */
function normalize(raw: string): string {
  if (raw.length > MAX_PATH || raw.includes('\0')) throw new TarRefused('a name too long or with a NUL');
  let n = raw;
  if (n === '.' || n === './') return '';
  if (n.startsWith('./')) n = n.slice(2);
  if (n.endsWith('/')) n = n.slice(0, -1);
  if (n === '' || n.startsWith('/')) throw new TarRefused(`name ${JSON.stringify(raw.slice(0, 200))} is not inside the layer`);
  for (const part of n.split('/')) {
    if (part === '' || part === '.' || part === '..' || Buffer.byteLength(part) > 255) throw new TarRefused(`name ${JSON.stringify(raw.slice(0, 200))} is not a plain relative name`);
  }
  return n;
}

/** pax records: `<len> <key>=<value>\n`, len counting the whole record. */
function parsePax(data: Buffer): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  let pos = 0;
  while (pos < data.length) {
    const sp = data.indexOf(0x20, pos);
    const lenText = sp > pos && sp - pos <= 8 ? data.toString('latin1', pos, sp) : '';
    if (!/^[1-9]\d*$/.test(lenText)) throw new TarRefused('a malformed pax record');
    const len = Number(lenText);
    const end = pos + len;
    if (end > data.length || data[end - 1] !== 0x0a) throw new TarRefused('a malformed pax record');
    const eq = data.indexOf(0x3d, sp + 1);
    if (eq < 0 || eq >= end - 1) throw new TarRefused('a malformed pax record');
    const key = data.toString('utf8', sp + 1, eq);
    if (!/^[A-Za-z0-9._-]{1,300}$/.test(key) || out.has(key)) throw new TarRefused(`pax record ${JSON.stringify(key.slice(0, 80))} malformed or repeated`);
    out.set(key, Buffer.from(data.subarray(eq + 1, end - 1)));
    pos = end;
  }
  return out;
}
