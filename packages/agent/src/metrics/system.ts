import { readdir, readFile, statfs } from 'node:fs/promises';
import { availableParallelism } from 'node:os';

/**
 * The sandbox's own cpu, memory and disk, as seen from inside. The sandbox's cgroup files are
 * normally masked (/sys/fs/cgroup), and /proc/meminfo and /proc/stat describe the host, so:
 * - cgroup files are used when they are readable (v2, then v1);
 * - otherwise cpu and memory are summed over the sandbox's own processes (its pid namespace shows
 *   only those): cpu = utime+stime+cutime+cstime of every live process (reaped children count in
 *   their parent), memory = private resident pages plus what tmpfs mounts hold;
 * - disk comes from statfs of the root filesystem, which reports the sandbox's own disk.
 */
export interface SystemSnapshot {
  cpu: { usage_percent: number; cores: number; usage_seconds: number; source: string };
  memory: { total: number; used: number; free: number; usage_percent: number; source: string };
  disk: { total: number; used: number; free: number; usage_percent: number; path: string };
}

const CLOCK_TICKS_PER_S = 100; // USER_HZ: 100 on every Linux ABI Node runs on
const PAGE_BYTES = 4096;

interface CpuSample {
  seconds: number;
  at: number;
}

async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch {
    return null;
  }
}

async function pids(): Promise<string[]> {
  try {
    return (await readdir('/proc')).filter((n) => n.charCodeAt(0) >= 48 && n.charCodeAt(0) <= 57);
  } catch {
    return [];
  }
}

async function cgroupCpuSeconds(): Promise<number | null> {
  const v2 = await readText('/sys/fs/cgroup/cpu.stat');
  const m = v2 ? /usage_usec (\d+)/.exec(v2) : null;
  if (m) return Number(m[1]) / 1e6;
  const v1 = (await readText('/sys/fs/cgroup/cpuacct/cpuacct.usage')) ?? (await readText('/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage'));
  return v1 ? Number(v1.trim()) / 1e9 : null;
}

async function processCpuSeconds(list: string[]): Promise<number> {
  let ticks = 0;
  await Promise.all(
    list.map(async (pid) => {
      const stat = await readText(`/proc/${pid}/stat`);
      if (!stat) return;
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // after "pid (comm) ": state=0 ... utime=11 stime=12 cutime=13 cstime=14
      ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    }),
  );
  return ticks / CLOCK_TICKS_PER_S;
}

async function cgroupMemory(): Promise<{ used: number; limit: number | null } | null> {
  const cur = await readText('/sys/fs/cgroup/memory.current');
  if (cur) {
    const max = await readText('/sys/fs/cgroup/memory.max');
    return { used: Number(cur.trim()), limit: max && /^\d+/.test(max) ? Number(max.trim()) : null };
  }
  const v1 = await readText('/sys/fs/cgroup/memory/memory.usage_in_bytes');
  if (v1) {
    const lim = await readText('/sys/fs/cgroup/memory/memory.limit_in_bytes');
    const limit = lim ? Number(lim.trim()) : null;
    return { used: Number(v1.trim()), limit: limit !== null && limit < 2 ** 60 ? limit : null };
  }
  return null;
}

async function processMemoryBytes(list: string[]): Promise<number> {
  let pages = 0;
  await Promise.all(
    list.map(async (pid) => {
      const statm = await readText(`/proc/${pid}/statm`);
      if (!statm) return;
      const [, resident, shared] = statm.split(' ').map(Number);
      pages += Math.max(0, (resident ?? 0) - (shared ?? 0));
    }),
  );
  let tmpfs = 0;
  for (const mount of ['/tmp', '/dev/shm']) {
    try {
      const s = await statfs(mount);
      if (s.type === 0x01021994) tmpfs += (s.blocks - s.bfree) * s.bsize; // TMPFS_MAGIC: RAM-backed
    } catch {
      // not mounted here
    }
  }
  return pages * PAGE_BYTES + tmpfs;
}

function pct(part: number, whole: number): number {
  return whole > 0 ? Math.round((part / whole) * 10000) / 100 : 0;
}

export class SystemStats {
  private last: CpuSample | null = null;
  private lastPercent = 0;

  constructor(private readonly limits: { vcpu?: number; memoryMb?: number; diskMb?: number }) {}

  async processCount(): Promise<number> {
    return (await pids()).length;
  }

  async snapshot(): Promise<SystemSnapshot> {
    const list = await pids();
    const cores = this.limits.vcpu ?? availableParallelism();
    let cpuSource = 'cgroup';
    const sample = async (): Promise<CpuSample> => {
      let seconds = await cgroupCpuSeconds();
      if (seconds === null) {
        cpuSource = 'processes';
        seconds = await processCpuSeconds(await pids());
      }
      return { seconds, at: performance.now() };
    };
    let now = await sample();
    if (!this.last) {
      // First call: measure over a short window instead of since boot.
      this.last = now;
      await new Promise((r) => setTimeout(r, 100));
      now = await sample();
    }
    if (now.at - this.last.at >= 50) {
      const busy = Math.max(0, now.seconds - this.last.seconds);
      this.lastPercent = Math.min(100, pct(busy, ((now.at - this.last.at) / 1000) * cores));
      this.last = now;
    }

    const cg = await cgroupMemory();
    const used = cg ? cg.used : await processMemoryBytes(list);
    const total = this.limits.memoryMb ? this.limits.memoryMb * 1024 * 1024 : (cg?.limit ?? 0);

    let disk = { total: 0, used: 0, free: 0, usage_percent: 0, path: '/' };
    try {
      const s = await statfs('/');
      const dtotal = s.blocks * s.bsize;
      const dused = (s.blocks - s.bfree) * s.bsize;
      disk = { total: dtotal, used: dused, free: s.bavail * s.bsize, usage_percent: pct(dused, dtotal), path: '/' };
    } catch {
      // leave zeros
    }

    return {
      cpu: { usage_percent: this.lastPercent, cores, usage_seconds: Math.round(now.seconds * 100) / 100, source: cpuSource },
      memory: { total, used, free: total > 0 ? Math.max(0, total - used) : 0, usage_percent: pct(used, total), source: cg ? 'cgroup' : 'processes' },
      disk,
    };
  }
}
