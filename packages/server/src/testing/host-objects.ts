// What sandboxes leave on a host, enumerated from the host itself (not from the runtime's own
// bookkeeping, which is what a leak check must not trust): containers, mounts, loop devices,
// network namespaces, veths, cgroups, host-wide id range claims, and for one daemon its data dir,
// gateway ports and process facts. The suite's leak check (scripts/leak-check.mjs), the churn test
// (e2e/src/churn.test.ts) and the soak benchmark (bench/src/soak.ts) count with this one module.
//
// Synchronous on purpose: leak-check.mjs is a plain script, and a count is taken while no load runs.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** stdout of a host tool, or '' when it fails or is missing (a host without netns has no `ip netns`). */
function sh(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
}

const lines = (text: string) => text.split('\n').filter(Boolean);

function dirNames(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** Ids of the containers in a crun state directory (`crun --root`). */
export function crunContainers(crunRoot: string): string[] {
  if (!existsSync(crunRoot)) return [];
  return lines(sh('crun', ['--root', crunRoot, 'list', '-q']));
}

export interface MountLine {
  /** As in /proc/self/mounts. */
  line: string;
  source: string;
  target: string;
}

/** /proc/self/mounts escapes space, tab, newline and backslash as octal. */
const unescapeMountField = (s: string) => s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));

export function mounts(): MountLine[] {
  return lines(readFileSync('/proc/self/mounts', 'utf8')).map((line) => {
    const [source = '', target = ''] = line.split(' ');
    return { line, source: unescapeMountField(source), target: unescapeMountField(target) };
  });
}

export interface LoopLine {
  /** As `losetup -a` prints it. */
  line: string;
  device: string;
  /** Without the " (deleted)" the kernel appends once the file is unlinked. */
  backing: string;
}

export function loopDevices(): LoopLine[] {
  return lines(sh('losetup', ['-a'])).map((line) => ({
    line,
    device: line.split(':')[0]!,
    backing: (/\((.*)\)\s*$/.exec(line)?.[1] ?? '').replace(/ \(deleted\)$/, ''),
  }));
}

/** Names of the named network namespaces (/run/netns). */
export function networkNamespaces(): string[] {
  return lines(sh('ip', ['netns', 'list'])).map((l) => l.split(' ')[0]!);
}

export interface VethLine {
  /** As `ip -o link show type veth` prints it. */
  line: string;
  name: string;
  /** The bridge it is a port of. */
  master: string | undefined;
  /** The named netns its peer is in, when ip knows it. */
  peerNetns: string | undefined;
}

export function veths(): VethLine[] {
  return lines(sh('ip', ['-o', 'link', 'show', 'type', 'veth'])).map((line) => ({
    line,
    name: line.split(': ')[1]!.split('@')[0]!,
    master: / master (\S+) /.exec(line)?.[1],
    peerNetns: / link-netns (\S+)/.exec(line)?.[1],
  }));
}

const CGROUP_ROOT = '/sys/fs/cgroup';

/** The roots of the cgroup hierarchies: one per controller set on v1, the one tree on v2. */
export function cgroupHierarchies(): string[] {
  if (existsSync(join(CGROUP_ROOT, 'cgroup.controllers'))) return [CGROUP_ROOT];
  return dirNames(CGROUP_ROOT)
    .map((h) => join(CGROUP_ROOT, h))
    .filter((d) => existsSync(join(d, 'cgroup.procs')));
}

/** Sub-cgroups (directories) of a cgroup directory. */
export function childCgroups(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch {
    return [];
  }
}

export interface IdRangeClaim {
  /** The file's name in the registry (the range's index). */
  key: string;
  dataDir: string;
  id: string;
}

/** The host-wide registry runtime/id-ranges.ts claims ranges in (tmpfs). */
export const ID_RANGE_REGISTRY = '/run/sandboxd/id-ranges';

/** Every readable claim of the registry (one being written is skipped: it is not a leftover yet). */
export function idRangeClaims(registry = ID_RANGE_REGISTRY): IdRangeClaim[] {
  const out: IdRangeClaim[] = [];
  for (const key of dirNames(registry)) {
    try {
      const j = JSON.parse(readFileSync(join(registry, key), 'utf8')) as Partial<IdRangeClaim>;
      if (typeof j.dataDir === 'string') out.push({ key, dataDir: j.dataDir, id: typeof j.id === 'string' ? j.id : '' });
    } catch {
      /* gone or half-written */
    }
  }
  return out;
}

/** Socket inodes a process holds open. */
function socketInodes(pid: number): Set<string> {
  const out = new Set<string>();
  for (const fd of dirNames(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) out.add(m[1]!);
    } catch {
      /* closed meanwhile */
    }
  }
  return out;
}

/**
 * Local TCP ports in LISTEN state in [min, max] (this network namespace, IPv4 and IPv6); only
 * those of process `pid` when given (other processes on the host may listen in the same range).
 */
export function listeningPorts(min: number, max: number, pid?: number): number[] {
  const mine = pid === undefined ? undefined : socketInodes(pid);
  const ports = new Set<number>();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const l of lines(text).slice(1)) {
      const f = l.trim().split(/\s+/);
      // st 0A is TCP_LISTEN; local_address is HEXADDR:HEXPORT.
      if (f[3] !== '0A' || (mine && !mine.has(f[9]!))) continue;
      const port = parseInt(f[1]!.split(':').pop()!, 16);
      if (port >= min && port <= max) ports.add(port);
    }
  }
  return [...ports].sort((a, b) => a - b);
}

export interface ProcessFacts {
  rssKiB: number;
  fds: number;
  threads: number;
  /** Live processes whose parent it is, or its spawner process is (tools it ran and did not reap would show here). */
  children: number;
}

/** Pids of a process's live children (every thread's). */
function childPids(pid: number): number[] {
  const out: number[] = [];
  for (const task of dirNames(`/proc/${pid}/task`)) {
    try {
      out.push(...readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').split(' ').filter(Boolean).map(Number));
    } catch {
      /* gone */
    }
  }
  return out;
}

const isSpawner = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('spawner-child.js');
  } catch {
    return false;
  }
};

export function processFacts(pid: number): ProcessFacts {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN);
  // The spawner process (runtime/spawner.ts) is the daemon's for good: what counts is what it runs.
  let children = 0;
  for (const child of childPids(pid)) children += isSpawner(child) ? childPids(child).length : 1;
  return { rssKiB: field('VmRSS'), fds: dirNames(`/proc/${pid}/fd`).length, threads: field('Threads'), children };
}

// ---- one daemon's objects ------------------------------------------------------------------------

/** The host-global names one daemon (or test runtime) uses; see config/ and CrunRuntime. */
export interface DaemonScope {
  dataDir: string;
  cgroupParent: string;
  /** CrunRuntime.netnsName(''). */
  netnsPrefix: string;
  bridge: string;
  /** Gateway port range (port mode). */
  gatewayPorts: { min: number; max: number };
  /** The daemon's pid: only its own listening sockets count as gateway ports. */
  pid?: number;
}

/**
 * Everything of one daemon that outlives a request, each item named by the sandbox it belongs to
 * (`owner`), so that what belongs to a live sandbox (one of the warm pool's) is told from what
 * belongs to none. Items of the daemon's spare disks (disk-pool/) are owned by 'disk-pool'; items no
 * sandbox can be told from (a port, a veth whose peer netns is gone) have no owner.
 */
export interface DaemonObjects {
  containers: OwnedItem[];
  mounts: OwnedItem[];
  loops: OwnedItem[];
  netns: OwnedItem[];
  veths: OwnedItem[];
  /** One item per sandbox cgroup and hierarchy (v1 has a dozen hierarchies). */
  cgroups: OwnedItem[];
  idRanges: OwnedItem[];
  /** Entries of sandboxes/, crun/, steps/, crun-steps/ and disk-pool/<size>/. */
  dataDirEntries: OwnedItem[];
  /** Files anywhere else in the data dir but the log and the database (agent runtime, keys, ...). */
  otherFiles: OwnedItem[];
  gatewayPorts: OwnedItem[];
}

export interface OwnedItem {
  what: string;
  owner: string | undefined;
}

export type ObjectKind = keyof DaemonObjects;
export const OBJECT_KINDS: ObjectKind[] = ['containers', 'mounts', 'loops', 'netns', 'veths', 'cgroups', 'idRanges', 'dataDirEntries', 'otherFiles', 'gatewayPorts'];

/** The sandbox id (or 'disk-pool') a path under the data dir belongs to. */
function ownerOfPath(dataDir: string, path: string): string | undefined {
  if (!path.startsWith(dataDir + '/')) return undefined;
  const [top, name] = path.slice(dataDir.length + 1).split('/');
  if (top === 'disk-pool') return 'disk-pool';
  if (top === 'sandboxes' || top === 'crun' || top === 'steps' || top === 'crun-steps') return name;
  return undefined;
}

/** Files below `dir`, recursively, as paths relative to `root`. */
function filesBelow(root: string, dir: string, skip: (rel: string) => boolean): string[] {
  const out: string[] = [];
  for (const name of dirNames(join(root, dir))) {
    const rel = dir ? `${dir}/${name}` : name;
    if (skip(rel)) continue;
    let isDir = false;
    try {
      isDir = statSync(join(root, rel)).isDirectory();
    } catch {
      continue;
    }
    if (isDir) out.push(...filesBelow(root, rel, skip));
    else out.push(rel);
  }
  return out;
}

const PER_SANDBOX_DIRS = ['sandboxes', 'crun', 'steps', 'crun-steps'];
/** Grow by design (the store keeps tombstones; the log is appended to), and are not per-sandbox objects. */
const GROWING_FILES = /^(daemon\.log|sandboxd\.db(-wal|-shm|-journal)?)$/;

export function daemonObjects(scope: DaemonScope): DaemonObjects {
  const { dataDir } = scope;
  const under = (p: string) => p.startsWith(dataDir + '/');
  const netnsOwner = (n: string | undefined) => (n?.startsWith(scope.netnsPrefix) ? n.slice(scope.netnsPrefix.length) : undefined);

  const cgroups: OwnedItem[] = [];
  for (const h of cgroupHierarchies()) {
    const parent = join(h, scope.cgroupParent);
    // The build steps' parent directory may stay (assertNoLeaks); a step leaf below it may not.
    for (const name of childCgroups(parent)) {
      if (name === '_steps') for (const step of childCgroups(join(parent, name))) cgroups.push({ what: join(parent, name, step), owner: step });
      else cgroups.push({ what: join(parent, name), owner: name });
    }
  }

  const dataDirEntries: OwnedItem[] = [];
  for (const d of PER_SANDBOX_DIRS) {
    for (const name of dirNames(join(dataDir, d))) dataDirEntries.push({ what: `${d}/${name}`, owner: name });
  }
  for (const size of dirNames(join(dataDir, 'disk-pool'))) {
    for (const name of dirNames(join(dataDir, 'disk-pool', size))) dataDirEntries.push({ what: `disk-pool/${size}/${name}`, owner: 'disk-pool' });
  }
  // disk-images/ holds one formatted image per disk size (a cache, like the layers).
  const skip = (rel: string) => PER_SANDBOX_DIRS.includes(rel) || rel === 'disk-pool' || rel === 'disk-images' || GROWING_FILES.test(rel);

  return {
    containers: crunContainers(join(dataDir, 'crun')).map((id) => ({ what: id, owner: id })),
    mounts: mounts()
      .filter((m) => under(m.target))
      .map((m) => ({ what: `${m.target} (${m.source})`, owner: ownerOfPath(dataDir, m.target) })),
    loops: loopDevices()
      .filter((l) => under(l.backing))
      .map((l) => ({ what: l.line, owner: ownerOfPath(dataDir, l.backing) })),
    netns: networkNamespaces()
      .filter((n) => n.startsWith(scope.netnsPrefix))
      .map((n) => ({ what: n, owner: netnsOwner(n) })),
    veths: veths()
      .filter((v) => v.master === scope.bridge)
      .map((v) => ({ what: `${v.name} (peer in ${v.peerNetns ?? 'an unnamed netns'})`, owner: netnsOwner(v.peerNetns) })),
    cgroups,
    idRanges: idRangeClaims()
      .filter((c) => c.dataDir === dataDir)
      .map((c) => ({ what: `${ID_RANGE_REGISTRY}/${c.key} (${c.id})`, owner: c.id })),
    dataDirEntries,
    otherFiles: filesBelow(dataDir, '', skip).map((f) => ({ what: f, owner: undefined })),
    gatewayPorts: listeningPorts(scope.gatewayPorts.min, scope.gatewayPorts.max, scope.pid).map((p) => ({ what: String(p), owner: undefined })),
  };
}
