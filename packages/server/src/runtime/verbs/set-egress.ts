import { existsSync } from 'node:fs';
import { ServiceError } from '@sandboxd/protocol';
import type { RuntimeContext } from '../context.js';
import { isRestricted, type EgressPolicy } from '../egress-policy.js';
import { checkId } from '../sandbox-paths.js';

/**
 * Changes a running, paused or stopped sandbox's egress policy. New connections follow it at once
 * (one nft transaction; the proxy asks for the policy on every connection and request). Kept on
 * the sandbox's disk, so a restart of the daemon or a start of the sandbox applies it again.
 */
export function setEgress(ctx: RuntimeContext, id: string, policy: EgressPolicy): Promise<void> {
  checkId(id);
  return ctx.withLock(id, async () => {
    if (!existsSync(ctx.paths(id).dir)) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
    const net = await ctx.readNet(id);
    if (!net.ip) throw new ServiceError('INVALID_STATE', `sandbox ${id} was created without internet access: it has no network to set rules on`);
    await ctx.writeNet(id, { ip: net.ip, egress: isRestricted(policy) ? policy : undefined });
    await ctx.egress.apply(id, net.ip, policy);
  });
}
