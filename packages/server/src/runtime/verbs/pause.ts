import { existsSync } from 'node:fs';
import { ServiceError } from '@sandboxd/protocol';
import { isFrozen, setFrozen } from '../cgroups.js';
import type { RuntimeContext } from '../context.js';
import { checkId } from '../sandbox-paths.js';

/**
 * Freezes (or thaws) every process of a sandbox, its memory kept. The freezer is written directly
 * instead of running `crun pause/resume` (same effect, and crun's state reports "paused" from the
 * same file): a spawn would be most of the latency. crun is the fallback if the direct path fails.
 */
export function setPaused(ctx: RuntimeContext, id: string, paused: boolean): Promise<void> {
  checkId(id);
  return ctx.withLock(id, async () => {
    const layout = await ctx.layout();
    const rel = ctx.cgroupPath(id);
    const frozen = await isFrozen(layout, rel);
    if (frozen === undefined) {
      await requireContainer(ctx, id);
    } else if (frozen === paused) {
      return;
    }
    try {
      if ((await setFrozen(layout, rel, paused)) !== undefined) return;
    } catch (err) {
      ctx.log(`sandbox ${id}: freezer: ${String(err)}; trying crun`);
    }
    const s = await requireContainer(ctx, id);
    if ((s === 'paused') !== paused) await ctx.crun.simple(paused ? 'pause' : 'resume', id);
  });
}

async function requireContainer(ctx: RuntimeContext, id: string): Promise<'running' | 'paused'> {
  const st = await ctx.crun.state(id);
  if (st?.status === 'running' || st?.status === 'paused') return st.status;
  if (existsSync(ctx.paths(id).dir)) throw new ServiceError('SANDBOX_STOPPED', `sandbox ${id} is not running`);
  throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
}
