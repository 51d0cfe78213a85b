import { existsSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { ServiceError } from '@sandboxd/protocol';
import type { RuntimeContext } from '../context.js';
import { createDiskImage, mountDiskImage, unmount, unmountDisk } from '../disk.js';
import { prepareUpper } from '../disk-pool.js';
import { readIdRange } from '../id-ranges.js';
import { hasOwnFilesystem } from '../mounts.js';
import { checkId } from '../sandbox-paths.js';

/**
 * Gives a stopped sandbox a new, empty disk (its upper) of `diskGb`, keeping its directory, id
 * range and address: its next start() shows its layers alone (a rollback to a snapshot: the
 * caller starts it on the snapshot's layers). The old disk is freed once its last run let go.
 */
export function resetDisk(ctx: RuntimeContext, id: string, diskGb: number): Promise<void> {
  checkId(id);
  return ctx.withLock(id, async () => {
    const p = ctx.paths(id);
    if (!existsSync(p.dir)) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
    const st = await ctx.crun.state(id);
    if (st && (st.status === 'running' || st.status === 'paused')) throw new ServiceError('INVALID_STATE', `sandbox ${id} must be stopped to reset its disk`);
    const range = await readIdRange(p.dir);
    if (!range) throw new ServiceError('INVALID_STATE', `sandbox ${id} has no id range`);
    if (await hasOwnFilesystem(p.rootfs)) await unmount(p.rootfs);
    if (await hasOwnFilesystem(p.disk)) await unmountDisk(p.dir, p.image, p.disk);
    const fresh = `${p.image}.new`;
    await rm(fresh, { force: true });
    await createDiskImage(fresh, Math.round(diskGb * 1024 ** 3), await ctx.diskTools());
    // The old image goes with the rename; a loop device its last run still holds keeps it until
    // it lets go (a start waits for that: disk.loop).
    await rename(fresh, p.image);
    await mkdir(p.disk, { recursive: true });
    await mountDiskImage(p.image, p.disk, await ctx.diskTools());
    await prepareUpper(p.dir, range.base, { fresh: true });
  });
}
