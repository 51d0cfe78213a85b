import { chmod, chown, mkdir } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { ServiceError } from '@sandboxd/protocol';
import { agentArgv, nodeArgv, NODE_MOUNT } from '../agent-runtime.js';
import { AGENT_LISTEN_FD, runWithAgentSocket } from '../agent-socket.js';
import { assembleContainer } from '../assemble.js';
import type { RuntimeContext } from '../context.js';
import { checkLowerDirs, mountDiskImage, mountOverlay, unmount, waitLoopReleased, type DiskTools } from '../disk.js';
import { prepareDiskDir, prepareUpper } from '../disk-pool.js';
import { isRestricted } from '../egress-policy.js';
import { RangeHeldElsewhere, readIdRange, writeIdRange, type IdRangeFile, type IdRanges } from '../id-ranges.js';
import { ID_RANGE, LEGACY_ID_OFFSET } from '../ids.js';
import { hasOwnFilesystem } from '../mounts.js';
import { asRuntimeError, checkSpec, DIR_MODE, SANDBOX_DIR_MODE, type SandboxPaths } from '../sandbox-paths.js';
import { moveIdRange } from '../shift.js';
import type { SandboxSpec } from '../types.js';
import { UndoStack } from '../undo.js';
import { ensureVolumeMounted, volumeOciMount, volumePathProblem, type VolumeMountSpec } from '../volumes.js';
import { destroyUnlocked } from './destroy.js';

/** A new sandbox: its directory, disk, id range and address, then its container. */
export function create(ctx: RuntimeContext, spec: SandboxSpec): Promise<void> {
  checkSpec(spec);
  return ctx.withLock(spec.id, async () => {
    const state = await ctx.crun.state(spec.id);
    if (state && (state.status === 'running' || state.status === 'paused')) return;
    if (await ctx.hasTrace(spec.id)) {
      // A create that crashed half-way (no undo ran): what it left holds no user data.
      ctx.log(`sandbox ${spec.id}: removing leftovers of an earlier create`);
      await destroyUnlocked(ctx, spec.id);
    }
    await boot(ctx, spec, true);
  });
}

/** A stopped sandbox again, on its kept disk, address and id range; what is missing is made again. */
export function start(ctx: RuntimeContext, spec: SandboxSpec): Promise<void> {
  checkSpec(spec);
  return ctx.withLock(spec.id, async () => {
    const state = await ctx.crun.state(spec.id);
    if (state && (state.status === 'running' || state.status === 'paused')) return;
    if (!existsSync(ctx.paths(spec.id).image)) throw new ServiceError('NOT_FOUND', `sandbox ${spec.id} has no disk to start from`);
    await boot(ctx, spec, false);
  });
}

/** What the parts of one create/start share. */
interface BootContext {
  spec: SandboxSpec;
  p: SandboxPaths;
  undo: UndoStack;
  fresh: boolean;
  pooled: boolean;
  diskBytes: number;
  range: IdRangeFile;
  hook: (name: string) => Promise<void>;
}

/**
 * Shared by create (fresh: new directory and disk) and start (reuse disk and address; re-make
 * whatever is missing). Disk, network and the agent runtime are prepared concurrently. On any
 * failure everything done so far is undone, in reverse, once.
 */
async function boot(ctx: RuntimeContext, spec: SandboxSpec, fresh: boolean): Promise<void> {
  const undo = new UndoStack(ctx.log);
  try {
    await bootSteps(ctx, spec, undo, fresh);
    undo.commit();
    ctx.oom.created(spec.id);
    ctx.detachSoon(spec.id);
  } catch (err) {
    await undo.run();
    throw asRuntimeError(err);
  }
}

async function bootSteps(ctx: RuntimeContext, spec: SandboxSpec, undo: UndoStack, fresh: boolean): Promise<void> {
  const id = spec.id;
  const p = ctx.paths(id);
  const onTiming = ctx.opts.onTiming;
  const t0 = performance.now();
  let phase = { name: 'prepare', at: t0 };
  const nextPhase = (name: string) => {
    const now = performance.now();
    onTiming?.(id, phase.name, now - phase.at);
    phase = { name, at: now };
  };
  const hook = async (name: string) => ctx.opts.stepHook?.(id, name);
  const timed = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
    const begin = performance.now();
    const r = await fn();
    onTiming?.(id, name, performance.now() - begin);
    return r;
  };

  await hook('begin');
  checkLowerDirs(spec.lowerDirs);
  let pooled = false;
  const diskBytes = Math.round(spec.resources.diskGb * 1024 ** 3);
  const ranges = await ctx.idRanges();
  let range: IdRangeFile;
  if (fresh) {
    range = { base: ranges.allocate(id), size: ID_RANGE };
    // Released after the directory is gone (undo runs in reverse).
    undo.push('id range', () => ranges.release(id));
    await mkdir(join(ctx.dataDir, 'sandboxes'), { recursive: true, mode: DIR_MODE });
    undo.push('sandbox directory', () => ctx.removeSandboxDir(id));
    pooled = await ctx.pool.take(diskBytes, p.dir);
    if (!pooled) await mkdir(p.dir, { mode: DIR_MODE });
    await writeIdRange(p.dir, range);
  } else {
    range = await existingRange(ctx, id, p.dir, ranges);
  }
  const base = range.base;
  await chown(p.dir, 0, base);
  await chmod(p.dir, SANDBOX_DIR_MODE);

  const c: BootContext = { spec, p, undo, fresh, pooled, diskBytes, range, hook };
  const holder = await assembleContainer({
    undo,
    configPath: p.config,
    prepareRootfs: () => bootDisk(ctx, c),
    rootfs: p.rootfs,
    process: async () => {
      const agentRt = await ctx.agentRuntime();
      return {
        argv: agentArgv(nodeArgv(agentRt, `/.sb/agent/${basename(ctx.agentBundlePath)}`), dirname(ctx.agentBundlePath)),
        env: { ...spec.env, ...ctx.opts.agentEnv, SANDBOXD_AGENT_LISTEN_FD: String(AGENT_LISTEN_FD) },
        cwd: '/',
        binds: [
          { source: agentRt.dir, target: NODE_MOUNT },
          { source: dirname(ctx.agentBundlePath), target: '/.sb/agent' },
        ],
      };
    },
    hostname: spec.hostname,
    cgroupsPath: ctx.cgroupPath(id),
    resources: spec.resources,
    idBase: base,
    caBundle: async () => true,
    cgroupVersion: async () => (await ctx.layout()).version,
    network: spec.internetAccess ? networkPlan(ctx, c) : undefined,
    extraMounts: spec.volumes?.length ? async () => volumeMounts(ctx.dataDir, spec.volumes!, base, await ctx.diskTools()) : undefined,
    beforeConfig: async () => {
      nextPhase('config');
      await hook('config');
    },
    timed,
  });

  // A container left in crun's state (its init died, or a crash) would block the id.
  await ctx.crun.forceDelete(id);
  nextPhase('crun-run');
  await hook('crun-run');
  undo.push('container', () => ctx.crun.forceDelete(id));
  await runWithAgentSocket(ctx.crun, id, p.dir, p.socket, p.log);
  if (holder) {
    nextPhase('network-finish');
    await hook('network-finish');
    await holder.finish();
  }
  nextPhase('done');
  onTiming?.(id, 'total', performance.now() - t0);
}

/** The range a sandbox being started holds: claimed again, or a new one its files move to. */
async function existingRange(ctx: RuntimeContext, id: string, dir: string, ranges: IdRanges): Promise<IdRangeFile> {
  const found = await readIdRange(dir);
  let range: IdRangeFile;
  if (found) {
    try {
      ranges.claim(id, found.base);
      return found;
    } catch (err) {
      if (!(err instanceof RangeHeldElsewhere)) throw err;
      // Another data dir's sandbox on this host has the same ids (both made before ranges were
      // registered host-wide): this one's files move to a range of its own.
      ctx.log(`sandbox ${id}: ${err.message}; moving it to a new range`);
      range = { base: ranges.allocate(id), size: ID_RANGE, movingFrom: found.movingFrom ?? found.base };
    }
  } else {
    // Made when every sandbox ran as the shared legacy range: its files move to a range of its own.
    range = { base: ranges.allocate(id), size: ID_RANGE, movingFrom: LEGACY_ID_OFFSET };
  }
  await writeIdRange(dir, range);
  return range;
}

/** The sandbox's disk (made, from the pool, or mounted again), its ids, and the overlay on it. */
async function bootDisk(ctx: RuntimeContext, { spec, p, undo, fresh, pooled, diskBytes, range, hook }: BootContext): Promise<void> {
  const id = spec.id;
  const base = range.base;
  await hook('disk');
  if (fresh && !pooled) {
    await prepareDiskDir(p.dir, diskBytes, await ctx.diskTools());
  } else if (!fresh) {
    if (!(await hasOwnFilesystem(p.disk))) {
      // Its last run's container may still be letting go of the disk: two mounts of one ext4
      // image would corrupt it.
      const last = await ctx.recordedLoop(p);
      if (last && !(await waitLoopReleased(last, p.image, 30_000))) {
        throw new ServiceError('RUNTIME_ERROR', `sandbox ${id}: its disk is still held by its previous run; try again`).withDetail(`loop device ${last}`);
      }
      await mkdir(p.disk, { recursive: true });
      await mountDiskImage(p.image, p.disk, await ctx.diskTools());
      undo.push('disk mount', () => unmount(p.disk));
    }
  }
  if (range.movingFrom !== undefined) {
    const t = performance.now();
    const moved = moveIdRange(p.upper, range.movingFrom, base, ID_RANGE);
    ctx.log(`sandbox ${id}: moved the ids of ${moved.entries} files from ${range.movingFrom} to its own range ${base} in ${Math.round(performance.now() - t)} ms`);
    await writeIdRange(p.dir, { base, size: ID_RANGE });
  }
  await prepareUpper(p.dir, base, { fresh });
  // A fresh sandbox's rootfs is a new directory: only a start looks whether it is mounted.
  if (fresh || !(await hasOwnFilesystem(p.rootfs))) {
    await mkdir(p.rootfs, { recursive: true });
    await hook('overlay-mount');
    await mountOverlay(spec.lowerDirs, p.upper, p.work, p.rootfs, { helper: await ctx.idmapHelper(), base, scratch: p.lowerScratch });
    undo.push('overlay mount', () => unmount(p.rootfs));
  }
}

/** With internet access: its address (kept on its disk) and egress rules, in force before it runs. */
function networkPlan(ctx: RuntimeContext, { spec, undo, fresh, hook }: BootContext): NonNullable<Parameters<typeof assembleContainer>[0]['network']> {
  const id = spec.id;
  let policy = spec.egress;
  return {
    netnsName: ctx.netnsName(id),
    bridge: ctx.bridge,
    subnet: ctx.subnet,
    address: async () => {
      await hook('network');
      const ipam = await ctx.ipam();
      let ip = await ctx.readIp(id);
      if (!ip || (fresh && ipam.isUsed(ip))) {
        ip = ipam.allocate();
        const allocated = ip;
        undo.push('address', () => ipam.release(allocated));
      } else {
        ipam.claim(ip);
      }
      policy ??= (await ctx.readNet(id)).egress;
      await ctx.writeNet(id, { ip, egress: isRestricted(policy) ? policy : undefined });
      return ip;
    },
    ready: async (ip) => {
      if (!isRestricted(policy)) return;
      undo.push('egress policy', () => ctx.egress.remove(id, ip));
      await ctx.egress.apply(id, ip, policy);
    },
  };
}

/**
 * The volumes' binds, idmapped to the sandbox's range; each volume's image mounted on the host
 * first when it is not (after a reboot). Its host mount stays: other sandboxes share it.
 */
async function volumeMounts(dataDir: string, volumes: VolumeMountSpec[], base: number, tools: DiskTools) {
  for (const v of volumes) {
    const problem = volumePathProblem(v.path);
    if (problem) throw new TypeError(`volume mount path ${JSON.stringify(v.path)} ${problem}`);
    await ensureVolumeMounted(dataDir, v.id, tools);
  }
  return volumes.map((v) => volumeOciMount(dataDir, v, base));
}
