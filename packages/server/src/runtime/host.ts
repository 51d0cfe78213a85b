import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { networkInterfaces } from 'node:os';
import { readMounts } from './mounts.js';
import { gatewayIp, intToIp, type Subnet } from './net.js';
import { procOk } from './proc.js';

/**
 * crun refuses hybrid cgroups ("drop all controllers from cgroupv2") when a controller is bound to
 * the v2 mount at /sys/fs/cgroup/unified (hugetlb, on this machine). Mounting a v1 hierarchy for
 * each such controller moves it there and leaves the v2 mount empty.
 */
export async function fixHybridCgroups(log: (m: string) => void): Promise<void> {
  const unified = '/sys/fs/cgroup/unified/cgroup.controllers';
  if (!existsSync(unified)) return;
  const controllers = (await readFile(unified, 'utf8')).trim().split(/\s+/).filter(Boolean);
  if (controllers.length === 0) return;
  const mounted = new Set((await readMounts()).map((m) => m.mountPoint));
  for (const c of controllers) {
    const dir = `/sys/fs/cgroup/${c}`;
    if (mounted.has(dir)) continue;
    await mkdir(dir, { recursive: true });
    await procOk('mount', ['-t', 'cgroup', '-o', c, 'cgroup', dir]);
    log(`mounted the ${c} cgroup v1 hierarchy at ${dir} (crun refuses hybrid mode)`);
  }
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
  // Sandboxes get IPv4 only; no link-local IPv6 path to the host either.
  const v6 = `/proc/sys/net/ipv6/conf/${bridge}/disable_ipv6`;
  if (existsSync(v6)) await writeFile(v6, '1').catch(() => undefined);
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

export const BLOCKED_RANGES: readonly string[] = [
  '10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '169.254.0.0/16', '100.64.0.0/10', '192.0.2.0/24',
];

export interface NftInput {
  table: string;
  bridge: string;
  subnet: Subnet;
  resolvers: string[];
  hostAddresses: string[];
}

/**
 * The whole table, replaced atomically (nft applies one file as one transaction): sandboxes reach
 * the internet through NAT and nothing else; the host's resolver is the one exception, for DNS.
 */
export function nftRuleset(n: NftInput): string {
  const br = JSON.stringify(n.bridge);
  const cidr = `${intToIp(n.subnet.base)}/${n.subnet.prefix}`;
  const set = (name: string, interval: boolean, elems: string[]) =>
    `  set ${name} { type ipv4_addr;${interval ? ' flags interval;' : ''}${elems.length ? ` elements = { ${elems.join(', ')} }` : ''} }`;
  return [
    `table inet ${n.table} {}`,
    `delete table inet ${n.table}`,
    `table inet ${n.table} {`,
    set('blocked4', true, [...BLOCKED_RANGES]),
    set('host4', false, n.hostAddresses),
    set('dns4', false, n.resolvers),
    '  chain forward {',
    '    type filter hook forward priority filter; policy accept;',
    `    iifname ${br} oifname ${br} drop`,
    `    iifname ${br} meta nfproto ipv6 drop`,
    `    iifname ${br} ip saddr != ${cidr} drop`,
    `    iifname ${br} ip daddr @dns4 udp dport 53 accept`,
    `    iifname ${br} ip daddr @dns4 tcp dport 53 accept`,
    `    iifname ${br} ip daddr @host4 drop`,
    `    iifname ${br} ip daddr @blocked4 drop`,
    `    oifname ${br} ct state established,related accept`,
    `    oifname ${br} drop`,
    '  }',
    '  chain input {',
    '    type filter hook input priority filter; policy accept;',
    `    iifname ${br} ct state established,related accept`,
    `    iifname ${br} ip daddr @dns4 udp dport 53 accept`,
    `    iifname ${br} ip daddr @dns4 tcp dport 53 accept`,
    `    iifname ${br} drop`,
    '  }',
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    `    ip saddr ${cidr} oifname != ${br} masquerade`,
    '  }',
    '}',
    '',
  ].join('\n');
}

export async function applyNftables(n: NftInput): Promise<void> {
  await procOk('nft', ['-f', '-'], { input: nftRuleset(n) });
}

export async function deleteNftTable(table: string): Promise<void> {
  await procOk('nft', ['-f', '-'], { input: `table inet ${table} {}\ndelete table inet ${table}\n` });
}
