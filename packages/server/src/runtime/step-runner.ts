import { spawn } from 'node:child_process';
import { existsSync, statfsSync } from 'node:fs';
import { chmod, chown, lstat, mkdir, readFile, readdir, rmdir, stat, unlink, writeFile } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { ServiceError } from '@sandboxd/protocol';
import { cgroupDirs, cgroupExists, removeCgroup, type CgroupLayout } from './cgroups.js';
import type { Crun } from './crun.js';
import { CANONICAL_ID_OFFSET } from '../images/types.js';
import { checkLowerDirs, mountOverlay, removeTree, unmount, unmountAllUnder } from './disk.js';
import { layerIdOffset } from './idmap.js';
import { deleteNetns, NetnsHolder, vethName, waitVethGone, type Ipam, type Subnet } from './net.js';
import { buildConfig, HOST_CA_BUNDLE } from './oci.js';
import type { StepRunOptions } from './types.js';
import { UndoStack } from './undo.js';

export interface StepContext {
  dataDir: string;
  /** crun with its own --root: steps never show up as sandboxes. */
  crun: Crun;
  cgroupParent: string;
  netnsPrefix: string;
  bridge: string;
  subnet: Subnet;
  ipam: () => Promise<Ipam>;
  layout: () => Promise<CgroupLayout>;
  /** The idmap helper (used only for lowers still at LEGACY_ID_OFFSET). */
  idmapHelper: () => Promise<string>;
  log: (msg: string) => void;
}

interface StepMeta {
  upperDir: string;
  workDir: string;
}

const INIT_PATH = '/usr/bin/catatonit';
const DISK_WATCH_MS = 500;

function stepNames(ctx: StepContext, id: string) {
  const dir = join(ctx.dataDir, 'steps', id);
  return {
    dir,
    rootfs: join(dir, 'rootfs'),
    lowerScratch: join(dir, 'lower'),
    config: join(dir, 'config.json'),
    meta: join(dir, 'meta.json'),
    netns: `${ctx.netnsPrefix}step_${id}`,
    cgroup: `/${ctx.cgroupParent}/_steps/${id}`,
  };
}

/** True when the top-most lower that has the path has it (whiteouts aside: good enough for a bind target). */
async function inLowers(lowerDirs: string[], path: string): Promise<boolean> {
  for (const l of lowerDirs) {
    try {
      await lstat(join(l, path));
      return true;
    } catch {
      /* next */
    }
  }
  return false;
}

/**
 * One build step in a throwaway container with the same isolation as a sandbox (user namespace,
 * seccomp, capabilities, cgroup limits, own netns), on overlay(lowerDirs + upperDir). Afterwards
 * nothing is left but upperDir, whose files are in canonical ownership because root in the
 * container is host uid CANONICAL_ID_OFFSET: it can be used as a layer as it is. Unlike a sandbox,
 * a step runs as that shared range (its lowers, canonical already, are mounted directly); it runs
 * only template build commands, and its container is gone when the step ends.
 */
export async function runStep(ctx: StepContext, opts: StepRunOptions): Promise<{ exitCode: number; timedOut: boolean }> {
  if (opts.signal?.aborted) throw abortReason(opts.signal);
  checkLowerDirs(opts.lowerDirs);
  if (!isAbsolute(opts.upperDir) || /[:,\n]/.test(opts.upperDir)) throw new ServiceError('VALIDATION_ERROR', `bad upper dir ${opts.upperDir}`);
  for (const b of opts.binds ?? []) {
    if (!isAbsolute(b.source) || !isAbsolute(b.target) || !existsSync(b.source)) {
      throw new ServiceError('VALIDATION_ERROR', `bad bind ${b.source} -> ${b.target}`);
    }
  }
  const n = stepNames(ctx, opts.id);
  if (existsSync(n.dir) || ctx.crun.exists(opts.id)) await cleanupStep(ctx, opts.id);

  const upper = resolve(opts.upperDir);
  const workDir = join(dirname(upper), `.${basename(upper)}.work-${opts.id}`);
  const undo = new UndoStack(ctx.log);
  try {
    await mkdir(join(ctx.dataDir, 'steps'), { recursive: true, mode: 0o711 });
    await mkdir(n.dir, { mode: 0o711 });
    undo.push('step directory', () => removeTree(n.dir));
    await writeFile(n.meta, JSON.stringify({ upperDir: upper, workDir } satisfies StepMeta));

    // The upper's root becomes the layer's root directory: give it the attributes of the image's root.
    await mkdir(upper, { recursive: true });
    const rootAttrs = await stat(opts.lowerDirs[0]!);
    const rootOffset = await layerIdOffset(opts.lowerDirs[0]!);
    await chown(upper, rootAttrs.uid - rootOffset + CANONICAL_ID_OFFSET, rootAttrs.gid - rootOffset + CANONICAL_ID_OFFSET);
    await chmod(upper, rootAttrs.mode & 0o7777);
    await mkdir(workDir);
    undo.push('overlay workdir', () => removeTree(workDir));
    // Pushed before the mount so that it runs after the unmount.
    const targets = await missingTargets(opts.lowerDirs, upper, ['/.sb/init', ...(opts.binds ?? []).map((b) => b.target)]);
    undo.push('mount targets', () => dropTargets(upper, targets));
    await mkdir(n.rootfs);
    // Canonical lowers are mounted directly; only layers still at the legacy offset get idmapped.
    await mountOverlay(opts.lowerDirs, upper, workDir, n.rootfs, {
      helper: await ctx.idmapHelper(),
      base: CANONICAL_ID_OFFSET,
      scratch: n.lowerScratch,
    });
    undo.push('overlay mount', () => unmount(n.rootfs));

    let holder: NetnsHolder | undefined;
    if (opts.internetAccess) {
      const ipam = await ctx.ipam();
      const ip = ipam.allocate();
      undo.push('address', () => ipam.release(ip));
      await deleteNetns(n.netns);
      await waitVethGone(vethName(n.netns));
      holder = await NetnsHolder.start({
        netnsName: n.netns,
        veth: vethName(n.netns),
        bridge: ctx.bridge,
        ip,
        subnet: ctx.subnet,
        idBase: CANONICAL_ID_OFFSET,
      });
      const h = holder;
      undo.push('network namespace', async () => {
        await h.kill();
        await deleteNetns(n.netns);
        await waitVethGone(vethName(n.netns));
      });
    }

    const config = buildConfig({
      args: ['/.sb/init', '--', ...opts.argv],
      env: opts.env,
      cwd: opts.cwd || '/',
      hostname: 'build',
      rootfs: n.rootfs,
      cgroupsPath: n.cgroup,
      resources: opts.resources,
      netnsPath: holder ? `/run/netns/${n.netns}` : undefined,
      userNsPath: holder?.userNsPath,
      idBase: CANONICAL_ID_OFFSET,
      roBinds: [{ source: INIT_PATH, target: '/.sb/init' }, ...(opts.binds ?? [])],
      // Only over a bundle the image has: a bind would make an empty file in the layer, and a
      // read-only bind would break an `apt-get install ca-certificates` in this very step.
      caBundle: await inLowers(opts.lowerDirs, HOST_CA_BUNDLE),
    });
    await writeFile(n.config, JSON.stringify(config), { mode: 0o600 });

    undo.push('container', () => ctx.crun.forceDelete(opts.id));
    const result = await runForeground(ctx, opts);
    if (holder) {
      try {
        await holder.finish();
      } catch (err) {
        opts.onOutput?.(`sandboxd: ${err instanceof Error ? err.message : String(err)}\n`);
      }
    }
    if (result.aborted) throw abortReason(opts.signal!);
    return { exitCode: result.exitCode, timedOut: result.timedOut };
  } finally {
    await undo.run();
    // crun removes the step's leaf cgroup; the shared `_steps` directory goes once no step uses it.
    for (const d of cgroupDirs(await ctx.layout(), `/${ctx.cgroupParent}/_steps`)) await rmdir(d).catch(() => undefined);
  }
}

/**
 * crun creates missing bind-mount targets (files, directories) in the rootfs, i.e. in the upper
 * dir, which would put them in the layer. Records which ones it will have to create...
 */
async function missingTargets(lowerDirs: string[], upper: string, targets: string[]): Promise<{ created: string[]; parents: string[] }> {
  const created: string[] = [];
  const parents: string[] = [];
  for (const target of targets) {
    const parts = target.split('/').filter(Boolean);
    for (let i = 1; i <= parts.length; i++) {
      const rel = parts.slice(0, i).join('/');
      const inUpper = existsSync(join(upper, rel));
      if (!(await inLowers(lowerDirs, rel)) && !inUpper) {
        created.push(rel);
      } else if (!inUpper && i < parts.length) {
        parents.push(rel); // copied up when crun creates something below it
      }
    }
  }
  return { created, parents };
}

/** ...and removes them afterwards, deepest first, only while they are still empty. */
async function dropTargets(upper: string, m: { created: string[]; parents: string[] }): Promise<void> {
  const all = [...new Set([...m.created, ...m.parents])].sort((a, b) => b.split('/').length - a.split('/').length);
  for (const rel of all) {
    const p = join(upper, rel);
    try {
      const st = await lstat(p);
      if (st.isDirectory()) await rmdir(p);
      else if (m.created.includes(rel) && st.isFile() && st.size === 0) await unlink(p);
    } catch {
      /* gone or not empty: leave it */
    }
  }
}

function runForeground(
  ctx: StepContext,
  opts: StepRunOptions,
): Promise<{ exitCode: number; timedOut: boolean; aborted: boolean }> {
  const n = stepNames(ctx, opts.id);
  return new Promise((resolvePromise, reject) => {
    const child = spawn('crun', ctx.crun.args('run', '--bundle', n.dir, opts.id), { stdio: ['ignore', 'pipe', 'pipe'] });
    let timedOut = false;
    let aborted = false;
    const killAll = () => void ctx.crun.kill(opts.id, 'KILL');
    const timer = setTimeout(() => {
      timedOut = true;
      killAll();
    }, Math.max(1, opts.timeoutMs));
    // The upper is a host directory (it becomes a layer), so diskGb cannot be a filesystem limit
    // here; watching the host's free space bounds what a runaway step can write.
    const budgetBytes = opts.resources.diskGb * 1024 ** 3;
    const free = () => {
      const st = statfsSync(opts.upperDir);
      return st.bavail * st.bsize;
    };
    const freeAtStart = free();
    const diskWatch = setInterval(() => {
      if (freeAtStart - free() > budgetBytes) {
        clearInterval(diskWatch);
        opts.onOutput?.(`\nsandboxd: step stopped: it wrote more than its ${opts.resources.diskGb} GB disk allowance\n`);
        killAll();
      }
    }, DISK_WATCH_MS);
    const onAbort = () => {
      aborted = true;
      killAll();
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    for (const s of [child.stdout!, child.stderr!]) {
      s.setEncoding('utf8');
      s.on('data', (chunk: string) => opts.onOutput?.(chunk));
    }
    child.on('error', (err) => {
      clearTimeout(timer);
      clearInterval(diskWatch);
      opts.signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      clearInterval(diskWatch);
      opts.signal?.removeEventListener('abort', onAbort);
      const exitCode = code ?? 128 + (signal ? signalNumber(signal) : 0);
      resolvePromise({ exitCode, timedOut, aborted });
    });
  });
}

function signalNumber(sig: NodeJS.Signals): number {
  return ({ SIGKILL: 9, SIGTERM: 15, SIGINT: 2, SIGHUP: 1 } as Record<string, number>)[sig] ?? 0;
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error('step aborted');
}

/** Everything a step left if the daemon died during it. */
export async function cleanupStep(ctx: StepContext, id: string): Promise<void> {
  const n = stepNames(ctx, id);
  await ctx.crun.forceDelete(id).catch((err: unknown) => ctx.log(`step ${id}: ${String(err)}`));
  if (ctx.crun.exists(id)) await removeTree(join(ctx.crun.root, id));
  const layout = await ctx.layout();
  if (await cgroupExists(layout, n.cgroup)) await removeCgroup(layout, n.cgroup);
  await deleteNetns(n.netns);
  await waitVethGone(vethName(n.netns));
  let meta: StepMeta | undefined;
  try {
    meta = JSON.parse(await readFile(n.meta, 'utf8')) as StepMeta;
  } catch {
    /* no meta */
  }
  await unmountAllUnder(n.dir);
  if (meta?.workDir && basename(meta.workDir).includes('.work-')) await removeTree(meta.workDir);
  await removeTree(n.dir);
}

export async function cleanupStaleSteps(ctx: StepContext): Promise<void> {
  const ids = new Set(await ctx.crun.ids());
  try {
    for (const e of await readdir(join(ctx.dataDir, 'steps'))) ids.add(e);
  } catch {
    /* none */
  }
  for (const id of ids) {
    ctx.log(`removing leftovers of build step ${id}`);
    await cleanupStep(ctx, id);
  }
}
