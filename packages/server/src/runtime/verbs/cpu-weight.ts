import { existsSync } from 'node:fs';
import { ServiceError } from '@sandboxd/protocol';
import { checkCpuWeight, writeCpuWeight } from '../cgroups.js';
import type { RuntimeContext } from '../context.js';
import { checkId } from '../sandbox-paths.js';

/**
 * Sets a running sandbox's CPU weight on its cgroup (cpu.weight on v2, cpu.shares on v1): a file
 * write, no spawn, so that a create handed a sandbox the pool booted at a low weight pays ~0.1 ms.
 */
export function setCpuWeight(ctx: RuntimeContext, id: string, weight: number): Promise<void> {
  checkId(id);
  checkCpuWeight(weight);
  return ctx.withLock(id, async () => {
    if (await writeCpuWeight(await ctx.layout(), ctx.cgroupPath(id), weight)) return;
    if (existsSync(ctx.paths(id).dir)) throw new ServiceError('SANDBOX_STOPPED', `sandbox ${id} is not running`);
    throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
  });
}
