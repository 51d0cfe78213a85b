// A network namespace for a test node, as a machine of its own on the cluster's private network:
// its own address on a veth link to the host, a default route through the host (which forwards and
// masquerades its traffic out), and a mount namespace of its own whose /sys shows that network
// namespace's interfaces (the runtime reads /sys/class/net) while keeping the host's cgroup mounts.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Where the namespaces' links take their /30s: the third octet is the slot. No other test uses
 * 10.92/16 (daemons take 10.100–10.199 by slot, root tests 10.93–10.99, the resolver is 10.255).
 */
export const NODE_NETNS_RANGE = '10.92.0.0/16';

/** Persisted mount namespaces (bind mounts of nsfs), one private directory per namespace. */
const MNT_DIR = '/run/sandboxd-test-netns';

export interface NodeNetns {
  slot: number;
  /** `sbdn<slot>`: the runtime's own namespaces are `<cgroup parent>_<id>` (`sandboxd-test<slot>_…`). */
  name: string;
  /** The node's address inside; it listens there. */
  address: string;
  /** The host's end of the link: the node reaches the host's services (PostgreSQL) there. */
  hostAddress: string;
  /** The host's end of the veth pair (the end inside is `eth0`). */
  hostVeth: string;
  /** An argv prefix that runs a command in the namespace (network and mount) with the caller's cwd. */
  exec: string[];
}

function run(cmd: string, args: string[], input?: string): string {
  const r = spawnSync(cmd, args, { input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim()}`);
  return r.stdout;
}

const tryRun = (cmd: string, args: string[]) => spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;

/** Mount points of this (the host's) mount namespace. */
function mountPoints(): Set<string> {
  return new Set(readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4]!).filter(Boolean));
}

export function netnsNames(slot: number) {
  const name = `sbdn${slot}`;
  return {
    name,
    hostVeth: `${name}h`,
    hostAddress: `10.92.${slot}.1`,
    address: `10.92.${slot}.2`,
    table: name,
    mntDir: join(MNT_DIR, name),
  };
}

/**
 * Makes slot `slot`'s namespace, removing first what a test process that died left of it (the slot
 * is ours now). On any failure, whatever was made is removed before the error is thrown.
 */
export function openNodeNetns(slot: number, runtimeNetnsPrefix: string): NodeNetns {
  if (!Number.isInteger(slot) || slot < 0 || slot > 255) throw new Error(`slot ${slot} does not fit the third octet`);
  const n = netnsNames(slot);
  closeNodeNetns(slot, runtimeNetnsPrefix);
  try {
    run('ip', ['netns', 'add', n.name]);
    run('ip', ['-batch', '-'], [
      `link add ${n.hostVeth} type veth peer name eth0 netns ${n.name}`,
      `addr add ${n.hostAddress}/30 dev ${n.hostVeth}`,
      `link set ${n.hostVeth} up`,
      '',
    ].join('\n'));
    run('ip', ['-n', n.name, '-batch', '-'], [
      'link set lo up',
      `addr add ${n.address}/30 dev eth0`,
      'link set eth0 up',
      `route add default via ${n.hostAddress}`,
      '',
    ].join('\n'));
    // The host forwards for its own daemons already; a host that does not gets it on (and keeps it:
    // other daemons' sandboxes may depend on it by then).
    if (readFileSync('/proc/sys/net/ipv4/ip_forward', 'utf8').trim() !== '1') writeFileSync('/proc/sys/net/ipv4/ip_forward', '1');
    // Out of the host with the host's address; between the namespaces (and to the host) with its own.
    run('nft', ['-f', '-'], [
      `table ip ${n.table} {`,
      '  chain postrouting {',
      '    type nat hook postrouting priority srcnat; policy accept;',
      `    ip saddr ${n.address} ip daddr != ${NODE_NETNS_RANGE} masquerade`,
      '  }',
      '}',
      '',
    ].join('\n'));
    // A mount namespace kept by a bind mount (on a private mount: unshare refuses a shared one), so
    // that a restarted node finds its sandboxes' mounts, and the clean-up runs where they are.
    mkdirSync(join(n.mntDir, 'cg'), { recursive: true });
    run('mount', ['--bind', n.mntDir, n.mntDir]);
    run('mount', ['--make-private', n.mntDir]);
    writeFileSync(join(n.mntDir, 'mnt'), '');
    const cg = join(n.mntDir, 'cg');
    run('nsenter', [`--net=/run/netns/${n.name}`, 'unshare', `--mount=${join(n.mntDir, 'mnt')}`, '--propagation', 'private', 'sh', '-ec',
      // sysfs shows the interfaces of the namespace of whoever mounts it; the cgroup hierarchies
      // under the old /sys are carried over to the new one.
      `mount --rbind /sys/fs/cgroup ${cg}; umount -l /sys; mount -t sysfs sysfs /sys; mount --move ${cg} /sys/fs/cgroup`]);
  } catch (err) {
    closeNodeNetns(slot, runtimeNetnsPrefix);
    throw err;
  }
  return {
    slot,
    name: n.name,
    address: n.address,
    hostAddress: n.hostAddress,
    hostVeth: n.hostVeth,
    exec: ['nsenter', `--net=/run/netns/${n.name}`, `--mount=${join(n.mntDir, 'mnt')}`, `--wd=${process.cwd()}`, '--'],
  };
}

/**
 * Removes everything slot `slot`'s namespace holds, if anything: processes still inside it (the
 * node's: it was stopped before), the mount namespace (with the mounts the node made there), the
 * host's rule, the namespace (with the link, the node's bridge and tables), and the entries the
 * node's sandboxes left in /run/netns (mount points only inside its mount namespace, plain files
 * here). Idempotent; the runtime's own leftovers must be destroyed before, from inside.
 */
export function closeNodeNetns(slot: number, runtimeNetnsPrefix: string): void {
  const n = netnsNames(slot);
  const errors: string[] = [];
  const step = (what: string, fn: () => void) => {
    try {
      fn();
    } catch (err) {
      errors.push(`${what}: ${(err as Error).message}`);
    }
  };
  if (existsSync(`/run/netns/${n.name}`)) {
    step('ending the processes left inside', () => {
      for (const pid of run('ip', ['netns', 'pids', n.name]).split('\n').filter(Boolean).map(Number)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          /* gone */
        }
      }
    });
  }
  const mounts = mountPoints();
  if (mounts.has(join(n.mntDir, 'mnt'))) step('the mount namespace', () => run('umount', [join(n.mntDir, 'mnt')]));
  if (mounts.has(n.mntDir)) step('its directory', () => run('umount', [n.mntDir]));
  step('its directory', () => rmSync(n.mntDir, { recursive: true, force: true }));
  if (tryRun('nft', ['list', 'table', 'ip', n.table])) step('the masquerade rule', () => run('nft', ['delete', 'table', 'ip', n.table]));
  if (existsSync(`/run/netns/${n.name}`)) step('the namespace', () => run('ip', ['netns', 'del', n.name]));
  // The kernel removes a dead namespace's veth pair asynchronously.
  for (const deadline = Date.now() + 5000; existsSync(`/sys/class/net/${n.hostVeth}`); ) {
    if (Date.now() > deadline) {
      step('the link', () => run('ip', ['link', 'del', n.hostVeth]));
      break;
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
  }
  const here = mountPoints();
  for (const e of existsSync('/run/netns') ? readdirSync('/run/netns') : []) {
    const path = `/run/netns/${e}`;
    if (e.startsWith(runtimeNetnsPrefix) && !here.has(path)) step(path, () => rmSync(path, { force: true }));
  }
  // Checked here, while the slot is still ours: once it is released another daemon's are not leftovers.
  const left = netnsLeftovers(slot, runtimeNetnsPrefix);
  if (left.length > 0) errors.push(`left: ${left.join(', ')}`);
  if (errors.length > 0) throw new Error(`removing network namespace ${n.name}: ${errors.join('; ')}`);
}

/** What of slot `slot`'s namespace is still on the host (empty when all is gone). */
function netnsLeftovers(slot: number, runtimeNetnsPrefix: string): string[] {
  const n = netnsNames(slot);
  const out: string[] = [];
  if (existsSync(`/run/netns/${n.name}`)) out.push(`netns ${n.name}`);
  if (existsSync(`/sys/class/net/${n.hostVeth}`)) out.push(`link ${n.hostVeth}`);
  if (tryRun('nft', ['list', 'table', 'ip', n.table])) out.push(`nft table ip ${n.table}`);
  if (existsSync(n.mntDir)) out.push(n.mntDir);
  // A namespaced node's sandboxes' entries are mount points in its mount namespace only; one that
  // is mounted here is a namespace of a loopback daemon that had this slot before (not ours).
  const mounted = mountPoints();
  for (const e of existsSync('/run/netns') ? readdirSync('/run/netns') : []) {
    if (e.startsWith(runtimeNetnsPrefix) && !mounted.has(`/run/netns/${e}`)) out.push(`/run/netns/${e}`);
  }
  return out;
}
