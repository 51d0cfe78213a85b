import { readFileSync, statSync } from 'node:fs';
import { posix } from 'node:path';
import { ServiceError } from '../proto.js';

/** A user of the sandbox as /etc/passwd names it: who E2B's `user` option runs and writes as. */
export interface SandboxUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

/** E2B's default user: its images have it, and so do every built-in template's. */
export const DEFAULT_USER = 'user';

const ROOT: SandboxUser = { name: 'root', uid: 0, gid: 0, home: '/root', shell: '/bin/sh' };

interface Table<T> {
  mtimeMs: number;
  size: number;
  rows: T[];
}

/**
 * Users and groups of the sandbox, read from its /etc/passwd and /etc/group and read again when
 * they change (a `useradd` in the sandbox is seen at the next request).
 */
export class SandboxUsers {
  private passwd: Table<SandboxUser> | null = null;
  private group: Table<{ name: string; gid: number }> | null = null;

  constructor(private readonly etc = '/etc') {}

  /**
   * The user a request acts as: the Basic credentials' username E2B's clients send, else the
   * default user when the image has one (root otherwise: an image without `user` still works).
   */
  fromAuthorization(header: string | null | undefined): SandboxUser {
    return this.resolve(usernameOf(header));
  }

  /** `name` (absent or empty: the default user, or root when the image has none). */
  resolve(name: string | null | undefined): SandboxUser {
    if (name === undefined || name === null || name === '') return this.byName(DEFAULT_USER) ?? this.byName('root') ?? ROOT;
    if (name.length > 64 || /[\s:\0/]/.test(name)) throw new ServiceError('VALIDATION_ERROR', 'invalid username', { field: 'username' });
    const u = this.byName(name);
    if (!u) throw new ServiceError('VALIDATION_ERROR', `user ${name} does not exist in this sandbox`, { field: 'username', username: name });
    return u;
  }

  byName(name: string): SandboxUser | undefined {
    if (name === 'root') return this.users().find((u) => u.uid === 0 && u.name === 'root') ?? ROOT;
    return this.users().find((u) => u.name === name);
  }

  userName(uid: number): string {
    return this.users().find((u) => u.uid === uid)?.name ?? String(uid);
  }

  groupName(gid: number): string {
    return this.groups().find((g) => g.gid === gid)?.name ?? String(gid);
  }

  private users(): SandboxUser[] {
    this.passwd = reread(`${this.etc}/passwd`, this.passwd, (line) => {
      const f = line.split(':');
      if (f.length < 7 || !/^\d+$/.test(f[2]!) || !/^\d+$/.test(f[3]!)) return null;
      return { name: f[0]!, uid: Number(f[2]), gid: Number(f[3]), home: f[5] || '/', shell: f[6] || '/bin/sh' };
    });
    return this.passwd.rows;
  }

  private groups(): Array<{ name: string; gid: number }> {
    this.group = reread(`${this.etc}/group`, this.group, (line) => {
      const f = line.split(':');
      if (f.length < 3 || !/^\d+$/.test(f[2]!)) return null;
      return { name: f[0]!, gid: Number(f[2]) };
    });
    return this.group.rows;
  }
}

function reread<T>(path: string, cached: Table<T> | null, parse: (line: string) => T | null): Table<T> {
  let st;
  try {
    st = statSync(path);
  } catch {
    return { mtimeMs: 0, size: -1, rows: [] };
  }
  if (cached && cached.mtimeMs === st.mtimeMs && cached.size === st.size) return cached;
  // /etc/passwd of any size is the sandbox's own business; read at most 4 MiB of it.
  const text = st.size > 4 * 1024 * 1024 ? '' : readFileSync(path, 'utf8');
  const rows: T[] = [];
  for (const line of text.split('\n')) {
    const row = line.startsWith('#') ? null : parse(line.trim());
    if (row) rows.push(row);
  }
  return { mtimeMs: st.mtimeMs, size: st.size, rows };
}

/** The username of `Authorization: Basic base64(user:)`; undefined without one. */
export function usernameOf(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Basic\s+([A-Za-z0-9+/=_-]{0,400})$/i.exec(header.trim());
  if (!m) throw new ServiceError('VALIDATION_ERROR', 'the Authorization header must be Basic credentials naming the user');
  const text = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = text.indexOf(':');
  return colon === -1 ? text : text.slice(0, colon);
}

/**
 * A path of E2B's API made absolute: relative paths (and `~`, `~/...`) are taken from the user's
 * home, as E2B's daemon does. No other confinement: the agent runs inside the sandbox.
 */
export function userPath(input: unknown, user: SandboxUser, field = 'path'): string {
  if (typeof input !== 'string') throw new ServiceError('VALIDATION_ERROR', `${field} is required`, { field });
  if (input.includes('\0')) throw new ServiceError('INVALID_PATH', `${field} contains a NUL byte`, { field });
  if (Buffer.byteLength(input) > 4096) throw new ServiceError('INVALID_PATH', `${field} is longer than 4096 bytes`, { field });
  let p = input;
  if (p === '~' || p.startsWith('~/')) p = user.home + p.slice(1);
  const abs = p.startsWith('/') ? p : posix.join(user.home, p);
  const normalized = posix.normalize(abs);
  return normalized.length > 1 && normalized.endsWith('/') ? normalized.slice(0, -1) : normalized;
}
