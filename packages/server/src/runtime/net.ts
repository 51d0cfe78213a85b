import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readlink, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { ID_RANGE } from './ids.js';
import { proc, procOk } from './proc.js';

export interface Subnet {
  /** Network address as an integer. */
  base: number;
  prefix: number;
  size: number;
}

export function ipToInt(ip: string): number {
  const parts = ip.split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) throw new Error(`bad IPv4 address ${ip}`);
  return ((parts[0]! << 24) >>> 0) + (parts[1]! << 16) + (parts[2]! << 8) + parts[3]!;
}

export function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** `a.b.c.d` or `a.b.c.d/n` as a network `a.b.c.d/n` (host bits cleared); throws on anything else. */
export function normalizeCidr(text: string): string {
  const m = /^(\d{1,3}(?:\.\d{1,3}){3})(?:\/(\d{1,2}))?$/.exec(text.trim());
  const prefix = m?.[2] === undefined ? 32 : Number(m[2]);
  if (!m || prefix > 32) throw new Error(`${text}: not an IPv4 address or CIDR`);
  const size = 2 ** (32 - prefix);
  return `${intToIp(ipToInt(m[1]!) - (ipToInt(m[1]!) % size))}/${prefix}`;
}

export function cidrContains(cidr: string, ip: string): boolean {
  const [net, p] = normalizeCidr(cidr).split('/');
  const size = 2 ** (32 - Number(p));
  return Math.floor(ipToInt(ip) / size) === Math.floor(ipToInt(net!) / size);
}

export function parseSubnet(cidr: string): Subnet {
  const [ip, p] = cidr.split('/');
  const prefix = Number(p);
  if (!ip || !Number.isInteger(prefix) || prefix < 8 || prefix > 29) throw new Error(`subnet ${cidr}: need an IPv4 CIDR with a prefix of 8..29`);
  const size = 2 ** (32 - prefix);
  const base = ipToInt(ip) - (ipToInt(ip) % size);
  return { base, prefix, size };
}

export function gatewayIp(s: Subnet): string {
  return intToIp(s.base + 1);
}

/**
 * Hands out sandbox addresses (network+2 .. broadcast-1; +1 is the bridge). Picks at random among
 * free ones so that an address freed a moment ago (conntrack entries, ARP caches) is rarely reused
 * at once. The caller persists each allocation with its sandbox and claims it again after a restart.
 */
export class Ipam {
  private readonly used = new Set<number>();

  constructor(readonly subnet: Subnet) {}

  claim(ip: string): void {
    const n = ipToInt(ip);
    if (n <= this.subnet.base + 1 || n >= this.subnet.base + this.subnet.size - 1) throw new Error(`${ip} is outside the sandbox subnet`);
    this.used.add(n);
  }

  isUsed(ip: string): boolean {
    return this.used.has(ipToInt(ip));
  }

  allocate(): string {
    const first = this.subnet.base + 2;
    const count = this.subnet.size - 3;
    if (this.used.size >= count) throw new Error('sandbox subnet exhausted');
    let n = first + Math.floor(Math.random() * count);
    while (this.used.has(n)) n = n + 1 >= first + count ? first : n + 1;
    this.used.add(n);
    return intToIp(n);
  }

  release(ip: string): void {
    this.used.delete(ipToInt(ip));
  }
}

/** Host-side veth name: IFNAMSIZ allows 15 characters; a hash of the netns name is unique enough. */
export function vethName(netnsName: string): string {
  return 'sb' + createHash('sha256').update(netnsName).digest('hex').slice(0, 13);
}

export interface NetPlan {
  netnsName: string;
  veth: string;
  bridge: string;
  ip: string;
  subnet: Subnet;
  /** Host id of root inside (the container joins this user namespace: same mapping as its config). */
  idBase: number;
}

/**
 * A user namespace (mapped like the container's) that owns a fresh network namespace, wired to the
 * bridge. The container joins both: a netns owned by the container's own user namespace lets crun
 * mount a fresh sysfs; with a netns owned by the host's user namespace crun falls back to binding
 * the host's /sys, which shows the host's and other sandboxes' interfaces and their traffic counters.
 *
 * The namespaces are made by a holder process: `unshare --user --net --keep-caps ip -batch -`. Its user
 * namespace is mapped by us (root writes /proc/<pid>/uid_map, no newuidmap), and since it created
 * the netns it may configure it, so it reads the in-namespace half of the setup from its stdin and
 * no second `ip` process is needed. It lives until crun has joined its user namespace.
 */
export class NetnsHolder {
  private exited: Promise<{ code: number | null; stderr: string }>;
  private stderr = '';

  private constructor(private readonly child: ChildProcess) {
    this.exited = new Promise((resolve) => {
      child.on('close', (code) => resolve({ code, stderr: this.stderr }));
      child.on('error', (err) => resolve({ code: -1, stderr: String(err) }));
    });
    child.stderr?.setEncoding('utf8').on('data', (c: string) => (this.stderr += c));
  }

  get pid(): number {
    return this.child.pid!;
  }

  get userNsPath(): string {
    return `/proc/${this.pid}/ns/user`;
  }

  static async start(plan: NetPlan): Promise<NetnsHolder> {
    // --keep-caps: the holder's uid (host root) is unmapped in its namespace, so exec would
    // otherwise drop the capabilities it needs to configure the netns.
    const child = spawn('unshare', ['--user', '--net', '--keep-caps', '--', 'ip', '-batch', '-'], {
      stdio: ['pipe', 'ignore', 'pipe'],
    });
    const holder = new NetnsHolder(child);
    try {
      await holder.waitUnshared();
      const map = `0 ${plan.idBase} ${ID_RANGE}\n`;
      await writeFile(`/proc/${holder.pid}/uid_map`, map);
      await writeFile(`/proc/${holder.pid}/gid_map`, map);
      const batch = [
        `netns attach ${plan.netnsName} ${holder.pid}`,
        `link add ${plan.veth} type veth peer name eth0 netns ${plan.netnsName}`,
        `link set ${plan.veth} master ${plan.bridge}`,
        `link set dev ${plan.veth} type bridge_slave isolated on`,
        `link set ${plan.veth} up`,
      ];
      const r = await proc('ip', ['-batch', '-'], { input: batch.join('\n') + '\n' });
      if (r.code !== 0) {
        // The netns may have been attached before the failing line.
        if (existsSync(`/run/netns/${plan.netnsName}`)) await proc('ip', ['netns', 'del', plan.netnsName]);
        throw new Error(`network setup for ${plan.netnsName}: ${r.stderr.trim() || `exit ${r.code}`}`);
      }
      const inner = [
        'link set lo up',
        `addr add ${plan.ip}/${plan.subnet.prefix} dev eth0`,
        'link set eth0 up',
        `route add default via ${gatewayIp(plan.subnet)}`,
      ];
      child.stdin!.write(inner.join('\n') + '\n');
      return holder;
    } catch (err) {
      await holder.kill();
      throw err;
    }
  }

  private async waitUnshared(): Promise<void> {
    const self = await readlink('/proc/self/ns/net');
    for (let i = 0; i < 2000; i++) {
      if (this.child.exitCode !== null || this.child.signalCode !== null) break;
      try {
        if ((await readlink(`/proc/${this.pid}/ns/net`)) !== self) return;
      } catch {
        break;
      }
      await sleep(i < 100 ? 0 : 1);
    }
    const r = await Promise.race([this.exited, sleep(100).then(() => undefined)]);
    throw new Error(`unshare did not create the namespaces${r ? `: ${r.stderr.trim()}` : ''}`);
  }

  /** Ends the holder after crun joined; fails if the in-namespace configuration failed. */
  async finish(): Promise<void> {
    this.child.stdin?.end();
    const r = await this.exited;
    if (r.code !== 0) throw new Error(`network configuration inside the namespace failed: ${r.stderr.trim() || `exit ${r.code}`}`);
  }

  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
    await this.exited;
  }
}

/** Deleting the netns also destroys the veth pair (the kernel does it; `ip link del` would block 25–50 ms). */
export async function deleteNetns(name: string): Promise<void> {
  if (!existsSync(`/run/netns/${name}`)) return;
  await procOk('ip', ['netns', 'del', name]);
}

/**
 * The kernel destroys a dead netns's veth asynchronously (20–50 ms here, RCU grace periods). Wait
 * for it, so that "destroyed" means gone and the same id can be created again at once; delete it
 * by hand if it lingers.
 */
export async function waitVethGone(veth: string, timeoutMs = 2000): Promise<void> {
  const path = `/sys/class/net/${veth}`;
  const deadline = Date.now() + timeoutMs;
  for (let i = 0; existsSync(path); i++) {
    if (Date.now() > deadline) {
      await proc('ip', ['link', 'del', veth]);
      return;
    }
    await sleep(i < 20 ? 2 : 20);
  }
}
