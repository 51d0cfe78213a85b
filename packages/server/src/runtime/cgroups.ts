import { readFile, readdir, rmdir, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { readMounts, type MountEntry } from './mounts.js';

/**
 * The host's cgroup layout. v1 (this machine): one hierarchy per controller (cpu and cpuacct
 * separate here), each getting `<parent>/<id>` from crun. v2: one tree. Detected once from the
 * mount table, so the rest of the runtime only asks "which directories belong to this path".
 */
export type CgroupLayout =
  | { version: 1; hierarchies: Array<{ mountPoint: string; controllers: string[] }> }
  | { version: 2; root: string };

/** Mount options of a v1 hierarchy that name no controller. */
const V1_MOUNT_FLAGS = new Set(['rw', 'ro', 'relatime', 'noatime', 'nosuid', 'nodev', 'noexec', 'xattr', 'noprefix', 'clone_children', 'cpuset_v2_mode', 'favordynmods']);

/**
 * Unified (v2) when a cgroup2 filesystem is mounted at /sys/fs/cgroup itself; otherwise v1, where
 * each `cgroup` mount is one hierarchy whose controllers are its mount options (`name=systemd`
 * included: crun makes directories there too). A hybrid host's cgroup2 mount beside them (e.g.
 * /sys/fs/cgroup/unified) is kept as a hierarchy without controllers, for the same reason.
 * `mounts` defaults to this process's mount table.
 */
export async function detectCgroups(mounts?: MountEntry[]): Promise<CgroupLayout> {
  mounts ??= await readMounts();
  const v2root = mounts.find((m) => m.fsType === 'cgroup2' && m.mountPoint === '/sys/fs/cgroup');
  if (v2root) return { version: 2, root: v2root.mountPoint };
  const hierarchies = mounts
    .filter((m) => m.fsType === 'cgroup' || m.fsType === 'cgroup2')
    .map((m) => ({
      mountPoint: m.mountPoint,
      controllers:
        m.fsType === 'cgroup2' ? [] : m.superOptions.split(',').filter((o) => o && !V1_MOUNT_FLAGS.has(o) && !o.startsWith('release_agent=')),
    }));
  return { version: 1, hierarchies };
}

/** Absolute directories of a cgroup path (e.g. "/sandboxd/abc") in every hierarchy. */
export function cgroupDirs(layout: CgroupLayout, rel: string): string[] {
  const clean = rel.replace(/^\/+/, '');
  if (layout.version === 2) return [`${layout.root}/${clean}`];
  return layout.hierarchies.map((h) => `${h.mountPoint}/${clean}`);
}

function controllerDir(layout: CgroupLayout, controller: string, rel: string): string | undefined {
  const clean = rel.replace(/^\/+/, '');
  if (layout.version === 2) return `${layout.root}/${clean}`;
  const h = layout.hierarchies.find((x) => x.controllers.includes(controller));
  return h ? `${h.mountPoint}/${clean}` : undefined;
}

async function readText(path: string | undefined): Promise<string | undefined> {
  if (!path) return undefined;
  try {
    return await readFile(path, 'utf8');
  } catch {
    return undefined;
  }
}

/** The value of `key` in a "key value" per line file (memory.events, cpu.stat, /proc/vmstat). */
export function keyed(text: string | undefined, key: string): number | undefined {
  if (!text) return undefined;
  for (const line of text.split('\n')) {
    const [k, v] = line.trim().split(/\s+/);
    if (k === key && v !== undefined) return Number(v);
  }
  return undefined;
}

function num(text: string | undefined): number {
  if (text === undefined) return 0;
  const t = text.trim();
  if (t === 'max') return Number.MAX_SAFE_INTEGER;
  const n = Number(t);
  return Number.isFinite(n) ? n : 0;
}

/**
 * The file counting a cgroup's OOM kills: memory.oom_control on v1 (this cgroup's own victims
 * only: v1 does not propagate memory events to the parent), memory.events on v2 (the cgroup and
 * everything below it; the kernel notifies inotify watchers of the file when it changes).
 */
export function oomCounterFile(layout: CgroupLayout, rel: string): string | undefined {
  const dir = controllerDir(layout, 'memory', rel);
  if (!dir) return undefined;
  return layout.version === 1 ? `${dir}/memory.oom_control` : `${dir}/memory.events`;
}

/** Processes of the cgroup killed for lack of memory so far; undefined when it does not exist. */
export async function readOomKills(layout: CgroupLayout, rel: string): Promise<number | undefined> {
  return keyed(await readText(oomCounterFile(layout, rel)), 'oom_kill');
}

export interface CgroupStats {
  cpuUsageNs: number;
  memoryBytes: number;
  memoryLimitBytes: number;
  oomKills: number;
  pids: number;
}

/**
 * memoryBytes is the working set: usage minus inactive file cache (what `docker stats` and the
 * kubelet report), so reading a large file does not look like a leak.
 */
export async function readCgroupStats(layout: CgroupLayout, rel: string): Promise<CgroupStats> {
  if (layout.version === 2) {
    const d = controllerDir(layout, 'cpu', rel)!;
    const [cpuStat, mem, memMax, events, memStat, pids] = await Promise.all([
      readText(`${d}/cpu.stat`),
      readText(`${d}/memory.current`),
      readText(`${d}/memory.max`),
      readText(`${d}/memory.events`),
      readText(`${d}/memory.stat`),
      readText(`${d}/pids.current`),
    ]);
    return {
      cpuUsageNs: (keyed(cpuStat, 'usage_usec') ?? 0) * 1000,
      memoryBytes: Math.max(0, num(mem) - (keyed(memStat, 'inactive_file') ?? 0)),
      memoryLimitBytes: num(memMax),
      oomKills: keyed(events, 'oom_kill') ?? 0,
      pids: num(pids),
    };
  }
  const mem = controllerDir(layout, 'memory', rel);
  const [cpu, usage, limit, oom, memStat, pids] = await Promise.all([
    readText(`${controllerDir(layout, 'cpuacct', rel)}/cpuacct.usage`),
    readText(`${mem}/memory.usage_in_bytes`),
    readText(`${mem}/memory.limit_in_bytes`),
    readText(`${mem}/memory.oom_control`),
    readText(`${mem}/memory.stat`),
    readText(`${controllerDir(layout, 'pids', rel)}/pids.current`),
  ]);
  return {
    cpuUsageNs: num(cpu),
    memoryBytes: Math.max(0, num(usage) - (keyed(memStat, 'total_inactive_file') ?? 0)),
    memoryLimitBytes: num(limit),
    oomKills: keyed(oom, 'oom_kill') ?? 0,
    pids: num(pids),
  };
}

/** The processes in a cgroup itself (not its children), from its `cgroup.procs`; none if it has none. */
export async function cgroupPids(layout: CgroupLayout, rel: string): Promise<number[]> {
  const dir = controllerDir(layout, 'pids', rel) ?? cgroupDirs(layout, rel)[0];
  const text = await readText(dir && `${dir}/cgroup.procs`);
  return (text ?? '')
    .split('\n')
    .map(Number)
    .filter((n) => Number.isSafeInteger(n) && n > 0);
}

/** Names of the child cgroups of `parentRel`, in any hierarchy. */
export async function childCgroups(layout: CgroupLayout, parentRel: string): Promise<string[]> {
  const names = new Set<string>();
  await Promise.all(
    cgroupDirs(layout, parentRel).map(async (d) => {
      try {
        for (const e of await readdir(d, { withFileTypes: true })) if (e.isDirectory()) names.add(e.name);
      } catch {
        /* hierarchy without this parent */
      }
    }),
  );
  return [...names].sort();
}

export async function cgroupExists(layout: CgroupLayout, rel: string): Promise<boolean> {
  return cgroupDirs(layout, rel).some((d) => existsSync(d));
}

/**
 * Kills whatever still runs in a cgroup and removes its directory (and children) everywhere. Used
 * when crun lost track of a container (crash, corrupted state); normally `crun delete` does this.
 */
export async function removeCgroup(layout: CgroupLayout, rel: string): Promise<void> {
  const dirs = cgroupDirs(layout, rel).filter((d) => existsSync(d));
  if (dirs.length === 0) return;
  const freezer = layout.version === 1 ? controllerDir(layout, 'freezer', rel) : undefined;
  for (let attempt = 0; attempt < 50; attempt++) {
    // v2 (kernel 5.14+): one write kills the whole subtree, frozen tasks and ones forked meanwhile
    // included; the per-pid kills below remain for older kernels.
    if (layout.version === 2) await writeFile(`${dirs[0]}/cgroup.kill`, '1').catch(() => undefined);
    const left: string[] = [];
    for (const top of dirs) {
      for (const d of await subtreeDeepestFirst(top)) {
        const procs = (await readText(`${d}/cgroup.procs`)) ?? '';
        for (const pid of procs.split('\n').filter(Boolean)) {
          try {
            process.kill(Number(pid), 'SIGKILL');
          } catch {
            /* gone */
          }
        }
        try {
          await rmdir(d);
        } catch {
          left.push(d);
        }
      }
    }
    if (left.length === 0) return;
    // Frozen tasks cannot die; thaw them so the SIGKILL lands.
    if (freezer && existsSync(`${freezer}/freezer.state`)) await writeFile(`${freezer}/freezer.state`, 'THAWED').catch(() => undefined);
    if (layout.version === 2) await writeFile(`${dirs[0]}/cgroup.freeze`, '0').catch(() => undefined);
    await sleep(attempt < 10 ? 5 : 50);
  }
  throw new Error(`cannot remove cgroup ${rel}: processes do not exit`);
}

async function subtreeDeepestFirst(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string) => {
    let entries;
    try {
      entries = await readdir(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) if (e.isDirectory()) await walk(`${d}/${e.name}`);
    out.push(d);
  };
  await walk(dir);
  return out;
}

/**
 * Freezes or thaws a cgroup directly (what `crun pause/resume` do, without a process spawn: the
 * difference is most of a pause's latency). Returns undefined when the cgroup has no freezer or
 * no processes, i.e. the container is not running.
 */
export async function setFrozen(layout: CgroupLayout, rel: string, frozen: boolean, timeoutMs = 5000): Promise<boolean | undefined> {
  const v1 = layout.version === 1;
  const dir = controllerDir(layout, 'freezer', rel);
  if (!dir) return undefined;
  const stateFile = v1 ? `${dir}/freezer.state` : `${dir}/cgroup.freeze`;
  const procs = await readText(`${dir}/cgroup.procs`);
  if (procs === undefined || procs.trim() === '') return undefined;
  const want = v1 ? (frozen ? 'FROZEN' : 'THAWED') : frozen ? '1' : '0';
  const isDone = async () =>
    v1 ? (await readText(stateFile))?.trim() === want : keyed(await readText(`${dir}/cgroup.events`), 'frozen') === (frozen ? 1 : 0);
  const deadline = Date.now() + timeoutMs;
  for (let i = 0; ; i++) {
    // v1 may stay FREEZING while a task is in an uninterruptible sleep; writing again retries.
    await writeFile(stateFile, want);
    if (await isDone()) return true;
    if (Date.now() > deadline) {
      if (frozen) await writeFile(stateFile, v1 ? 'THAWED' : '0').catch(() => undefined);
      throw new Error(`cgroup ${rel} did not ${frozen ? 'freeze' : 'thaw'} within ${timeoutMs} ms`);
    }
    await sleep(i < 20 ? 1 : 10);
  }
}

/** true: frozen, false: running, undefined: no such running cgroup. */
export async function isFrozen(layout: CgroupLayout, rel: string): Promise<boolean | undefined> {
  const dir = controllerDir(layout, 'freezer', rel);
  if (!dir) return undefined;
  const procs = await readText(`${dir}/cgroup.procs`);
  if (procs === undefined || procs.trim() === '') return undefined;
  if (layout.version === 1) return (await readText(`${dir}/freezer.state`))?.trim() !== 'THAWED';
  return keyed(await readText(`${dir}/cgroup.events`), 'frozen') === 1;
}

/** The normal CPU weight (cgroup v2 cpu.weight's default; v1's cpu.shares default 1024 is the same share). */
export const NORMAL_CPU_WEIGHT = 100;

/** cgroup v1 cpu.shares of a v2 cpu.weight: the same proportion of the default (100 ↔ 1024), at least 2. */
export function sharesOfWeight(weight: number): number {
  return Math.max(2, Math.round((weight * 1024) / NORMAL_CPU_WEIGHT));
}

export function checkCpuWeight(weight: number): void {
  if (!Number.isInteger(weight) || weight < 1 || weight > 10_000) throw new Error(`cpu weight must be an integer from 1 to 10000, got ${weight}`);
}

/** The file that holds a cgroup's CPU weight, and the value `weight` is written as. */
export function cpuWeightFile(layout: CgroupLayout, rel: string, weight: number): { file: string; value: string } | undefined {
  const dir = controllerDir(layout, 'cpu', rel);
  if (!dir) return undefined;
  return layout.version === 2 ? { file: `${dir}/cpu.weight`, value: String(weight) } : { file: `${dir}/cpu.shares`, value: String(sharesOfWeight(weight)) };
}

/**
 * Writes a running cgroup's CPU weight. false when the cgroup (or its cpu controller) is not
 * there: the container does not run.
 */
export async function writeCpuWeight(layout: CgroupLayout, rel: string, weight: number): Promise<boolean> {
  checkCpuWeight(weight);
  const w = cpuWeightFile(layout, rel, weight);
  if (!w || !existsSync(w.file)) return false;
  await writeFile(w.file, w.value);
  return true;
}

/** A running cgroup's CPU weight, on v2's scale; undefined when it is not there. */
export async function readCpuWeight(layout: CgroupLayout, rel: string): Promise<number | undefined> {
  const w = cpuWeightFile(layout, rel, NORMAL_CPU_WEIGHT);
  const text = await readText(w?.file);
  if (text === undefined) return undefined;
  const n = Number(text.trim());
  return layout.version === 2 ? n : (n * NORMAL_CPU_WEIGHT) / 1024;
}
