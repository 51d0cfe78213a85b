import { createHash } from 'node:crypto';
import { DnsFilter } from './dns-filter.js';
import { filtersDns, hasDomainRules, isRestricted, policyObjects, policyRemoval, policyTransaction, usesProxy, type EgressPolicy } from './egress-policy.js';
import { EgressProxy } from './egress-proxy.js';
import { intToIp, type Subnet } from './net.js';
import { proc, procOk } from './proc.js';

export interface EgressStateOptions {
  bridge: string;
  subnet: Subnet;
  nftTable: string;
  /** The proxy's network namespace (a name `list()` never takes for a sandbox's). */
  proxyNetns: string;
  resolve?: (name: string) => Promise<string[]>;
  log: (msg: string) => void;
}

/**
 * The egress policies of one runtime's sandboxes as the host enforces them: nftables rules per
 * address (one transaction per change), the proxy that inspects names for domain rules, and the
 * counts of refusals. What is on each sandbox's disk (net.json) is the record; this is its copy in
 * force, rebuilt by setupHost.
 */
export class EgressState {
  readonly proxy: EgressProxy;
  readonly dns: DnsFilter;
  /** The host's resolvers (IPv4): the DNS filter listens on their addresses (set by setupHost). */
  resolvers: string[] = [];
  /** The host end of the egress proxy's veth. */
  readonly proxyVeth: string;
  /** Sandboxes with an egress policy other than the default, by id and by address. */
  private readonly policies = new Map<string, { ip: string; policy: EgressPolicy }>();
  private readonly policyByIp = new Map<string, EgressPolicy>();
  /** Addresses whose nftables counter of refusals exists; refusals the proxy made, by address. */
  private readonly counters = new Set<string>();
  private readonly proxyDenied = new Map<string, number>();

  constructor(private readonly o: EgressStateOptions) {
    this.proxyVeth = `sbpx${createHash('sha256').update(o.bridge).digest('hex').slice(0, 11)}`;
    const onDenied = (ip: string) => this.proxyDenied.set(ip, (this.proxyDenied.get(ip) ?? 0) + 1);
    this.dns = new DnsFilter({
      policyOf: (ip) => {
        const p = this.policyByIp.get(ip);
        return filtersDns(p) ? p : undefined;
      },
      onDenied,
      log: o.log,
    });
    this.proxy = new EgressProxy({
      bridge: o.bridge,
      subnetCidr: `${intToIp(o.subnet.base)}/${o.subnet.prefix}`,
      netns: o.proxyNetns,
      veth: this.proxyVeth,
      policyOf: (ip) => {
        const p = this.policyByIp.get(ip);
        return p && hasDomainRules(p) ? p : undefined;
      },
      onDenied,
      resolve: o.resolve,
      dns: { filter: this.dns, resolvers: () => this.resolvers },
      log: o.log,
    });
  }

  /** Forgets every policy (setupHost loads them again from the sandboxes' disks). */
  clear(): void {
    this.policies.clear();
    this.policyByIp.clear();
    this.counters.clear();
  }

  /** Every sandbox's policy in force, with its address. */
  all(): Array<{ ip: string; policy: EgressPolicy }> {
    return [...this.policies.values()];
  }

  /** Marks an address's counter of refusals as existing (setupHost made it with the table). */
  counted(ip: string): void {
    this.counters.add(ip);
  }

  remember(id: string, ip: string, policy: EgressPolicy | undefined): void {
    const old = this.policies.get(id);
    if (old) this.policyByIp.delete(old.ip);
    if (isRestricted(policy)) {
      this.policies.set(id, { ip, policy });
      this.policyByIp.set(ip, policy);
    } else {
      this.policies.delete(id);
    }
  }

  /** The sandbox's policy as the runtime holds it (undefined: the default). */
  of(id: string): EgressPolicy | undefined {
    return this.policies.get(id)?.policy;
  }

  /** The sandbox's address, if it has a policy in force. */
  ipOf(id: string): string | undefined {
    return this.policies.get(id)?.ip;
  }

  /** Sets (or, for the default, removes) a sandbox's rules: one nft transaction. */
  async apply(id: string, ip: string, policy: EgressPolicy | undefined): Promise<void> {
    if (!isRestricted(policy) && !this.policies.has(id)) return;
    if (usesProxy(policy)) await this.proxy.ensure();
    await procOk('nft', ['-f', '-'], { input: policyTransaction(this.o.nftTable, ip, policy, this.proxyVeth) });
    if (isRestricted(policy)) this.counters.add(ip);
    this.remember(id, ip, policy);
    this.proxy.revoke(ip);
  }

  /** Removes a sandbox's rules and its counter of refusals (destroy, a failed boot). */
  async remove(id: string, ip: string): Promise<void> {
    if (this.policies.get(id)?.ip === ip || this.counters.has(ip)) {
      await procOk('nft', ['-f', '-'], { input: policyRemoval(this.o.nftTable, ip, this.proxyVeth) });
    }
    this.counters.delete(ip);
    this.proxyDenied.delete(ip);
    if (this.policies.get(id)?.ip === ip) this.remember(id, ip, undefined);
    this.proxy.revoke(ip);
    this.dns.forget(ip);
  }

  /** Connections and datagrams refused for this address since the daemon started. */
  async deniedCount(ip: string): Promise<number> {
    let n = this.proxyDenied.get(ip) ?? 0;
    if (this.counters.has(ip)) {
      const r = await proc('nft', ['-j', 'list', 'counter', 'inet', this.o.nftTable, policyObjects(ip).counter]);
      const m = /"packets":\s*(\d+)/.exec(r.stdout);
      if (m) n += Number(m[1]);
    }
    return n;
  }
}
