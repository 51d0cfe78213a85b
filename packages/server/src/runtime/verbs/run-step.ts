import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, chown, lchown, mkdir, readFile, readdir, rmdir, stat, writeFile } from 'node:fs/promises';
import { basename, isAbsolute, join, resolve } from 'node:path';
import { ServiceError } from '@sandboxd/protocol';
import { assembleContainer } from '../assemble.js';
import { lstatBeneath, rmdirBeneath, unlinkEmptyFileBeneath } from '../beneath.js';
import { cgroupDirs, cgroupExists, removeCgroup } from '../cgroups.js';
import { checkLowerDirs, createDiskImage, mountDiskImage, mountOverlay, removeTree, unmount, unmountDisk } from '../disk.js';
import { layerIdOffset } from '../idmap.js';
import { CANONICAL_ID_OFFSET } from '../ids.js';
import { deleteNetns, vethName, waitVethGone } from '../net.js';
import { HOST_CA_BUNDLE } from '../oci.js';
import { procOk } from '../proc.js';
import type { StepRunOptions } from '../types.js';
import { UndoStack } from '../undo.js';
import type { StepContext } from '../context.js';

/** Written by steps of earlier versions, whose work dir was beside the layer (cleanupStep reads it). */
interface StepMeta {
  upperDir: string;
  workDir?: string;
}

const STEP_DIR_MODE = 0o710;

function stepNames(ctx: StepContext, id: string) {
  const dir = join(ctx.dataDir, 'steps', id);
  return {
    dir,
    rootfs: join(dir, 'rootfs'),
    lowerScratch: join(dir, 'lower'),
    config: join(dir, 'config.json'),
    meta: join(dir, 'meta.json'),
    /** The step's own disk: it writes to disk/upper, which is copied into the layer afterwards. */
    image: join(dir, 'disk.img'),
    disk: join(dir, 'disk'),
    upper: join(dir, 'disk', 'upper'),
    work: join(dir, 'disk', 'work'),
    netns: `${ctx.netnsPrefix}step_${id}`,
    cgroup: `/${ctx.cgroupParent}/_steps/${id}`,
  };
}

/**
 * True when a lower has the path (whiteouts aside: good enough for a bind target). Layers made by
 * steps hold what tenants wrote, so no symlink in them is followed.
 */
async function inLowers(lowerDirs: string[], path: string): Promise<boolean> {
  for (const l of lowerDirs) if (await lstatBeneath(l, path)) return true;
  return false;
}

/**
 * One build step in a throwaway container with the same isolation as a sandbox (user namespace,
 * seccomp, capabilities, cgroup limits, own netns), on overlay(lowerDirs + an upper on a disk of
 * its own). The disk is an ext4 image of the step's diskGb, as for sandboxes: a step that writes
 * more gets ENOSPC inside, and no other tenant's work is measured against it. When the step has
 * ended and its container is gone, the upper is copied into upperDir (cp -a: links stay links,
 * whiteouts, xattrs, ownership and sparseness are kept) and the disk is removed. Its files are in
 * canonical ownership because root in the container is host uid CANONICAL_ID_OFFSET: the copy can
 * be used as a layer as it is. Unlike a sandbox, a step runs as that shared range (its lowers,
 * canonical already, are mounted directly); it runs only template build commands.
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
  const undo = new UndoStack(ctx.log);
  try {
    await mkdir(join(ctx.dataDir, 'steps'), { recursive: true, mode: 0o711 });
    await mkdir(n.dir, { mode: STEP_DIR_MODE });
    undo.push('step directory', () => removeTree(n.dir));
    // Like a sandbox's directory: crun (the step's root, inside its user namespace) may traverse it
    // to the rootfs, no host user may (the image's setuid files would run as its root's host uid).
    await chown(n.dir, 0, CANONICAL_ID_OFFSET);
    await chmod(n.dir, STEP_DIR_MODE);
    await writeFile(n.meta, JSON.stringify({ upperDir: upper } satisfies StepMeta));

    await createDiskImage(n.image, Math.round(opts.resources.diskGb * 1024 ** 3));
    await mkdir(n.disk, { mode: 0o700 });
    await mountDiskImage(n.image, n.disk);
    undo.push('step disk', async () => {
      await unmountDisk(n.disk, n.image, n.disk);
    });
    await mkdir(n.upper);
    await mkdir(n.work);
    // The upper's root becomes the layer's root directory: give it the attributes of the image's root.
    const rootAttrs = await stat(opts.lowerDirs[0]!);
    const rootOffset = await layerIdOffset(opts.lowerDirs[0]!);
    await lchown(n.upper, rootAttrs.uid - rootOffset + CANONICAL_ID_OFFSET, rootAttrs.gid - rootOffset + CANONICAL_ID_OFFSET);
    await chmod(n.upper, rootAttrs.mode & 0o7777);
    const targets = await missingTargets(opts.lowerDirs, n.upper, ['/.sb/init', ...(opts.binds ?? []).map((b) => b.target)]);
    const holder = await assembleContainer({
      undo,
      configPath: n.config,
      rootfs: n.rootfs,
      prepareRootfs: async () => {
        await mkdir(n.rootfs);
        // Canonical lowers are mounted directly; only layers still at the legacy offset get idmapped.
        await mountOverlay(opts.lowerDirs, n.upper, n.work, n.rootfs, {
          helper: await ctx.idmapHelper(),
          base: CANONICAL_ID_OFFSET,
          scratch: n.lowerScratch,
        });
        undo.push('overlay mount', () => unmount(n.rootfs));
      },
      process: async () => ({ argv: opts.argv, env: opts.env, cwd: opts.cwd, binds: opts.binds ?? [] }),
      hostname: 'build',
      cgroupsPath: n.cgroup,
      resources: opts.resources,
      idBase: CANONICAL_ID_OFFSET,
      // Only over a bundle the image has: a bind would make an empty file in the layer, and a
      // read-only bind would break an `apt-get install ca-certificates` in this very step.
      caBundle: () => inLowers(opts.lowerDirs, HOST_CA_BUNDLE),
      cgroupVersion: async () => (await ctx.layout()).version,
      network: opts.internetAccess
        ? {
            netnsName: n.netns,
            bridge: ctx.bridge,
            subnet: ctx.subnet,
            address: async () => {
              const ipam = await ctx.ipam();
              const ip = ipam.allocate();
              undo.push('address', () => ipam.release(ip));
              return ip;
            },
          }
        : undefined,
    });

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
    {
      // The step's processes are gone with its container: nothing writes the upper any more.
      await ctx.crun.forceDelete(opts.id);
      await unmount(n.rootfs);
      await dropTargets(n.upper, targets);
      await mkdir(upper, { recursive: true });
      await procOk('cp', ['-a', '-T', '--', n.upper, upper]);
    }
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
      const inUpper = (await lstatBeneath(upper, rel)) !== undefined;
      if (!(await inLowers(lowerDirs, rel)) && !inUpper) {
        created.push(rel);
      } else if (!inUpper && i < parts.length) {
        parents.push(rel); // copied up when crun creates something below it
      }
    }
  }
  return { created, parents };
}

/**
 * ...and removes them afterwards, deepest first, only while they are still empty. The step wrote
 * this upper: a name on the way may now be a symlink to a host path, which is never followed.
 */
async function dropTargets(upper: string, m: { created: string[]; parents: string[] }): Promise<void> {
  const all = [...new Set([...m.created, ...m.parents])].sort((a, b) => b.split('/').length - a.split('/').length);
  for (const rel of all) {
    if (await rmdirBeneath(upper, rel)) continue;
    if (m.created.includes(rel)) await unlinkEmptyFileBeneath(upper, rel);
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
      opts.signal?.removeEventListener('abort', onAbort);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
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
  await unmountDisk(n.dir, n.image, n.disk);
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
