import { readdirSync, readFileSync } from 'node:fs';

/**
 * The pid most recently given out in this pid namespace (the last field of /proc/loadavg): what
 * starts after this has a higher pid (until pids wrap around, which a cell does not live to see).
 */
export function lastPid(): number {
  try {
    return Number(readFileSync('/proc/loadavg', 'utf8').trim().split(/\s+/)[4]) || Infinity;
  } catch {
    return Infinity;
  }
}

/** Processes in process group `pgid` whose pid is above `after`. */
export function groupMembersAfter(pgid: number, after: number): number[] {
  const out: number[] = [];
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const name of names) {
    if (!/^\d+$/.test(name) || Number(name) <= after) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // Fields after the command (which may hold spaces and parentheses): state ppid pgrp ...
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[2]) === pgid) out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** Sends `sig` to `pid`, if it is still there. */
export function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}
