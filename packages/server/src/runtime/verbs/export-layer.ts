import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { ServiceError } from '@sandboxd/protocol';
import { isFrozen, setFrozen } from '../cgroups.js';
import type { RuntimeContext } from '../context.js';
import { diskUsage, loopBacks, mountDiskImage, unmount, waitLoopReleased } from '../disk.js';
import { readIdRange } from '../id-ranges.js';
import { CANONICAL_ID_OFFSET, ID_RANGE } from '../ids.js';
import { hasOwnFilesystem } from '../mounts.js';
import { proc, procOk, toolError } from '../proc.js';
import { checkId } from '../sandbox-paths.js';
import { mapIdRangeOffThread, TooManyEntries } from '../shift.js';
import { ExportTooLarge } from '../types.js';

/** A snapshot's copy (the sandbox frozen) and its ownership pass each end after this long. */
export const SNAPSHOT_COPY_TIMEOUT_MS = 600_000;
/** Names a snapshot may hold (every hard link counts): past it the snapshot is refused. */
export const SNAPSHOT_MAX_ENTRIES = 2_000_000;

/**
 * Copies the sandbox's own files (its upper: what it changed over its layers, overlay whiteouts
 * and opaque directories included) into `dest`, an empty directory, in canonical ownership: a
 * layer other sandboxes can mount. A running sandbox is frozen for the copy, so what is saved is
 * one moment of it, and thawed right after (also when the copy fails); a paused or stopped one
 * is copied as it is.
 *
 * A running sandbox's disk is mounted in its own namespace only (detachHostMounts): its loop
 * device is mounted once more for the copy, which the kernel serves from the same superblock (so
 * the copy sees exactly what the sandbox wrote). A stopped one's image is mounted as a start
 * would. Everything in the upper is the tenant's: `cp -a` copies symlinks as symlinks, never
 * through them, and the copy's ids are rewritten in `dest`, which the sandbox cannot reach.
 */
export function exportLayer(
  ctx: RuntimeContext,
  id: string,
  dest: string,
  opts: { maxBytes?: number } = {},
): Promise<{ bytes: number; allocated: number; entries: number; frozenMs: number }> {
  checkId(id);
  return ctx.withLock(id, async () => {
    const p = ctx.paths(id);
    if (!existsSync(p.dir)) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
    const range = await readIdRange(p.dir);
    if (!range || range.movingFrom !== undefined) throw new ServiceError('INVALID_STATE', `sandbox ${id} must be started once before it can be saved`);
    const layout = await ctx.layout();
    const rel = ctx.cgroupPath(id);
    // Whether it runs, from its cgroup (a few reads; asking crun is a process spawn).
    const frozen = await isFrozen(layout, rel);
    const live = frozen !== undefined;
    let thaw = false;
    let mounted = false;
    let frozenAt = 0;
    let frozenMs = 0;
    try {
      let src = p.disk;
      if (!(await hasOwnFilesystem(p.disk))) {
        await mkdir(p.snapMount, { recursive: true, mode: 0o700 });
        if (await hasOwnFilesystem(p.snapMount)) await unmount(p.snapMount);
        const loop = await ctx.recordedLoop(p);
        if (live) {
          if (!loop || !(await loopBacks(loop, p.image))) throw new Error(`the disk's loop device is not known (${loop ?? 'none recorded'})`);
          await procOk(await ctx.idmapHelper(), ['dev-mount', loop, p.snapMount]);
        } else {
          if (loop && !(await waitLoopReleased(loop, p.image, 10_000))) {
            throw new ServiceError('RUNTIME_ERROR', `sandbox ${id}: its disk is still held by its previous run; try again`).withDetail(`loop device ${loop}`);
          }
          await mountDiskImage(p.image, p.snapMount, await ctx.diskTools());
        }
        mounted = true;
        src = p.snapMount;
      }
      // Refused before copying when the disk already holds more than may be stored: the copy would
      // fill the host's disk for nothing (what the disk holds bounds what the copy takes).
      if (opts.maxBytes !== undefined) {
        const used = (await diskUsage(src)).usedBytes;
        if (used > opts.maxBytes) throw new ExportTooLarge(used);
      }
      // Frozen for the copy alone (the mount needs no freeze).
      if (frozen === false) {
        frozenAt = performance.now();
        // Thawed in any case from here: a freeze that times out may have left it half-frozen.
        thaw = true;
        if ((await setFrozen(layout, rel, true)) === undefined) throw new Error('the sandbox has no freezer');
      }
      // Bounded in time (the sandbox is frozen meanwhile), and gone with the daemon: a copy left
      // running after a crash would keep the disk's second mount busy.
      const seconds = String(Math.ceil(SNAPSHOT_COPY_TIMEOUT_MS / 1000));
      const r = await proc('setpriv', ['--pdeathsig', 'KILL', '--', 'timeout', '-s', 'KILL', seconds, 'setpriv', '--pdeathsig', 'KILL', '--', 'cp', '-a', '--', `${join(src, 'upper')}/.`, dest]);
      if (r.code === 137 || r.signal === 'SIGKILL') throw new ServiceError('LIMIT_EXCEEDED', `copying the sandbox's files took longer than ${seconds} s`, { limit: 'snapshot_copy_seconds', max: Number(seconds) });
      if (r.code !== 0) throw toolError('cp', ['-a'], r);
    } finally {
      if (thaw) {
        await setFrozen(layout, rel, false).catch(async (err: unknown) => {
          ctx.log(`sandbox ${id}: thawing after a snapshot failed (${String(err)}); trying crun`);
          await ctx.crun.simple('resume', id);
        });
        frozenMs = performance.now() - frozenAt;
      }
      // Behind the answer, before the next operation on the sandbox (a stop would take it too).
      if (mounted) void ctx.withLock(id, () => unmount(p.snapMount).catch((err: unknown) => ctx.log(`sandbox ${id}: cannot unmount ${p.snapMount}: ${String(err)}`)));
    }
    // Off the event loop, bounded: a tenant's tree may hold millions of names.
    let shifted;
    try {
      shifted = await mapIdRangeOffThread(dest, range.base, CANONICAL_ID_OFFSET, ID_RANGE, { maxEntries: SNAPSHOT_MAX_ENTRIES, timeoutMs: SNAPSHOT_COPY_TIMEOUT_MS });
    } catch (err) {
      if (err instanceof TooManyEntries) {
        throw new ServiceError('LIMIT_EXCEEDED', `the sandbox holds more than ${err.max} file names (hard links count): too many to save`, { limit: 'snapshot_entries', max: err.max });
      }
      throw err;
    }
    return { ...shifted, frozenMs };
  });
}
