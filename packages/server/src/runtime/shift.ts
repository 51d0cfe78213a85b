import { chmodSync, lchownSync, lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

export interface ShiftResult {
  /** Entries whose ownership was changed (the root included). */
  entries: number;
  /** Names walked (the root included): a second link to an inode counts here, not in `entries`. */
  names: number;
  /** Sum of the sizes of regular files (each inode once). */
  bytes: number;
  /** Bytes the filesystem allocated to every entry (each inode once): what the tree costs on disk. */
  allocated: number;
}

const S_IFMT = 0o170000;
const S_IFDIR = 0o040000;
const S_IFLNK = 0o120000;
const S_IFREG = 0o100000;

/**
 * Adds `offset` to the uid and gid of every entry under `dir` (dir included), without following
 * symlinks or crossing into other filesystems. Synchronous calls on purpose: for ~10k entries they
 * are several times faster than promise-per-file, and the caller holds no event-loop-sensitive work.
 *
 * chown clears setuid/setgid on executables, so those bits are put back. It also drops
 * `security.capability` xattrs; Node has no xattr API, and v2 file capabilities are ignored inside a
 * user namespace anyway, so they are not restored (root inside the sandbox holds the capabilities).
 * Hard-linked inodes are shifted once. With `idLimit`, an original uid/gid at or above it throws
 * (an image whose ids do not fit the sandbox's id range cannot be mapped faithfully).
 */
export function shiftOwnership(dir: string, offset: number, opts: { idLimit?: number } = {}): ShiftResult {
  return rewriteOwnership(dir, (id, path) => {
    if (opts.idLimit !== undefined && id >= opts.idLimit) {
      throw new Error(`shiftOwnership: ${path} is owned by id ${id}, outside 0-${opts.idLimit - 1}`);
    }
    const out = id + offset;
    if (out < 0) throw new Error(`shiftOwnership: ${path} would get id ${out}`);
    return out;
  });
}

/**
 * Moves ids in `from`..`from + count - 1` to `to`..`to + count - 1` under `dir`; other ids stay.
 * For a sandbox disk made when sandboxes still ran as the legacy shared range.
 */
export function moveIdRange(dir: string, from: number, to: number, count: number): ShiftResult {
  return rewriteOwnership(dir, (id) => (id >= from && id < from + count ? id - from + to : id));
}

/**
 * Moves ids in `from`..`from + count - 1` to `to`..`to + count - 1` under `dir`, and every other id
 * to `to + count - 2` (nobody inside): a sandbox's files becoming a layer (a snapshot), where no id
 * outside the range may survive (the range is all a sandbox's processes can write as).
 */
export function mapIdRange(dir: string, from: number, to: number, count: number, opts: { maxEntries?: number } = {}): ShiftResult {
  return rewriteOwnership(dir, (id) => (id >= from && id < from + count ? id - from + to : to + count - 2), opts.maxEntries);
}

/** Thrown when a tree has more entries than its walk may visit. */
export class TooManyEntries extends Error {
  constructor(readonly max: number) {
    super(`more than ${max} entries`);
  }
}

/** One worker kept between walks (starting one costs ~35 ms, more than a small walk). */
const idleWorkers: Worker[] = [];
let nextWalk = 1;

/**
 * mapIdRange in a worker thread: a tenant's tree may hold millions of entries (hard links cost no
 * inode), and the walk is synchronous; on the daemon's own thread it would stall every request of
 * every organization. Rejects with TooManyEntries past `maxEntries`, and ends the walk (its worker
 * terminated) when `timeoutMs` passes. Walks at once run in workers of their own; one idle worker
 * is kept for the next.
 */
export function mapIdRangeOffThread(dir: string, from: number, to: number, count: number, opts: { maxEntries: number; timeoutMs: number }): Promise<ShiftResult> {
  const worker = idleWorkers.pop() ?? new Worker(new URL('./shift-worker.js', import.meta.url));
  worker.ref();
  const id = nextWalk++;
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (keep: boolean, fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
      if (keep && idleWorkers.length === 0) {
        worker.unref();
        idleWorkers.push(worker);
      } else {
        void worker.terminate();
      }
      fn();
    };
    const onMessage = (m: { id: number; ok: true; result: ShiftResult } | { id: number; ok: false; error: string; tooMany?: number }) => {
      if (m.id !== id) return;
      finish(true, () => (m.ok ? resolve(m.result) : reject(m.tooMany !== undefined ? new TooManyEntries(m.tooMany) : new Error(m.error))));
    };
    const onError = (err: Error) => finish(false, () => reject(err));
    const onExit = (code: number) => finish(false, () => reject(new Error(`the ownership worker exited with ${code}`)));
    const timer = setTimeout(() => finish(false, () => reject(new Error(`rewriting the owners of ${dir} took longer than ${opts.timeoutMs} ms`))), opts.timeoutMs);
    worker.on('message', onMessage);
    worker.once('error', onError);
    worker.once('exit', onExit);
    worker.postMessage({ id, dir, from, to, count, maxEntries: opts.maxEntries });
  });
}

/** Sets uid and gid of every entry under `dir` (dir included) to `map(old)`, as described above. */
function rewriteOwnership(dir: string, map: (id: number, path: string) => number, maxEntries = Infinity): ShiftResult {
  const root = lstatSync(dir);
  const seen = new Set<number>();
  const result: ShiftResult = { entries: 0, names: 0, bytes: 0, allocated: 0 };
  const stack: string[] = [];
  // Every name counts against maxEntries, a second link to an inode too (links cost no inode).
  let names = 0;

  const visit = (path: string, isRoot: boolean): void => {
    if (++names > maxEntries) throw new TooManyEntries(maxEntries);
    result.names = names;
    const st = isRoot ? root : lstatSync(path);
    const type = st.mode & S_IFMT;
    if (st.nlink > 1 && type !== S_IFDIR) {
      if (seen.has(st.ino)) return;
      seen.add(st.ino);
    }
    const uid = map(st.uid, path);
    const gid = map(st.gid, path);
    if (uid !== st.uid || gid !== st.gid) {
      lchownSync(path, uid, gid);
      if (type !== S_IFLNK && (st.mode & 0o6000) !== 0) chmodSync(path, st.mode & 0o7777);
    }
    result.entries++;
    result.allocated += st.blocks * 512;
    if (type === S_IFREG) result.bytes += st.size;
    if (type === S_IFDIR && st.dev === root.dev) stack.push(path);
  };

  visit(dir, true);
  while (stack.length > 0) {
    const d = stack.pop()!;
    for (const name of readdirSync(d)) visit(join(d, name), false);
  }
  return result;
}
