import { existsSync } from 'node:fs';
import { chmod, mkdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { ServiceError } from '@sandboxd/protocol';
import { checkSuidDumpable } from '../agent-runtime.js';
import { removeCgroup } from '../cgroups.js';
import type { RuntimeContext } from '../context.js';
import { unmount } from '../disk.js';
import { isRestricted, usesProxy } from '../egress-policy.js';
import { applyNftables, deleteBridge, deleteNftTable, enableIpForwarding, ensureBridge, fixHybridCgroups, hostIpv4Addresses, hostResolvers } from '../host.js';
import { hasOwnFilesystem } from '../mounts.js';
import { normalizeCidr } from '../net.js';
import { procOk } from '../proc.js';
import { DIR_MODE } from '../sandbox-paths.js';
import { cleanupStaleSteps } from './run-step.js';
import { list } from './queries.js';

/** Idempotent host preparation (cgroup quirk, ip_forward, bridge, nftables, directories). */
export async function setupHost(ctx: RuntimeContext): Promise<void> {
  const layout = await ctx.layout();
  if (layout.version === 1) {
    await fixHybridCgroups(ctx.log);
    ctx.redetectLayout();
  }
  await checkSuidDumpable();
  await enableIpForwarding();
  await ensureBridge(ctx.bridge, ctx.subnet);
  // The policies sandboxes keep on disk go into the same transaction as the table: a restart
  // never leaves a sandbox without its rules.
  ctx.egress.clear();
  for (const id of await ctx.sandboxDirIds()) {
    const net = await ctx.readNet(id);
    if (net.ip && isRestricted(net.egress)) ctx.egress.remember(id, net.ip, net.egress);
    // A snapshot's copy that a crash cut short left the disk mounted for it.
    const snap = ctx.paths(id).snapMount;
    if (existsSync(snap) && (await hasOwnFilesystem(snap))) {
      await unmount(snap).catch(async (err: unknown) => {
        ctx.log(`sandbox ${id}: ${snap} is busy (${String(err)}); detaching it`);
        await procOk('umount', ['-l', snap]).catch((e: unknown) => ctx.log(`sandbox ${id}: cannot detach ${snap}: ${String(e)}`));
      });
    }
  }
  const policies = ctx.egress.all();
  ctx.egress.resolvers = [...new Set(ctx.opts.dnsResolvers ?? (await hostResolvers()))];
  if (policies.some((e) => usesProxy(e.policy))) await ctx.egress.proxy.ensure();
  await applyNftables({
    table: ctx.nftTable,
    bridge: ctx.bridge,
    subnet: ctx.subnet,
    resolvers: ctx.egress.resolvers,
    hostAddresses: hostIpv4Addresses(),
    egressAllow: (ctx.opts.egressAllow ?? []).map(normalizeCidr),
    egressAllowEndpoints: ctx.opts.egressAllowEndpoints ?? [],
    proxyVeth: ctx.egress.proxyVeth,
    proxyMark: ctx.egress.proxy.mark,
    policies,
  });
  for (const e of policies) ctx.egress.counted(e.ip);
  await mkdir(ctx.dataDir, { recursive: true, mode: DIR_MODE });
  await ensureTraversable(ctx.dataDir, ctx.log);
  for (const d of ['sandboxes', 'crun', 'crun-steps', 'steps']) await mkdir(join(ctx.dataDir, d), { recursive: true, mode: DIR_MODE });
  await ctx.agentRuntime();
  await ctx.idmapHelper();
  await cleanupStaleSteps(ctx.stepContext());
}

/**
 * Removes what setupHost made that belongs to this runtime alone: its bridge, nftables table
 * and cgroup parent. For tests and uninstall; sandboxes must be gone first.
 */
export async function teardownHost(ctx: RuntimeContext): Promise<void> {
  if ((await list(ctx)).length > 0) throw new ServiceError('INVALID_STATE', 'sandboxes still exist');
  await ctx.pool.drain();
  await ctx.egress.proxy.close();
  await deleteNftTable(ctx.nftTable);
  await deleteBridge(ctx.bridge);
  await removeCgroup(await ctx.layout(), `/${ctx.cgroupParent}`);
}

/** Daemon shutdown: releases node-local spares (pooled disks); sandboxes keep running. */
export async function closeRuntime(ctx: RuntimeContext): Promise<void> {
  await ctx.pool.drain();
  // Sandboxes with domain rules have their inspected connections refused until the next start.
  await ctx.egress.proxy.close();
}

/**
 * crun reaches the rootfs and bind sources from inside the user namespace, as "other": the data
 * dir needs o+x (not o+r), and so does every directory above it.
 */
async function ensureTraversable(dir: string, log: (m: string) => void): Promise<void> {
  const mode = (await stat(dir)).mode & 0o7777;
  if ((mode & 0o001) === 0) {
    await chmod(dir, mode | 0o011);
    log(`data directory ${dir}: added search permission for others (mode ${(mode | 0o011).toString(8)}); sandboxes need it`);
  }
  for (let d = dirname(dir); d !== dirname(d); d = dirname(d)) {
    if (((await stat(d)).mode & 0o001) === 0) throw new Error(`${d} must be searchable by others (chmod o+x) for sandboxes to start`);
  }
}
