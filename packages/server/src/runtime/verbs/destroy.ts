import { rm } from 'node:fs/promises';
import { ServiceError } from '@sandboxd/protocol';
import type { RuntimeContext } from '../context.js';
import { deleteNetns, waitVethGone } from '../net.js';
import { unmountDisk } from '../disk.js';
import { checkId } from '../sandbox-paths.js';

/** Removes container, mounts, loop device, cgroups, netns/veth, rules and directory. Idempotent. */
export function destroy(ctx: RuntimeContext, id: string): Promise<void> {
  checkId(id);
  return ctx.withLock(id, () => destroyUnlocked(ctx, id));
}

/** destroy() for a caller that holds the sandbox's lock (a create clearing an earlier one's leftovers). */
export async function destroyUnlocked(ctx: RuntimeContext, id: string): Promise<void> {
  await ctx.killContainer(id);
  await deleteNetns(ctx.netnsName(id));
  const ip = await ctx.readIp(id);
  if (ip) await ctx.egress.remove(id, ip);
  await ctx.removeSandboxDir(id);
  // Last: the kernel tears the veth down while the directory goes.
  await waitVethGone(ctx.vethName(id));
  const ipam = ctx.loadedIpam();
  if (ip && ipam) (await ipam).release(ip);
  // Always: the range is also registered host-wide, and this process may not have loaded the
  // ranges yet (a destroy right after a restart); loading them now prunes this sandbox's entry.
  (await ctx.idRanges()).release(id);
}

/** Kills every process and removes the container; keeps the disk, address and id range for start(). */
export function stop(ctx: RuntimeContext, id: string): Promise<void> {
  checkId(id);
  return ctx.withLock(id, async () => {
    if (!(await ctx.hasTrace(id))) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
    await ctx.killContainer(id);
    // Its proxied connections end with it (the netns goes without a reset to them).
    const ip = ctx.egress.ipOf(id);
    if (ip) {
      ctx.egress.proxy.cutAll(ip);
      ctx.egress.dns.forget(ip);
    }
    await deleteNetns(ctx.netnsName(id));
    const p = ctx.paths(id);
    await unmountDisk(p.dir, p.image, p.disk, await ctx.recordedLoop(p));
    await rm(p.socket, { force: true });
    await waitVethGone(ctx.vethName(id));
  });
}
