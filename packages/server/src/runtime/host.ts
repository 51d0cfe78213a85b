import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { networkInterfaces } from 'node:os';
import { readMounts, type MountEntry } from './mounts.js';
import { cidrContains, gatewayIp, intToIp, type Subnet } from './net.js';
import { INSPECTED_PORTS, policyTransaction, type EgressPolicy } from './egress-policy.js';
import { procOk } from './proc.js';

/**
 * crun refuses hybrid cgroups ("drop all controllers from cgroupv2") when a controller is bound to
 * the v2 mount at /sys/fs/cgroup/unified (hugetlb, on this machine). Mounting a v1 hierarchy for
 * each such controller moves it there and leaves the v2 mount empty.
 *
 * A v1 hierarchy is the kernel's, not a mount namespace's: when another namespace made it (a node
 * in a mount namespace of its own, a pod, an earlier daemon's), it exists here without a mount,
 * the v2 mount is already empty, and crun (which follows /proc/self/cgroup) would make plain
 * directories on the tmpfs at /sys/fs/cgroup/<controller> that no one can remove (they hold a
 * `cgroup.procs` file it wrote). So every controller hierarchy the kernel has (those of
 * /proc/cgroups; named ones such as name=systemd are not there) is mounted here too.
 */
export async function fixHybridCgroups(log: (m: string) => void): Promise<void> {
  const unified = '/sys/fs/cgroup/unified/cgroup.controllers';
  const onV2 = existsSync(unified) ? (await readFile(unified, 'utf8')).trim().split(/\s+/).filter(Boolean) : [];
  const procCgroups = await readFile('/proc/cgroups', 'utf8').catch(() => '');
  for (const controllers of unmountedHierarchies(procCgroups, await readMounts(), onV2)) {
    const dir = `/sys/fs/cgroup/${controllers.join(',')}`;
    try {
      await mkdir(dir, { recursive: true });
      await procOk('mount', ['-t', 'cgroup', '-o', controllers.join(','), 'cgroup', dir]);
      log(`mounted the ${controllers.join(',')} cgroup v1 hierarchy at ${dir} (crun refuses hybrid mode, and follows every hierarchy)`);
    } catch (err) {
      // Without it crun refuses every container: a controller on the v2 mount is fatal. One
      // another namespace mounted (a read-only /sys/fs/cgroup, a user namespace) costs leftover
      // directories at worst, as before: said, and the daemon starts.
      if (controllers.some((c) => onV2.includes(c))) throw err;
      log(`cannot mount the ${controllers.join(',')} cgroup v1 hierarchy at ${dir} (${String(err)}); crun may leave directories of sandboxes there`);
    }
  }
}

/**
 * The controller sets to mount at /sys/fs/cgroup/<set> on a v1 host: each controller bound to the
 * v2 mount (`onV2`, alone), and each v1 hierarchy of /proc/cgroups (controllers sharing a
 * hierarchy id, together) of which no controller is mounted in this mount namespace.
 */
export function unmountedHierarchies(procCgroups: string, mounts: MountEntry[], onV2: string[]): string[][] {
  const mountedControllers = new Set(mounts.filter((m) => m.fsType === 'cgroup').flatMap((m) => m.superOptions.split(',')));
  const byHierarchy = new Map<number, string[]>();
  for (const line of procCgroups.split('\n')) {
    const [name, hierarchy, , enabled] = line.trim().split(/\s+/);
    if (!name || name.startsWith('#') || enabled !== '1') continue;
    const id = Number(hierarchy);
    if (!Number.isInteger(id) || id <= 0) continue;
    byHierarchy.set(id, [...(byHierarchy.get(id) ?? []), name]);
  }
  const out: string[][] = onV2.filter((c) => !mountedControllers.has(c)).map((c) => [c]);
  for (const controllers of byHierarchy.values()) {
    if (controllers.some((c) => mountedControllers.has(c) || onV2.includes(c))) continue;
    // In the kernel's order (as /proc/self/cgroup names a comounted hierarchy, and crun with it).
    out.push(controllers);
  }
  return out;
}

export async function enableIpForwarding(): Promise<void> {
  const f = '/proc/sys/net/ipv4/ip_forward';
  if ((await readFile(f, 'utf8')).trim() !== '1') await writeFile(f, '1');
}

/** The bridge every networked sandbox's veth joins; its ports are isolated from each other. */
export async function ensureBridge(bridge: string, subnet: Subnet): Promise<void> {
  const cmds: string[] = [];
  if (!existsSync(`/sys/class/net/${bridge}`)) cmds.push(`link add ${bridge} type bridge`);
  cmds.push(`addr replace ${gatewayIp(subnet)}/${subnet.prefix} dev ${bridge}`, `link set ${bridge} up`);
  await procOk('ip', ['-batch', '-'], { input: cmds.join('\n') + '\n' });
  await pinBridgeMac(bridge);
  // Sandboxes get IPv4 only; no link-local IPv6 path to the host either.
  const v6 = `/proc/sys/net/ipv6/conf/${bridge}/disable_ipv6`;
  if (existsSync(v6)) await writeFile(v6, '1').catch(() => undefined);
}

/**
 * A bridge whose MAC was never set takes the lowest MAC of its ports (all zeros with none), so a
 * sandbox coming or going (a warm pool drained at shutdown) changed the gateway's MAC under all
 * the others, whose ARP caches then pointed nowhere for half a minute. Setting it pins it: to
 * the address it has now, so that running sandboxes keep theirs, or, when that is no unicast
 * address (a bridge without ports), to one derived from the bridge's name.
 */
async function pinBridgeMac(bridge: string): Promise<void> {
  const NET_ADDR_SET = '3';
  const current = (await readFile(`/sys/class/net/${bridge}/address`, 'utf8')).trim();
  const pinned = (await readFile(`/sys/class/net/${bridge}/addr_assign_type`, 'utf8')).trim() === NET_ADDR_SET;
  if (pinned && isUnicastMac(current)) return;
  const mac = isUnicastMac(current) ? current : stableMac(bridge);
  await procOk('ip', ['link', 'set', 'dev', bridge, 'address', mac]);
}

export function isUnicastMac(mac: string): boolean {
  return /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/i.test(mac) && mac !== '00:00:00:00:00:00' && (parseInt(mac.slice(0, 2), 16) & 1) === 0;
}

/** Locally administered, unicast, the same for the same name. */
export function stableMac(name: string): string {
  const h = createHash('sha256').update(`sandboxd bridge ${name}`).digest();
  return ['02', ...[...h.subarray(0, 5)].map((b) => b.toString(16).padStart(2, '0'))].join(':');
}

export async function deleteBridge(bridge: string): Promise<void> {
  if (existsSync(`/sys/class/net/${bridge}`)) await procOk('ip', ['link', 'del', bridge]);
}

/** IPv4 nameservers of the host's /etc/resolv.conf (sandboxes get the same file). */
export async function hostResolvers(): Promise<string[]> {
  let text = '';
  try {
    text = await readFile('/etc/resolv.conf', 'utf8');
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const line of text.split('\n')) {
    const m = /^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/.exec(line);
    if (m) out.push(m[1]!);
  }
  return out;
}

export function hostIpv4Addresses(): string[] {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4') out.add(a.address);
  }
  return [...out].sort();
}

/**
 * IPv4 ranges no sandbox has business reaching: every entry of IANA's special-purpose address
 * registry (private, shared, loopback, link-local, documentation, benchmarking, reserved, and the
 * anycast services a sandbox never needs: PCP/TURN in 192.0.0.0/24, AS112, AMT, 6to4 relays),
 * multicast, and class E, which holds the limited broadcast 255.255.255.255. Kept disjoint: an
 * nftables interval set refuses overlapping elements.
 */
export const BLOCKED_RANGES: readonly string[] = [
  '0.0.0.0/8', // "this network"
  '10.0.0.0/8', // private
  '100.64.0.0/10', // shared address space (carrier-grade NAT)
  '127.0.0.0/8', // loopback (also a martian to the kernel)
  '169.254.0.0/16', // link-local: cloud metadata services
  '172.16.0.0/12', // private
  '192.0.0.0/24', // IETF protocol assignments: DS-Lite, PCP and TURN anycast, NAT64 discovery
  '192.0.2.0/24', // TEST-NET-1
  '192.31.196.0/24', // AS112 (sink for private reverse DNS zones)
  '192.52.193.0/24', // AMT relays
  '192.88.99.0/24', // 6to4 relay anycast (deprecated)
  '192.168.0.0/16', // private
  '192.175.48.0/24', // AS112 direct delegation
  '198.18.0.0/15', // benchmarking
  '198.51.100.0/24', // TEST-NET-2
  '203.0.113.0/24', // TEST-NET-3
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved (class E), limited broadcast
];

/** Ports of DNS (53) and of DNS over TLS and QUIC (853): sandboxes resolve through the host's resolver only. */
export const DNS_PORTS: readonly number[] = [53, 853];

export interface NftInput {
  table: string;
  bridge: string;
  subnet: Subnet;
  resolvers: string[];
  hostAddresses: string[];
  /** Exceptions to BLOCKED_RANGES set by the operator (an internal package mirror, a proxy): IPv4 CIDRs. */
  egressAllow?: string[];
  /** Narrower exceptions: one TCP port of one address (the host's own package mirror, say). */
  egressAllowEndpoints?: EgressEndpoint[];
  /** The egress proxy's veth (host end) and the mark that routes a connection to it (egress-proxy.ts). */
  proxyVeth: string;
  proxyMark: number;
  /** Sandboxes with an egress policy other than the default, set in the same transaction. */
  policies?: { ip: string; policy: EgressPolicy }[];
}

/** One TCP service a sandbox may reach even in a blocked range. */
export interface EgressEndpoint {
  address: string;
  port: number;
}

/**
 * The whole table, replaced atomically (nft applies one file as one transaction): sandboxes reach
 * the internet through NAT and nothing else; the host's resolver on port 53 is the one exception
 * for DNS, and the operator's egress exceptions are the only way into a blocked range. The order
 * matters: the DNS ports and the host's own addresses are closed before any exception applies.
 * Everything that is not IPv4 is dropped on both paths (forward and input), whatever the state of
 * IPv6 on the bridge.
 */
export function nftRuleset(n: NftInput): string {
  const br = JSON.stringify(n.bridge);
  const cidr = `${intToIp(n.subnet.base)}/${n.subnet.prefix}`;
  const set = (name: string, interval: boolean, elems: readonly string[]) =>
    `  set ${name} { type ipv4_addr;${interval ? ' flags interval; auto-merge;' : ''}${elems.length ? ` elements = { ${elems.join(', ')} }` : ''} }`;
  return [
    `table inet ${n.table} {}`,
    `delete table inet ${n.table}`,
    `table inet ${n.table} {`,
    set('blocked4', true, BLOCKED_RANGES),
    set('allow4', true, n.egressAllow ?? []),
    `  set allowsvc4 { type ipv4_addr . inet_service;${(n.egressAllowEndpoints ?? []).length ? ` elements = { ${n.egressAllowEndpoints!.map((e) => `${e.address} . ${e.port}`).join(', ')} }` : ''} }`,
    set('host4', false, n.hostAddresses),
    set('dns4', false, n.resolvers),
    // A sandbox with an egress policy: its address jumps to its own chain (egress-policy.ts).
    '  map policy4 { type ipv4_addr : verdict; }',
    // A sandbox with domain rules: its connections to the inspected ports go to the egress proxy.
    '  set inspect4 { type ipv4_addr; }',
    // A sandbox whose DNS is filtered: its queries to the resolver go to the DNS filter, the same way.
    '  set dnsf4 { type ipv4_addr; }',
    '  chain prerouting {',
    '    type filter hook prerouting priority mangle; policy accept;',
    `    iifname ${br} ip saddr @inspect4 tcp dport { ${INSPECTED_PORTS.join(', ')} } meta mark set ${n.proxyMark}`,
    `    iifname ${br} ip saddr @dnsf4 ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 meta mark set ${n.proxyMark}`,
    '  }',
    '  chain forward {',
    '    type filter hook forward priority filter; policy accept;',
    `    iifname ${br} oifname ${br} drop`,
    `    iifname ${br} meta nfproto != ipv4 drop`,
    `    iifname ${br} ip saddr != ${cidr} drop`,
    `    iifname ${br} ip saddr vmap @policy4`,
    `    iifname ${br} ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 accept`,
    // DNS over HTTPS on 443 cannot be told from other HTTPS; plain DNS, DoT and DoQ can.
    `    iifname ${br} meta l4proto { tcp, udp } th dport { ${DNS_PORTS.join(', ')} } drop`,
    // Refused at once (a reset, or ICMP "administratively prohibited"), never left to time out.
    `    iifname ${br} ip daddr @host4 meta l4proto tcp reject with tcp reset`,
    `    iifname ${br} ip daddr @host4 reject with icmpx type admin-prohibited`,
    `    iifname ${br} ip daddr @allow4 accept`,
    `    iifname ${br} ip daddr . tcp dport @allowsvc4 accept`,
    `    iifname ${br} ip daddr @blocked4 meta l4proto tcp reject with tcp reset`,
    `    iifname ${br} ip daddr @blocked4 reject with icmpx type admin-prohibited`,
    `    oifname ${br} ct state established,related accept`,
    `    oifname ${br} drop`,
    '  }',
    '  chain input {',
    '    type filter hook input priority filter; policy accept;',
    `    iifname ${br} ct state established,related accept`,
    `    iifname ${br} ip saddr vmap @policy4`,
    `    iifname ${br} ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 accept`,
    `    iifname ${br} drop`,
    '  }',
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    // Not towards the egress proxy: it must see the sandbox's own address.
    `    ip saddr ${cidr} oifname != { ${br}, ${JSON.stringify(n.proxyVeth)} } masquerade`,
    '  }',
    '}',
    '',
  ].join('\n') + (n.policies ?? []).map((e) => policyTransaction(n.table, e.ip, e.policy, n.proxyVeth)).join('');
}

/** The blocked range holding `ip`, unless an egress exception covers it; undefined when reachable. */
export function blockedRangeOf(ip: string, egressAllow: readonly string[] = []): string | undefined {
  if (egressAllow.some((c) => cidrContains(c, ip))) return undefined;
  return BLOCKED_RANGES.find((c) => cidrContains(c, ip));
}

export async function applyNftables(n: NftInput): Promise<void> {
  await procOk('nft', ['-f', '-'], { input: nftRuleset(n) });
}

export async function deleteNftTable(table: string): Promise<void> {
  await procOk('nft', ['-f', '-'], { input: `table inet ${table} {}\ndelete table inet ${table}\n` });
}
