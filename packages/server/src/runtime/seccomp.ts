/**
 * Our own OCI seccomp profile: allow by default, deny what a sandbox never needs and what widens
 * the kernel attack surface. Capabilities already block most of these (no CAP_SYS_ADMIN, ...);
 * the filter is the second wall and it also covers what capabilities do not (unshare of a user
 * namespace, io_uring, userfaultfd, keyrings).
 *
 * A denylist and not an allowlist: apt, dpkg, python, node, go and bash must keep working on every
 * future libc, and an allowlist fails them in ways that are slow to diagnose.
 *
 * Decisions:
 * - ptrace stays allowed (gdb, strace): since 4.8 a tracee stays under its own seccomp filter, and
 *   the pid namespace limits tracing to the sandbox's own processes. process_vm_writev is denied
 *   anyway (asked for; readv stays, it is no more than ptrace PEEK).
 * - The agent is out of reach of ptrace-mode access (ptrace, pidfd_getfd, process_vm_readv,
 *   /proc/<agent>/fd, mem, environ) because it runs non-dumpable (agent-runtime.ts: its loader is
 *   execute-only). pidfd_getfd, which would hand user code the agent's listening socket, is also
 *   denied here, as a second wall; pidfd_open stays (what a pidfd can do besides that, kill() can).
 * - clone3 answers ENOSYS, so glibc falls back to clone, whose flags a classic BPF filter can see.
 * - io_uring answers ENOSYS, so libuv and others fall back to threads (it could also make sockets
 *   of any family, IORING_OP_SOCKET, out of this filter's sight).
 * - Sockets: only AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (ip, getifaddrs) may be created, by
 *   socket() and socketpair(); every other family answers EAFNOSUPPORT, as on a kernel without it.
 *   AF_VSOCK above all: vsock ignores network namespaces and on a VM host reaches the hypervisor's
 *   services. AF_PACKET is also refused for lack of CAP_NET_RAW; AF_ALG (the kernel's crypto API)
 *   is a known source of kernel bugs and nothing a sandbox runs needs it. The kernel reads the
 *   family as an int (the low 32 bits of the register) while seccomp compares all 64, so the
 *   filter never matches an allowed family loosely: values 0..AF_NETLINK are compared exactly and
 *   anything greater, which includes every value with a high bit set, is refused.
 * - socketcall (the 32-bit x86 multiplexer, reachable from any x86-64 process through int 0x80)
 *   passes its arguments in memory, which seccomp cannot read, so it would bypass the family
 *   filter: it answers ENOSYS. 32-bit programs make sockets through the direct socket syscalls
 *   (Linux 4.3+) instead; one that only knows socketcall gets no sockets. Docker's profile decided
 *   the same.
 */

export interface OciSeccompArg {
  index: number;
  value: number;
  valueTwo?: number;
  op: 'SCMP_CMP_EQ' | 'SCMP_CMP_NE' | 'SCMP_CMP_MASKED_EQ' | 'SCMP_CMP_GT' | 'SCMP_CMP_LT';
}

export interface OciSeccompRule {
  names: string[];
  action: 'SCMP_ACT_ERRNO' | 'SCMP_ACT_ALLOW';
  errnoRet?: number;
  args?: OciSeccompArg[];
}

export interface OciSeccomp {
  defaultAction: 'SCMP_ACT_ALLOW' | 'SCMP_ACT_ERRNO';
  architectures: string[];
  syscalls: OciSeccompRule[];
}

const EPERM = 1;
const ENOSYS = 38;
const EAFNOSUPPORT = 97;

/** Denied outright with EPERM. Names unknown to an architecture are ignored by crun. */
export const DENIED_SYSCALLS: readonly string[] = [
  // mounts and namespaces
  'mount', 'umount', 'umount2', 'pivot_root', 'move_mount', 'open_tree', 'fsopen', 'fsmount', 'fsconfig', 'fspick',
  'mount_setattr', 'unshare', 'setns',
  // keyrings (not namespaced)
  'keyctl', 'add_key', 'request_key',
  // kernel attack surface
  'bpf', 'perf_event_open', 'userfaultfd', 'lookup_dcookie', 'uselib', 'nfsservctl', '_sysctl',
  'fanotify_init',
  // kernel and machine control
  'kexec_load', 'kexec_file_load', 'init_module', 'finit_module', 'delete_module', 'create_module',
  'get_kernel_syms', 'query_module', 'reboot', 'swapon', 'swapoff', 'acct', 'syslog', 'vhangup',
  'quotactl', 'quotactl_fd',
  // clock (host-wide)
  'settimeofday', 'stime', 'clock_settime', 'clock_settime64', 'adjtimex', 'clock_adjtime', 'clock_adjtime64',
  // file handles bypass the mount namespace
  'open_by_handle_at', 'name_to_handle_at',
  // raw hardware
  'iopl', 'ioperm', 'vm86', 'vm86old', 'pciconfig_read', 'pciconfig_write', 'pciconfig_iobase',
  // other processes' memory and file descriptors
  'process_vm_writev', 'pidfd_getfd',
];

/** Answered with ENOSYS so that callers fall back to an interface the filter can see. */
export const ENOSYS_SYSCALLS: readonly string[] = ['clone3', 'io_uring_setup', 'io_uring_enter', 'io_uring_register', 'socketcall'];

/** The address families a sandbox may make sockets of (same numbers on every Linux architecture). */
export const ALLOWED_SOCKET_FAMILIES: Readonly<Record<string, number>> = {
  AF_UNIX: 1,
  AF_INET: 2,
  AF_INET6: 10,
  AF_NETLINK: 16,
};

/** clone() flags that create namespaces (CLONE_NEWTIME is unshare/clone3-only, covered above). */
export const CLONE_NAMESPACE_FLAGS: Readonly<Record<string, number>> = {
  CLONE_NEWNS: 0x00020000,
  CLONE_NEWCGROUP: 0x02000000,
  CLONE_NEWUTS: 0x04000000,
  CLONE_NEWIPC: 0x08000000,
  CLONE_NEWUSER: 0x10000000,
  CLONE_NEWPID: 0x20000000,
  CLONE_NEWNET: 0x40000000,
};

/**
 * personality() flags that weaken ASLR or memory protections. Each rule also requires bit 31 to be
 * clear so that the query form personality(0xffffffff) keeps working.
 */
export const DANGEROUS_PERSONALITY_FLAGS: Readonly<Record<string, number>> = {
  ADDR_NO_RANDOMIZE: 0x0040000,
  FDPIC_FUNCPTRS: 0x0080000,
  MMAP_PAGE_ZERO: 0x0100000,
  ADDR_COMPAT_LAYOUT: 0x0200000,
  READ_IMPLIES_EXEC: 0x0400000,
  ADDR_LIMIT_32BIT: 0x0800000,
  ADDR_LIMIT_3GB: 0x8000000,
};
const PERSONALITY_QUERY_BIT = 0x80000000;

function architectures(arch: string): string[] {
  switch (arch) {
    case 'x64':
      return ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'];
    case 'arm64':
      return ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'];
    default:
      return [];
  }
}

export function seccompProfile(arch: string = process.arch): OciSeccomp {
  // One rule per flag: crun ORs conditions on the same argument, and "any of these bits set" is
  // an OR of masked equalities.
  const cloneRules: OciSeccompRule[] = Object.values(CLONE_NAMESPACE_FLAGS).map((flag) => ({
    names: ['clone'],
    action: 'SCMP_ACT_ERRNO',
    errnoRet: EPERM,
    args: [{ index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }],
  }));
  const personalityRules: OciSeccompRule[] = Object.values(DANGEROUS_PERSONALITY_FLAGS).map((flag) => ({
    names: ['personality'],
    action: 'SCMP_ACT_ERRNO',
    errnoRet: EPERM,
    // `+`, not `|`: JavaScript's bitwise operators would make the mask a negative int32.
    args: [{ index: 0, value: flag + PERSONALITY_QUERY_BIT, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }],
  }));
  return {
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: architectures(arch),
    syscalls: [
      { names: [...DENIED_SYSCALLS], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      { names: [...ENOSYS_SYSCALLS], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
      ...cloneRules,
      ...personalityRules,
      ...socketFamilyRules(),
    ],
  };
}

/**
 * A default-allow filter cannot say "deny unless one of these", and crun ORs conditions on the
 * same argument, so the complement is spelled out: one rule per refused family below the highest
 * allowed one (64-bit equality: exact), and one for everything above it (64-bit greater-than: it
 * also catches 2^32 + AF_INET, which the kernel would read as AF_INET).
 */
function socketFamilyRules(): OciSeccompRule[] {
  const allowed = new Set(Object.values(ALLOWED_SOCKET_FAMILIES));
  const highest = Math.max(...allowed);
  const deny = (arg: OciSeccompArg): OciSeccompRule => ({
    names: ['socket', 'socketpair'],
    action: 'SCMP_ACT_ERRNO',
    errnoRet: EAFNOSUPPORT,
    args: [arg],
  });
  const rules: OciSeccompRule[] = [];
  for (let family = 0; family < highest; family++) {
    if (!allowed.has(family)) rules.push(deny({ index: 0, value: family, op: 'SCMP_CMP_EQ' }));
  }
  rules.push(deny({ index: 0, value: highest, op: 'SCMP_CMP_GT' }));
  return rules;
}
