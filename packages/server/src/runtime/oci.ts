import { sharesOfWeight } from './cgroups.js';
import { ID_RANGE } from './ids.js';
import type { SandboxResources } from './types.js';
import { seccompProfile, type OciSeccomp } from './seccomp.js';

/** The subset of the OCI runtime spec we write. */
export interface OciMount {
  destination: string;
  type: string;
  source: string;
  options?: string[];
}

export interface OciConfig {
  ociVersion: string;
  process: {
    terminal: boolean;
    user: { uid: number; gid: number };
    args: string[];
    env: string[];
    cwd: string;
    capabilities: Record<'bounding' | 'effective' | 'permitted' | 'inheritable' | 'ambient', string[]>;
    rlimits: Array<{ type: string; hard: number; soft: number }>;
    noNewPrivileges: boolean;
    oomScoreAdj?: number;
  };
  root: { path: string; readonly: boolean };
  hostname: string;
  mounts: OciMount[];
  linux: {
    uidMappings: Array<{ containerID: number; hostID: number; size: number }>;
    gidMappings: Array<{ containerID: number; hostID: number; size: number }>;
    namespaces: Array<{ type: string; path?: string }>;
    cgroupsPath: string;
    resources: Record<string, unknown>;
    sysctl: Record<string, string>;
    seccomp: OciSeccomp;
    maskedPaths: string[];
    readonlyPaths: string[];
  };
}

/**
 * Docker's default capability set minus CAP_NET_RAW (CapEff a80405fb), as Podman does. With raw
 * sockets a sandbox could forge ARP replies and frames on the shared bridge and so take over
 * another sandbox's address (its NAT replies would come to the forger). ping keeps working through
 * ICMP datagram sockets (PING_GROUP_RANGE below).
 */
export const DEFAULT_CAPABILITIES: readonly string[] = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FSETID', 'CAP_FOWNER', 'CAP_MKNOD', 'CAP_SETGID',
  'CAP_SETUID', 'CAP_SETFCAP', 'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_KILL',
  'CAP_AUDIT_WRITE',
];
/** Every mapped group may open ICMP datagram sockets (ping without CAP_NET_RAW). */
export const PING_GROUP_RANGE = `0 ${ID_RANGE - 1}`;

/** What `crun spec` masks, plus the cgroup tree (the host's hierarchy would be visible otherwise). */
export const MASKED_PATHS: readonly string[] = [
  '/proc/acpi', '/proc/asound', '/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list',
  '/proc/timer_stats', '/proc/sched_debug', '/sys/firmware', '/proc/scsi', '/sys/fs/cgroup',
];
export const READONLY_PATHS: readonly string[] = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];

/** CAP_SYS_RESOURCE is missing from the host's bounding set and the hard limit there is 20000. */
export const NOFILE_LIMIT = 16384;
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
export const CPU_PERIOD_US = 100000;
const MIB = 1024 * 1024;
/**
 * Socket buffers (TCP and UDP) one sandbox may hold. cgroup v1 charges them to no memory limit
 * unless this is set (memory.kmem.tcp.limit_in_bytes, which also turns the accounting on): before,
 * one sandbox with 512 MB filled 150 loopback TCP pairs and held 570 MB of the host's global TCP
 * memory (tcp_mem; past its hard limit every TCP socket of the host, the API's included, stalls),
 * and 1500 UDP sockets held 264 MB of udp_mem. cgroup v2 charges sockets to memory.max anyway.
 */
export const SOCKET_BUFFER_LIMIT_BYTES = 64 * MIB;

/** Host files every container sees read-only. */
export const HOST_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';
export const HOST_RESOLV_CONF = '/etc/resolv.conf';

export interface ConfigInput {
  args: string[];
  env: Record<string, string>;
  cwd: string;
  hostname: string;
  /** Relative to the bundle directory, or absolute. */
  rootfs: string;
  cgroupsPath: string;
  resources: SandboxResources;
  /** `/run/netns/<name>` to join, or undefined for a fresh namespace with loopback only. */
  netnsPath?: string;
  /** A user namespace to join (it owns netnsPath; already mapped like uidMappings). */
  userNsPath?: string;
  /**
   * Host uid and gid of root inside (ids 0..ID_RANGE-1 map to idBase onwards): a sandbox's own range
   * (id-ranges.ts), or CANONICAL_ID_OFFSET for a build step, whose files become a layer.
   */
  idBase: number;
  /** Read-only bind mounts (host path → container path), e.g. the init, node runtime, agent. */
  roBinds: Array<{ source: string; target: string }>;
  /** Bind the host CA bundle over the image's (HTTPS through the host's intercepting proxy). */
  caBundle: boolean;
  /** A sandbox's volumes (runtime/volumes.ts): after the kernel's filesystems, before the runtime's binds. */
  extraMounts?: OciMount[];
  /**
   * The host's cgroup version. v1 charges socket buffers to no limit unless kernelTCP is set; v2
   * charges them to memory.max, and crun refuses kernelTCP there ("cannot set kernel TCP with cgroupv2").
   */
  cgroupVersion: 1 | 2;
}

export function envList(env: Record<string, string>): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(env)) {
    if (k === '' || k.includes('=') || k.includes('\0') || v.includes('\0')) {
      throw new Error(`invalid environment variable name or value: ${JSON.stringify(k)}`);
    }
    out.push(`${k}=${v}`);
  }
  if (!('PATH' in env)) out.push(`PATH=${DEFAULT_PATH}`);
  return out;
}

function bind(source: string, target: string, ro: boolean): OciMount {
  return { destination: target, type: 'bind', source, options: ['rbind', ro ? 'ro' : 'rw', 'nosuid', 'nodev'] };
}

export function buildConfig(input: ConfigInput): OciConfig {
  const { resources } = input;
  const memoryBytes = Math.max(16, Math.floor(resources.memoryMb)) * MIB;
  const caps = [...DEFAULT_CAPABILITIES];
  const mounts: OciMount[] = [
    { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
    { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
    {
      destination: '/dev/pts',
      type: 'devpts',
      source: 'devpts',
      options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'],
    },
    { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
    { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
    { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
    // Charged to the sandbox's memory cgroup, so the memory limit bounds it.
    { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777'] },
    bind(HOST_RESOLV_CONF, '/etc/resolv.conf', true),
  ];
  if (input.caBundle) mounts.push(bind(HOST_CA_BUNDLE, HOST_CA_BUNDLE, true));
  // Before the runtime's own binds: crun resolves a destination inside the rootfs, so a volume
  // path that is a symlink the sandbox left (a snapshot's files) can land on /.sb at worst, and
  // the runtime's binds then cover it.
  mounts.push(...(input.extraMounts ?? []));
  for (const b of input.roBinds) mounts.push(bind(b.source, b.target, true));

  const namespaces: Array<{ type: string; path?: string }> = [
    { type: 'pid' },
    { type: 'ipc' },
    { type: 'uts' },
    { type: 'mount' },
    { type: 'cgroup' },
    input.userNsPath ? { type: 'user', path: input.userNsPath } : { type: 'user' },
    input.netnsPath ? { type: 'network', path: input.netnsPath } : { type: 'network' },
  ];
  const idMap = [{ containerID: 0, hostID: input.idBase, size: ID_RANGE }];

  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: input.args,
      env: envList(input.env),
      cwd: input.cwd,
      capabilities: { bounding: caps, effective: caps, permitted: caps, inheritable: [], ambient: [] },
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: NOFILE_LIMIT, soft: NOFILE_LIMIT }],
      noNewPrivileges: true,
    },
    root: { path: input.rootfs, readonly: false },
    hostname: input.hostname,
    mounts,
    linux: {
      uidMappings: idMap,
      gidMappings: idMap,
      namespaces,
      cgroupsPath: input.cgroupsPath,
      resources: {
        devices: [{ allow: false, access: 'rwm' }],
        // swap = limit: memory+swap may not exceed the limit, so the sandbox never swaps.
        memory: {
          limit: memoryBytes,
          swap: memoryBytes,
          ...(input.cgroupVersion === 1 ? { kernelTCP: Math.min(SOCKET_BUFFER_LIMIT_BYTES, memoryBytes) } : {}),
        },
        cpu: {
          quota: Math.max(1000, Math.round(resources.vcpu * CPU_PERIOD_US)),
          period: CPU_PERIOD_US,
          // v1 takes shares; v2 takes the weight as it is (crun's own conversion of shares is coarse).
          ...(resources.cpuWeight !== undefined && input.cgroupVersion === 1 ? { shares: sharesOfWeight(resources.cpuWeight) } : {}),
        },
        ...(resources.cpuWeight !== undefined && input.cgroupVersion === 2 ? { unified: { 'cpu.weight': String(resources.cpuWeight) } } : {}),
        pids: { limit: Math.max(8, Math.floor(resources.pidsMax)) },
      },
      sysctl: { 'net.ipv4.ping_group_range': PING_GROUP_RANGE },
      seccomp: seccompProfile(),
      maskedPaths: [...MASKED_PATHS],
      readonlyPaths: [...READONLY_PATHS],
    },
  };
}
