import { domainToASCII } from 'node:url';
import { ServiceError } from '@sandboxd/protocol';
import { ipToInt, normalizeCidr } from './net.js';

/**
 * A sandbox's egress policy, on top of the protections every sandbox with a network has (host,
 * private and special ranges, other sandboxes, DNS only through the host's resolver): those stay
 * on under every policy, and no entry here opens them.
 *
 * - `internet: false`: nothing leaves the sandbox, not even DNS.
 * - `deny`: refused, whatever `allow` says.
 * - `allow`: when not empty, the only destinations allowed.
 *
 * An entry is an IPv4 address, an IPv4 CIDR, a domain, or a `*.` wildcard domain (any name below
 * it, not the name itself). Addresses and CIDRs are enforced in nftables for every protocol;
 * domains are judged on the name a connection carries (TLS SNI on 443, HTTP Host on 80) by the
 * runtime's egress proxy. DNS follows the same names: with an allow list (or deny entries of names)
 * a sandbox's queries go to the daemon's DNS filter, which answers only what the policy allows.
 */
export interface EgressPolicy {
  internet: boolean;
  allow: string[];
  deny: string[];
}

export const DEFAULT_EGRESS: EgressPolicy = { internet: true, allow: [], deny: [] };

/** Entries per list. A hundred is a long list; this bounds the work a policy can cost. */
export const MAX_EGRESS_ENTRIES = 1000;

/** The TCP ports whose connections the egress proxy reads a name from. */
export const INSPECTED_PORTS: readonly number[] = [80, 443];

export interface ParsedEntries {
  cidrs: string[];
  /** Exact names, lowercase ASCII, no trailing dot. */
  names: string[];
  /** Suffixes of `*.` entries, with their leading dot (`.example.com`). */
  suffixes: string[];
}

const IPV4_RE = /^\d{1,3}(?:\.\d{1,3}){3}(?:\/\d{1,2})?$/;
const LABEL_RE = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;

/**
 * One entry as the API stores and shows it: `1.2.3.4`, `10.0.0.0/8` (host bits cleared),
 * `example.com`, `*.example.com` (lowercase ASCII, no trailing dot). Throws a 400 naming the entry.
 */
export function normalizeEntry(raw: string, field: string): string {
  const bad = (why: string) => new ServiceError('VALIDATION_ERROR', `${field}: ${JSON.stringify(raw.slice(0, 100))} ${why}`, { field, entry: raw.slice(0, 300) });
  const text = raw.trim();
  if (!text) throw bad('is empty');
  if (text.length > 300) throw bad('is too long');
  if (text.includes(':')) throw bad('is not allowed: sandboxes have no IPv6 (every IPv6 packet is dropped), and a port cannot be given; use an IPv4 address, an IPv4 CIDR or a domain');
  if (IPV4_RE.test(text)) {
    try {
      const cidr = normalizeCidr(text);
      return text.includes('/') ? cidr : cidr.slice(0, -3);
    } catch {
      throw bad('is not an IPv4 address or CIDR');
    }
  }
  const wildcard = text.startsWith('*.');
  const body = wildcard ? text.slice(2) : text;
  if (body.includes('*')) throw bad('is not a domain: a wildcard is allowed only as a leading "*." ');
  const ascii = domainToASCII(body.replace(/\.$/, '').toLowerCase());
  if (!ascii || ascii.length > 253) throw bad('is not a domain, an IPv4 address or a CIDR');
  const labels = ascii.split('.');
  if (!labels.every((l) => LABEL_RE.test(l))) throw bad('is not a domain, an IPv4 address or a CIDR');
  if (/^\d+$/.test(labels[labels.length - 1]!)) throw bad('is not a domain, an IPv4 address or a CIDR');
  return wildcard ? `*.${ascii}` : ascii;
}

/** Normalized, deduplicated, in the caller's order; throws a 400 on the first bad entry. */
export function normalizeEntries(list: readonly string[] | undefined, field: string): string[] {
  if (!list) return [];
  if (list.length > MAX_EGRESS_ENTRIES) throw new ServiceError('VALIDATION_ERROR', `${field}: at most ${MAX_EGRESS_ENTRIES} entries`, { field });
  return [...new Set(list.map((e) => normalizeEntry(e, field)))];
}

export function parseEntries(list: readonly string[]): ParsedEntries {
  const out: ParsedEntries = { cidrs: [], names: [], suffixes: [] };
  for (const e of list) {
    if (IPV4_RE.test(e)) out.cidrs.push(normalizeCidr(e));
    else if (e.startsWith('*.')) out.suffixes.push(e.slice(1));
    else out.names.push(e);
  }
  return out;
}

/** The default policy costs nothing: no rules, no proxy. */
export function isRestricted(p: EgressPolicy | undefined): p is EgressPolicy {
  return !!p && (!p.internet || p.allow.length > 0 || p.deny.length > 0);
}

export function hasDomainRules(p: EgressPolicy): boolean {
  return compile(p).domains;
}

/**
 * Whether the sandbox's DNS goes through the daemon's DNS filter (dns-filter.ts): with an allow
 * list, only the names it allows resolve; with deny entries of names, those names do not.
 */
export function filtersDns(p: EgressPolicy | undefined): boolean {
  if (!p || !p.internet) return false;
  const { deny } = compile(p);
  return p.allow.length > 0 || deny.names.size + deny.suffixes.size > 0;
}

/** Whether the policy needs the egress proxy's namespace: to judge names on connections, or DNS. */
export function usesProxy(p: EgressPolicy | undefined): boolean {
  return isRestricted(p) && (hasDomainRules(p) || filtersDns(p));
}

/**
 * The query types an allow list answers for the names it allows: addresses, and the records that
 * lead to them. TXT, ANY, MX, SRV, PTR and the rest are refused: nothing the sandbox may connect to
 * needs them.
 */
export const DNS_ADDRESS_TYPES: ReadonlySet<number> = new Set([1 /* A */, 5 /* CNAME */, 28 /* AAAA */, 64 /* SVCB */, 65 /* HTTPS */]);

/**
 * The DNS filter's decision for a query of `name` (canonical: lowercase, no trailing dot) of type
 * `qtype`. The names are exactly those the egress proxy lets a connection name: an allow list
 * allows its domains (and, for `*.` entries, the names below them), and deny entries win. A deny
 * list alone refuses its names (any type) and lets the rest through.
 */
export function dnsVerdict(p: EgressPolicy, name: string, qtype: number): { allow: true } | { allow: false; reason: string } {
  if (!p.internet) return { allow: false, reason: 'internet access is off' };
  const { allow, deny } = compile(p);
  if (name && nameMatches(deny, name)) return { allow: false, reason: `${name} is denied` };
  if (p.allow.length === 0) return { allow: true };
  if (!name || !nameMatches(allow, name)) return { allow: false, reason: `${name || 'the root'} is not in the allow list` };
  if (!DNS_ADDRESS_TYPES.has(qtype)) return { allow: false, reason: `query type ${qtype} is not answered under an allow list` };
  return { allow: true };
}

/**
 * Packets per second (and the burst) of DNS a sandbox whose DNS is filtered may send; past them,
 * dropped in the kernel, before they reach the filter's socket, which all sandboxes share.
 */
export const DNS_PACKETS_PER_SECOND = 200;
export const DNS_PACKET_BURST = 400;

interface CompiledList {
  /** Address ranges as integers, inclusive. */
  ranges: Array<[number, number]>;
  names: Set<string>;
  /** `.example.com` of each `*.example.com`. */
  suffixes: Set<string>;
}

interface Compiled {
  allow: CompiledList;
  deny: CompiledList;
  domains: boolean;
}

/**
 * A policy in the form the proxy asks it: parsed once per policy object (policies are replaced,
 * never changed), so that a check costs a few lookups whatever the lists' length: a sandbox sets
 * its own policy, and its connections must not cost the daemon's event loop in proportion to it.
 */
const compiledPolicies = new WeakMap<EgressPolicy, Compiled>();

function compile(p: EgressPolicy): Compiled {
  let c = compiledPolicies.get(p);
  if (!c) {
    const one = (list: readonly string[]): CompiledList => {
      const e = parseEntries(list);
      const ranges = e.cidrs.map((x): [number, number] => {
        const [net, bits] = x.split('/');
        const lo = ipToInt(net!);
        return [lo, lo + 2 ** (32 - Number(bits)) - 1];
      });
      return { ranges, names: new Set(e.names), suffixes: new Set(e.suffixes) };
    };
    const allow = one(p.allow);
    const deny = one(p.deny);
    const domains = p.internet && allow.names.size + allow.suffixes.size + deny.names.size + deny.suffixes.size > 0;
    c = { allow, deny, domains };
    compiledPolicies.set(p, c);
  }
  return c;
}

const inRanges = (ranges: Array<[number, number]>, ip: number) => ranges.some(([lo, hi]) => ip >= lo && ip <= hi);

/**
 * A hostname as a connection names it (SNI, Host) in the form the entries use; undefined when it
 * names none, null when what it names is no hostname (empty labels, odd characters): unreadable.
 */
export function canonicalName(name: string | undefined): string | undefined | null {
  if (name === undefined || name === '') return undefined;
  const ascii = domainToASCII(name.replace(/\.+$/, '').toLowerCase());
  return ascii && ascii.length <= 253 && /^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/.test(ascii) ? ascii : null;
}

/** Whether `name` is in the list: itself, or below a wildcard (one lookup per label). */
function nameMatches(e: CompiledList, name: string): boolean {
  if (e.names.has(name)) return true;
  for (let i = name.indexOf('.'); i >= 0; i = name.indexOf('.', i + 1)) if (e.suffixes.has(name.slice(i))) return true;
  return false;
}

export type EgressVerdict =
  | { allow: true; byName: boolean }
  | { allow: false; reason: string };

/**
 * The decision for one connection the proxy sees: to `address`, naming `name` (SNI or Host; null:
 * it names something that cannot be read as a hostname). `byName`: the decision trusts the name,
 * so the name must also resolve to the address (else anyone could claim any name).
 *
 * A name the connection does not carry cannot be denied: with deny entries of names, a connection
 * that names no host is refused too (unless an allow entry covers its address).
 */
export function decide(p: EgressPolicy, address: string, name: string | undefined | null): EgressVerdict {
  if (!p.internet) return { allow: false, reason: 'internet access is off' };
  if (name === null) return { allow: false, reason: 'the host the connection names cannot be read' };
  const { allow, deny } = compile(p);
  let ip: number;
  try {
    ip = ipToInt(address);
  } catch {
    return { allow: false, reason: `${address} is not an IPv4 address` };
  }
  if (inRanges(deny.ranges, ip)) return { allow: false, reason: `${address} is denied` };
  if (name && nameMatches(deny, name)) return { allow: false, reason: `${name} is denied` };
  if (inRanges(allow.ranges, ip)) return { allow: true, byName: false };
  if (name && nameMatches(allow, name)) return { allow: true, byName: true };
  if (p.allow.length > 0) return { allow: false, reason: name ? `${name} is not in the allow list` : `${address} is not in the allow list, and the connection names no host` };
  if (deny.names.size + deny.suffixes.size > 0) {
    return name ? { allow: true, byName: true } : { allow: false, reason: 'the connection names no host, and this policy denies hosts by name' };
  }
  return { allow: true, byName: false };
}

/** nftables names of one sandbox's objects: from its address, which is unique while it lives. */
export function policyObjects(ip: string): { chain: string; allowSet: string; denySet: string; counter: string } {
  const base = `p_${ip.replace(/\./g, '_')}`;
  return { chain: base, allowSet: `${base}_a`, denySet: `${base}_d`, counter: `${base}_n` };
}

/**
 * The rules of one sandbox's chain, jumped to (from forward and input) for every packet it sends.
 * A rule that returns lets the table's common rules decide (which still drop blocked ranges); a
 * refusal is counted and answered at once: a TCP reset, or an ICMP "administratively prohibited".
 */
export function policyRules(ip: string, p: EgressPolicy, proxyVeth: string): string[] {
  const o = policyObjects(ip);
  const refuse = [`meta l4proto tcp counter name "${o.counter}" reject with tcp reset`, `counter name "${o.counter}" reject with icmpx type admin-prohibited`];
  if (!p.internet) return refuse;
  const allow = parseEntries(p.allow);
  const deny = parseEntries(p.deny);
  const domains = hasDomainRules(p);
  const dns = 'ip daddr @dns4 meta l4proto { tcp, udp } th dport 53';
  const rules: string[] = [];
  if (filtersDns(p)) {
    // To the DNS filter only (routed like inspected connections), at a bounded rate; when it is
    // not running, refused rather than let through to the resolver.
    rules.push(`${dns} oifname "${proxyVeth}" limit rate over ${DNS_PACKETS_PER_SECOND}/second burst ${DNS_PACKET_BURST} packets counter name "${o.counter}" drop`);
    rules.push(`${dns} oifname "${proxyVeth}" return`);
    rules.push(...refuse.map((r) => `${dns} ${r}`));
  } else {
    rules.push(`${dns} return`);
  }
  if (deny.cidrs.length) rules.push(...refuse.map((r) => `ip daddr @${o.denySet} ${r}`));
  // QUIC carries its name encrypted: with domain rules, HTTPS goes over TCP, where the proxy reads it.
  if (domains) {
    rules.push(`udp dport 443 ${refuse[1]}`);
    // Fail closed: an inspected connection that is not on its way to the proxy (it is not running) is refused.
    rules.push(`tcp dport { ${INSPECTED_PORTS.join(', ')} } oifname != "${proxyVeth}" ${refuse[0]}`);
  }
  if (allow.cidrs.length) rules.push(`ip daddr @${o.allowSet} return`);
  if (domains) rules.push(`oifname "${proxyVeth}" return`);
  if (p.allow.length) rules.push(...refuse);
  return rules;
}

/** One nft transaction that sets a sandbox's policy (idempotent), or removes it when `p` is the default. */
export function policyTransaction(table: string, ip: string, p: EgressPolicy | undefined, proxyVeth: string): string {
  const o = policyObjects(ip);
  const t = `inet ${table}`;
  const setDef = '{ type ipv4_addr; flags interval; auto-merge; }';
  const lines: string[] = [];
  if (!isRestricted(p)) {
    lines.push(
      `add chain ${t} ${o.chain}`,
      `add element ${t} policy4 { ${ip} : jump ${o.chain} }`,
      `delete element ${t} policy4 { ${ip} }`,
      `add element ${t} inspect4 { ${ip} }`,
      `delete element ${t} inspect4 { ${ip} }`,
      `add element ${t} dnsf4 { ${ip} }`,
      `delete element ${t} dnsf4 { ${ip} }`,
      `flush chain ${t} ${o.chain}`,
      `delete chain ${t} ${o.chain}`,
    );
    for (const s of [o.allowSet, o.denySet]) lines.push(`add set ${t} ${s} ${setDef}`, `delete set ${t} ${s}`);
    return lines.join('\n') + '\n';
  }
  const allow = parseEntries(p.allow).cidrs;
  const deny = parseEntries(p.deny).cidrs;
  lines.push(`add chain ${t} ${o.chain}`, `flush chain ${t} ${o.chain}`);
  for (const [s, elems] of [[o.allowSet, allow], [o.denySet, deny]] as const) {
    lines.push(`add set ${t} ${s} ${setDef}`, `flush set ${t} ${s}`);
    if (elems.length) lines.push(`add element ${t} ${s} { ${elems.join(', ')} }`);
  }
  // Kept when the policy goes back to the default: the sandbox's count of refusals lives on.
  lines.push(`add counter ${t} ${o.counter}`);
  for (const r of policyRules(ip, p, proxyVeth)) lines.push(`add rule ${t} ${o.chain} ${r}`);
  lines.push(`add element ${t} policy4 { ${ip} : jump ${o.chain} }`, `add element ${t} inspect4 { ${ip} }`);
  if (!hasDomainRules(p)) lines.push(`delete element ${t} inspect4 { ${ip} }`);
  lines.push(`add element ${t} dnsf4 { ${ip} }`);
  if (!filtersDns(p)) lines.push(`delete element ${t} dnsf4 { ${ip} }`);
  return lines.join('\n') + '\n';
}

/** Removes everything of a sandbox's policy, its counter too (destroy). */
export function policyRemoval(table: string, ip: string, proxyVeth: string): string {
  const o = policyObjects(ip);
  return policyTransaction(table, ip, undefined, proxyVeth) + `add counter inet ${table} ${o.counter}\ndelete counter inet ${table} ${o.counter}\n`;
}
