import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CLOCK_TICKS_PER_SECOND = 100;
const PAGE_BYTES = 4096;
const TICK_MS = 5;

interface Group {
  rel: string;
  dir: string;
  pids: Set<number>;
  /** utime+stime (µs) of each member as last read, and what members that exited had used. */
  cpuUsec: Map<number, { user: number; system: number }>;
  exitedUser: number;
  exitedSystem: number;
  memoryBytes: number;
  oomKills: number;
  localOomKills: number;
  frozen: boolean;
  /** Sent SIGKILL for memory and not gone yet: not killed twice. */
  dying: Set<number>;
}

/**
 * A FIXTURE, not a cgroup filesystem: a directory tree shaped like a cgroup v2 hierarchy, whose
 * interface files a loop keeps the way the kernel would, from real processes (read from /proc).
 * It stands in where a cgroup2 mount cannot: on a hybrid host the controllers (memory, pids) are
 * bound to v1, so a cgroup2 mount there has none. What it keeps:
 *  - cgroup.procs: the attached processes and whatever they fork (the kernel's inheritance);
 *  - cpu.stat usage_usec/user_usec/system_usec: their utime+stime, kept after they exit;
 *  - memory.current: their resident memory; memory.max enforced by SIGKILL of the largest one,
 *    counted as oom_kill in memory.events of the cgroup and of every ancestor below the root (v2
 *    propagation), and in the cgroup's own memory.events.local;
 *  - pids.current: their number;
 *  - cgroup.freeze: "1" stops them (SIGSTOP), "0" lets them go on (SIGCONT); cgroup.events
 *    `frozen` turns 1 once every one is stopped.
 * Each file is written only when its content changes, so inotify watchers see what they would on
 * cgroupfs. Not emulated: rmdir (a directory holding files cannot be removed), moving a process
 * between cgroups, threads, and ancestors' sums of cpu and memory (only oom_kill propagates).
 */
export class CgroupV2Fixture {
  readonly root: string;
  private readonly groups = new Map<string, Group>();
  private readonly written = new Map<string, string>();
  private timer?: NodeJS.Timeout;

  constructor() {
    this.root = mkdtempSync(join(tmpdir(), 'sbd-cgroup2-fixture-'));
    this.put(join(this.root, 'cgroup.controllers'), 'cpu memory pids\n');
    this.put(join(this.root, 'cgroup.subtree_control'), 'cpu memory pids\n');
    this.timer = setInterval(() => this.tick(), TICK_MS);
  }

  /** mkdir on cgroupfs: the directory (and its parents) with their interface files. */
  mkdir(rel: string): void {
    const clean = rel.replace(/^\/+|\/+$/g, '');
    const parts = clean.split('/');
    for (let i = 1; i <= parts.length; i++) {
      const r = parts.slice(0, i).join('/');
      if (this.groups.has(r)) continue;
      const dir = join(this.root, r);
      mkdirSync(dir, { recursive: true });
      const g: Group = {
        rel: r,
        dir,
        pids: new Set(),
        cpuUsec: new Map(),
        exitedUser: 0,
        exitedSystem: 0,
        memoryBytes: 0,
        oomKills: 0,
        localOomKills: 0,
        frozen: false,
        dying: new Set(),
      };
      this.groups.set(r, g);
      this.put(join(dir, 'cgroup.controllers'), 'cpu memory pids\n');
      this.put(join(dir, 'cgroup.subtree_control'), '');
      this.put(join(dir, 'cgroup.freeze'), '0\n');
      this.put(join(dir, 'memory.max'), 'max\n');
      this.put(join(dir, 'pids.max'), 'max\n');
      this.publish(g);
    }
  }

  /** What writing a pid to cgroup.procs does. */
  attach(rel: string, pid: number): void {
    const g = this.groups.get(rel.replace(/^\/+|\/+$/g, ''));
    if (!g) throw new Error(`fixture: no cgroup ${rel}`);
    g.pids.add(pid);
    this.tick();
  }

  /** Every process the fixture holds, as the kernel would list them. */
  pids(): number[] {
    return [...this.groups.values()].flatMap((g) => [...g.pids]);
  }

  /** SIGKILL to the processes of one cgroup (frozen ones too: they are continued after). */
  kill(rel: string): void {
    for (const pid of this.groups.get(rel.replace(/^\/+|\/+$/g, ''))?.pids ?? []) {
      signal(pid, 'SIGKILL');
      signal(pid, 'SIGCONT');
    }
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    for (const pid of this.pids()) {
      signal(pid, 'SIGKILL');
      signal(pid, 'SIGCONT');
    }
    rmSync(this.root, { recursive: true, force: true });
  }

  private tick(): void {
    if (!this.timer) return;
    for (const g of this.groups.values()) this.update(g);
    for (const g of this.groups.values()) this.publish(g);
  }

  private update(g: Group): void {
    for (const pid of [...g.pids]) for (const child of childrenOf(pid)) g.pids.add(child);
    const members: Array<{ pid: number; state: string; rssBytes: number }> = [];
    for (const pid of [...g.pids]) {
      const st = procStat(pid);
      const prev = g.cpuUsec.get(pid);
      if (!st || st.state === 'Z' || st.state === 'X') {
        // Exited: it leaves cgroup.procs, its cpu time stays in the cgroup's.
        g.pids.delete(pid);
        g.dying.delete(pid);
        g.cpuUsec.delete(pid);
        g.exitedUser += prev?.user ?? 0;
        g.exitedSystem += prev?.system ?? 0;
        continue;
      }
      g.cpuUsec.set(pid, { user: st.userUsec, system: st.systemUsec });
      members.push({ pid, state: st.state, rssBytes: st.rssBytes });
    }

    const wantFrozen = readOr(join(g.dir, 'cgroup.freeze'), '0').trim() === '1';
    for (const m of members) signal(m.pid, wantFrozen ? 'SIGSTOP' : 'SIGCONT');
    g.frozen = wantFrozen && members.every((m) => m.state === 'T' || m.state === 't');

    const max = readOr(join(g.dir, 'memory.max'), 'max').trim();
    g.memoryBytes = members.reduce((n, m) => n + m.rssBytes, 0);
    const alive = members.filter((m) => !g.dying.has(m.pid));
    if (max !== 'max' && g.memoryBytes > Number(max) && alive.length > 0) {
      const victim = alive.reduce((a, b) => (b.rssBytes > a.rssBytes ? b : a));
      g.dying.add(victim.pid);
      signal(victim.pid, 'SIGKILL');
      g.localOomKills++;
      for (let r = g.rel; r; r = r.includes('/') ? r.slice(0, r.lastIndexOf('/')) : '') this.groups.get(r)!.oomKills++;
    }
  }

  private publish(g: Group): void {
    let user = g.exitedUser;
    let system = g.exitedSystem;
    for (const u of g.cpuUsec.values()) {
      user += u.user;
      system += u.system;
    }
    const current = g.memoryBytes;
    const pids = [...g.pids].sort((a, b) => a - b);
    this.put(join(g.dir, 'cgroup.procs'), pids.map((p) => `${p}\n`).join(''));
    this.put(join(g.dir, 'cgroup.events'), `populated ${pids.length > 0 ? 1 : 0}\nfrozen ${g.frozen ? 1 : 0}\n`);
    this.put(join(g.dir, 'cpu.stat'), `usage_usec ${user + system}\nuser_usec ${user}\nsystem_usec ${system}\n`);
    this.put(join(g.dir, 'memory.current'), `${current}\n`);
    this.put(join(g.dir, 'memory.stat'), `anon ${current}\nfile 0\ninactive_file 0\n`);
    this.put(join(g.dir, 'pids.current'), `${pids.length}\n`);
    const events = (kills: number) => `low 0\nhigh 0\nmax ${kills}\noom ${kills}\noom_kill ${kills}\noom_group_kill 0\n`;
    this.put(join(g.dir, 'memory.events'), events(g.oomKills));
    this.put(join(g.dir, 'memory.events.local'), events(g.localOomKills));
  }

  private put(path: string, content: string): void {
    if (this.written.get(path) === content && existsSync(path)) return;
    writeFileSync(path, content);
    this.written.set(path, content);
  }
}

function readOr(path: string, fallback: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return fallback;
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    /* gone */
  }
}

function childrenOf(pid: number): number[] {
  return readOr(`/proc/${pid}/task/${pid}/children`, '')
    .split(/\s+/)
    .filter(Boolean)
    .map(Number);
}

/** /proc/<pid>/stat: state, utime and stime (fields 3, 14, 15), and resident pages from statm. */
function procStat(pid: number): { state: string; userUsec: number; systemUsec: number; rssBytes: number } | undefined {
  const text = readOr(`/proc/${pid}/stat`, '');
  // The command name may hold spaces and parentheses: fields are counted after the last ')'.
  const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
  if (!text || rest.length < 13) return undefined;
  const statm = readOr(`/proc/${pid}/statm`, '0 0').split(' ');
  const usec = (ticks: string) => (Number(ticks) * 1_000_000) / CLOCK_TICKS_PER_SECOND;
  return { state: rest[0]!, userUsec: usec(rest[11]!), systemUsec: usec(rest[12]!), rssBytes: Number(statm[1] ?? 0) * PAGE_BYTES };
}
