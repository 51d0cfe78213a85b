import { ServiceError } from '@sandboxd/protocol';
import type { DiskSpace } from '../runtime/disk-space.js';

/** What the operator keeps free on the data filesystem: a size, or a share of the filesystem. */
export interface DiskReserve {
  /** A fixed size (SANDBOXD_DISK_RESERVE_GB); when set, the percent is not used. */
  bytes?: number;
  /** A share of the filesystem's size (SANDBOXD_DISK_RESERVE_PERCENT). */
  percent: number;
}

/** How long a reading serves the admissions after it (what is released meanwhile is added to it). */
export const DISK_READING_MS = 1000;
/**
 * Past DISK_READING_MS, an older reading still serves while a new one is read (an admission does not
 * wait for statfs and the stats): it is conservative, since whatever was admitted since counts in
 * full, and what was freed is not yet seen. Past this, admissions wait for the new one.
 */
export const DISK_READING_STALE_MS = 10_000;

interface Reading {
  at: number;
  space: DiskSpace;
  /** releasedTotal when the reading began: what was given back since is not in it. */
  base: number;
}

export const GIB = 1024 ** 3;

/**
 * Holds `bytes` of room for `what`, or refuses (507); the function returned gives it back, with
 * `kept: false` when the write failed and left nothing (the room is free at once).
 */
export type DiskClaim = (bytes: number, what: string) => Promise<(kept?: boolean) => void>;

export interface DiskRoomOptions {
  /** A label for messages ("the data filesystem"). */
  name: string;
  reserve: DiskReserve;
  /** statfs and the disks that may still grow (runtime/disk-space.ts). */
  read: () => Promise<DiskSpace>;
  now?: () => number;
}

/** What the filesystem can admit now, as GET /v1/account/limits and the metrics show it. */
export interface DiskRoomView {
  totalBytes: number;
  availBytes: number;
  reserveBytes: number;
  promisedBytes: number;
  pendingBytes: number;
  /** What a new write may take: free, less the reserve, the promises and the writes under way. */
  admitsBytes: number;
}

/**
 * Admission of writes that grow the data filesystem against its real free space (statfs), less a
 * reserve the operator keeps, less what sparse disks already admitted may still grow into, less
 * what admitted writes under way may still write. A write is admitted with its full size (a
 * sandbox disk with its disk_gb, an upload with its length), held until it is done; then what it
 * left on disk is in the next reading (its unwritten part in the disks' promises). The sum of
 * everything admitted cannot exceed the free space, so no sandbox meets a full filesystem (ENOSPC
 * inside its own disk: its disk_gb; never an I/O error of the host's).
 *
 * The check and the hold are one synchronous step after the reading, so concurrent admissions of
 * this process never share the same room. The reading (statfs, a stat per disk) is taken at most
 * once a second, in the background once there is one (see DISK_READING_STALE_MS). (Control
 * replicas of a cluster write to their own data directories; the nodes' sandbox disks are not
 * admitted here: placement counts their disk_gb against each node's capacity.)
 */
export class DiskRoom {
  private pending = 0;
  /** Bytes of every claim given back so far; a reading counts those given back since it began. */
  private releasedTotal = 0;
  private reading?: Reading;
  private readingP?: Promise<Reading>;
  private readonly now: () => number;

  constructor(private readonly o: DiskRoomOptions) {
    this.now = o.now ?? Date.now;
  }

  reserveBytes(totalBytes: number): number {
    const r = this.o.reserve;
    return Math.min(totalBytes, r.bytes ?? Math.ceil((totalBytes * r.percent) / 100));
  }

  /** The current reading (fresh within DISK_READING_MS; concurrent callers share one read). */
  async view(): Promise<DiskRoomView> {
    return this.viewOf(await this.current());
  }

  /** Synchronous: a claim checks and holds with no await in between. */
  private viewOf(r: Reading): DiskRoomView {
    const space = r.space;
    const released = this.releasedTotal - r.base;
    const reserveBytes = this.reserveBytes(space.totalBytes);
    const promisedBytes = space.promisedBytes + released;
    return {
      totalBytes: space.totalBytes,
      availBytes: space.availBytes,
      reserveBytes,
      promisedBytes,
      pendingBytes: this.pending,
      admitsBytes: space.availBytes - reserveBytes - promisedBytes - this.pending,
    };
  }

  /**
   * Holds `bytes` of room for `what` (a phrase: "a sandbox disk of 5 GB"), or refuses with 507
   * INSUFFICIENT_STORAGE before anything is written. 0 bytes: admitted while the filesystem is not
   * past its reserve (a start: its disk was counted when it was made). The returned function gives
   * the room back once the write is done, or undone (`kept: false`: nothing of it is left, so it
   * counts no more); calling it twice does nothing.
   */
  async claim(bytes: number, what: string): Promise<(kept?: boolean) => void> {
    const v = this.viewOf(await this.current());
    // No await between the check and the hold.
    if (bytes > v.admitsBytes || v.admitsBytes < 0) throw this.refusal(bytes, what, v);
    this.pending += bytes;
    let done = false;
    return (kept = true) => {
      if (done) return;
      done = true;
      this.pending -= bytes;
      // What it wrote is in a reading begun after this; until then, count it all as promised.
      if (kept) this.releasedTotal += bytes;
    };
  }

  /** Runs `write` with `bytes` held for it. */
  async with<T>(bytes: number, what: string, write: () => Promise<T>): Promise<T> {
    const release = await this.claim(bytes, what);
    try {
      const out = await write();
      release();
      return out;
    } catch (err) {
      release(false);
      throw err;
    }
  }

  private refusal(bytes: number, what: string, v: DiskRoomView): ServiceError {
    const mb = (n: number) => Math.max(0, Math.floor(n / 2 ** 20));
    return new ServiceError(
      'INSUFFICIENT_STORAGE',
      `${this.o.name} has no room for ${what}: ${mb(v.availBytes)} MB free, of which ${mb(v.reserveBytes)} MB are kept in reserve and ${mb(v.promisedBytes + v.pendingBytes)} MB are promised to sandbox disks and writes under way; delete sandboxes, snapshots, templates or uploads, or ask the operator for room`,
      { requested_bytes: bytes, available_bytes: Math.max(0, v.admitsBytes), reserve_bytes: v.reserveBytes },
    );
  }

  private async current(): Promise<Reading> {
    const r = this.reading;
    const age = r ? this.now() - r.at : Infinity;
    if (r && age < DISK_READING_MS) return r;
    if (!this.readingP) {
      const base = this.releasedTotal;
      const p = this.o.read().then((space) => {
        const fresh = { at: this.now(), space, base };
        this.reading = fresh;
        return fresh;
      });
      this.readingP = p;
      void p
        .finally(() => {
          if (this.readingP === p) this.readingP = undefined;
        })
        .catch(() => undefined);
    }
    if (r && age < DISK_READING_STALE_MS) return r;
    return this.readingP;
  }
}
