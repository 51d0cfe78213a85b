// Unit tests of what the runtime writes: OCI config, seccomp profile, nftables ruleset, addresses.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { CANONICAL_ID_OFFSET, ID_RANGE } from './ids.js';
import { checkSuidDumpable, hardenLoader, parseLdd } from './agent-runtime.js';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { loadConfig } from '../config/index.js';
import { BLOCKED_RANGES, blockedRangeOf, isUnicastMac, nftRuleset, stableMac } from './host.js';
import { IdRanges, MAX_ID_RANGES, rangeBase, readIdRange, SANDBOX_ID_BASE, writeIdRange } from './id-ranges.js';
import { cidrContains, Ipam, intToIp, ipToInt, normalizeCidr, parseSubnet, vethName } from './net.js';
import { buildConfig, DEFAULT_CAPABILITIES, envList } from './oci.js';
import { ALLOWED_SOCKET_FAMILIES, DENIED_SYSCALLS, seccompProfile, type OciSeccomp } from './seccomp.js';

const input = {
  args: ['/.sb/init', '--', '/bin/true'],
  env: { A: 'b' },
  cwd: '/',
  hostname: 'h1',
  rootfs: '/x/rootfs',
  cgroupsPath: '/sandboxd/h1',
  resources: { vcpu: 1.5, memoryMb: 512, diskGb: 2, pidsMax: 100 },
  roBinds: [{ source: '/usr/bin/catatonit', target: '/.sb/init' }],
  caBundle: true,
  idBase: 1_000_131_072,
  cgroupVersion: 1 as const,
};

describe('OCI config', () => {
  test('limits: memory+swap = memory, socket buffers, cpu quota per vcpu, pids, nofile below the host hard limit', () => {
    const c = buildConfig(input);
    const r = c.linux.resources as { memory: { limit: number; swap: number }; cpu: { quota: number; period: number }; pids: { limit: number } };
    assert.deepEqual(r.memory, { limit: 512 * 1024 * 1024, swap: 512 * 1024 * 1024, kernelTCP: 64 * 1024 * 1024 });
    const small = buildConfig({ ...input, resources: { ...input.resources, memoryMb: 32 } }).linux.resources as { memory: { kernelTCP: number } };
    assert.equal(small.memory.kernelTCP, 32 * 1024 * 1024, 'never above the memory limit');
    const v2 = buildConfig({ ...input, cgroupVersion: 2 }).linux.resources as { memory: Record<string, number> };
    assert.deepEqual(v2.memory, { limit: 512 * 1024 * 1024, swap: 512 * 1024 * 1024 }, 'cgroup v2 charges sockets to memory.max; crun refuses kernelTCP there');
    assert.deepEqual(r.cpu, { quota: 150000, period: 100000 });
    assert.deepEqual(r.pids, { limit: 100 });
    assert.deepEqual(c.process.rlimits, [{ type: 'RLIMIT_NOFILE', hard: 16384, soft: 16384 }]);
  });

  test('namespaces, id mapping, capabilities, no_new_privs', () => {
    const c = buildConfig(input);
    assert.deepEqual(c.linux.namespaces.map((n) => n.type).sort(), ['cgroup', 'ipc', 'mount', 'network', 'pid', 'user', 'uts']);
    assert.ok(c.linux.namespaces.every((n) => !n.path), 'fresh namespaces by default');
    assert.deepEqual(c.linux.uidMappings, [{ containerID: 0, hostID: 1_000_131_072, size: 65536 }]);
    assert.deepEqual(c.linux.gidMappings, c.linux.uidMappings);
    assert.equal(c.process.noNewPrivileges, true);
    assert.ok(!c.process.capabilities.bounding.includes('CAP_SYS_ADMIN'));
    assert.ok(!c.process.capabilities.bounding.includes('CAP_NET_RAW'), 'no raw sockets: no ARP/MAC spoofing on the bridge');
    assert.equal(DEFAULT_CAPABILITIES.length, 13);
    assert.equal(c.linux.sysctl['net.ipv4.ping_group_range'], '0 65535');
    assert.deepEqual(c.process.capabilities.ambient, []);
    const joined = buildConfig({ ...input, netnsPath: '/run/netns/n', userNsPath: '/proc/9/ns/user' });
    assert.deepEqual(joined.linux.namespaces.filter((n) => n.path).map((n) => `${n.type}:${n.path}`).sort(), ['network:/run/netns/n', 'user:/proc/9/ns/user']);
  });

  test('mounts: read-only sysfs, tmpfs /tmp, read-only binds; masked and read-only paths', () => {
    const c = buildConfig(input);
    const by = new Map(c.mounts.map((m) => [m.destination, m]));
    assert.ok(by.get('/sys')!.options!.includes('ro'));
    assert.equal(by.get('/tmp')!.type, 'tmpfs');
    for (const d of ['/etc/resolv.conf', '/etc/ssl/certs/ca-certificates.crt', '/.sb/init']) {
      assert.ok(by.get(d)!.options!.includes('ro'), d);
      assert.ok(by.get(d)!.options!.includes('nosuid'), d);
    }
    assert.ok(!buildConfig({ ...input, caBundle: false }).mounts.some((m) => m.destination.includes('ca-certificates')));
    assert.ok(c.linux.maskedPaths.includes('/proc/keys'));
    assert.ok(c.linux.maskedPaths.includes('/sys/fs/cgroup'));
    assert.ok(c.linux.readonlyPaths.includes('/proc/sys'));
  });

  test('env: PATH added when missing, bad names refused', () => {
    assert.ok(envList({ A: '1' }).some((e) => e.startsWith('PATH=/usr/local/sbin:')));
    assert.deepEqual(envList({ PATH: '/bin' }), ['PATH=/bin']);
    assert.throws(() => envList({ 'A=B': 'x' }));
    assert.throws(() => envList({ A: 'x\0y' }));
  });
});

describe('agent runtime', () => {
  test('fs.suid_dumpable 1 is refused: the agent would be dumpable, so ptrace-able from its sandbox', async () => {
    await assert.rejects(checkSuidDumpable(async () => '1\n'), /suid_dumpable is 1/);
    await checkSuidDumpable(async () => '0\n');
    await checkSuidDumpable(async () => '2\n');
  });
});

describe('seccomp profile', () => {
  test('default allow; the dangerous calls denied; values are valid unsigned numbers', () => {
    const p = seccompProfile('x64');
    assert.equal(p.defaultAction, 'SCMP_ACT_ALLOW');
    assert.deepEqual(p.architectures, ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32']);
    const denied = new Set(p.syscalls.filter((r) => !r.args).flatMap((r) => r.names));
    for (const n of ['mount', 'umount2', 'pivot_root', 'move_mount', 'open_tree', 'fsopen', 'fsmount', 'fsconfig', 'fspick', 'mount_setattr',
      'unshare', 'setns', 'keyctl', 'add_key', 'request_key', 'bpf', 'perf_event_open', 'userfaultfd', 'kexec_load', 'kexec_file_load',
      'init_module', 'finit_module', 'delete_module', 'reboot', 'swapon', 'swapoff', 'acct', 'settimeofday', 'clock_settime', 'adjtimex',
      'clock_adjtime', 'open_by_handle_at', 'name_to_handle_at', 'iopl', 'ioperm', 'quotactl', 'syslog', 'io_uring_setup', 'io_uring_enter',
      'io_uring_register', 'lookup_dcookie', 'uselib', 'vhangup', 'nfsservctl', 'process_vm_writev', 'pidfd_getfd', 'clone3']) {
      assert.ok(denied.has(n), n);
    }
    assert.ok(!denied.has('ptrace'), 'ptrace stays (gdb, strace); tracees keep their filter');
    assert.equal(p.syscalls.find((r) => r.names.includes('clone3'))!.errnoRet, 38);
    const clone = p.syscalls.filter((r) => r.names.includes('clone'));
    assert.equal(clone.length, 7);
    for (const r of p.syscalls) for (const a of r.args ?? []) {
      assert.ok(Number.isSafeInteger(a.value) && a.value >= 0 && a.value <= 0xffffffff, JSON.stringify(a));
    }
    assert.ok(DENIED_SYSCALLS.length > 40);
  });
});

/**
 * The errno the profile gives `name` called with a 64-bit first argument, evaluated as seccomp
 * does: rules in order, conditions on one argument ORed (crun splits them), values compared on all
 * 64 bits; undefined when the call is allowed.
 */
function errnoFor(p: OciSeccomp, name: string, arg0: bigint): number | undefined {
  for (const r of p.syscalls) {
    if (!r.names.includes(name)) continue;
    const hit = !r.args || r.args.some((a) => {
      const v = BigInt(a.value);
      if (a.op === 'SCMP_CMP_EQ') return arg0 === v;
      if (a.op === 'SCMP_CMP_NE') return arg0 !== v;
      if (a.op === 'SCMP_CMP_GT') return arg0 > v;
      if (a.op === 'SCMP_CMP_LT') return arg0 < v;
      return (arg0 & v) === BigInt(a.valueTwo ?? 0);
    });
    if (hit) return r.errnoRet;
  }
  return undefined;
}

describe('seccomp socket families', () => {
  const p = seccompProfile('x64');
  const EAFNOSUPPORT = 97;
  const allowed = new Set(Object.values(ALLOWED_SOCKET_FAMILIES));

  test('unix, inet, inet6 and netlink only, for socket and socketpair', () => {
    assert.deepEqual([...allowed].sort((a, b) => a - b), [1, 2, 10, 16]);
    for (const name of ['socket', 'socketpair']) {
      for (let family = 0; family < 1024; family++) {
        assert.equal(errnoFor(p, name, BigInt(family)), allowed.has(family) ? undefined : EAFNOSUPPORT, `${name}(${family})`);
      }
    }
  });

  test('a family with high bits set is refused, though the kernel would read its low 32 bits as allowed', () => {
    for (const name of ['socket', 'socketpair']) {
      for (const family of [1n, 2n, 10n, 16n, 40n]) {
        for (const high of [1n << 32n, 1n << 63n, 0xffffffff00000000n]) {
          assert.equal(errnoFor(p, name, high | family), EAFNOSUPPORT, `${name}(${(high | family).toString(16)})`);
        }
      }
      assert.equal(errnoFor(p, name, 0xffffffffffffffffn), EAFNOSUPPORT, 'socket(-1)');
    }
  });

  test('the 32-bit socketcall multiplexer answers ENOSYS whatever its arguments; other socket calls are untouched', () => {
    for (const call of [0n, 1n, 3n, 8n, 1n << 32n]) assert.equal(errnoFor(p, 'socketcall', call), 38);
    for (const name of ['connect', 'bind', 'accept4', 'sendmsg']) assert.equal(errnoFor(p, name, 40n), undefined, name);
    for (const a of p.syscalls.flatMap((r) => r.args ?? [])) assert.ok(a.value >= 0 && a.value <= 0xffffffff);
  });
});

describe('network plumbing', () => {
  test('subnets and addresses', () => {
    const s = parseSubnet('10.88.3.7/16');
    assert.equal(intToIp(s.base), '10.88.0.0');
    assert.equal(ipToInt('10.88.0.1') - s.base, 1);
    const small = parseSubnet('10.96.5.0/29');
    const ipam = new Ipam(small);
    const got = new Set<string>();
    for (let i = 0; i < 5; i++) got.add(ipam.allocate());
    assert.deepEqual([...got].sort(), ['10.96.5.2', '10.96.5.3', '10.96.5.4', '10.96.5.5', '10.96.5.6']);
    assert.throws(() => ipam.allocate(), /exhausted/);
    ipam.release('10.96.5.4');
    assert.equal(ipam.allocate(), '10.96.5.4');
    assert.throws(() => ipam.claim('10.96.5.1'), /outside/);
    assert.throws(() => parseSubnet('10.0.0.0/31'));
  });

  test('veth names fit IFNAMSIZ and differ per netns', () => {
    assert.equal(vethName('sandboxd_abc').length, 15);
    assert.notEqual(vethName('sandboxd_abc'), vethName('sandboxd_abd'));
  });

  test('nftables: NAT for the subnet, DNS to the resolver only, exceptions after the DNS and host drops, host input closed', () => {
    const text = nftRuleset({
      table: 'sandboxd', bridge: 'sbbr0', subnet: parseSubnet('10.88.0.0/16'), resolvers: ['10.255.255.53'], hostAddresses: ['192.0.2.2'], egressAllow: ['203.0.113.80/32'],
      egressAllowEndpoints: [{ address: '198.18.0.9', port: 80 }, { address: '198.18.0.10', port: 8443 }],
      proxyVeth: 'sbpxtest',
      proxyMark: 0x5bd00001,
    });
    const lines = text.split('\n').map((l) => l.trim());
    assert.equal(lines[0], 'table inet sandboxd {}');
    assert.equal(lines[1], 'delete table inet sandboxd');
    const idx = (needle: string) => {
      const i = lines.findIndex((l) => l.includes(needle));
      assert.ok(i >= 0, needle);
      return i;
    };
    const dnsAccept = idx('iifname "sbbr0" ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 accept');
    const dnsDrop = idx('iifname "sbbr0" meta l4proto { tcp, udp } th dport { 53, 853 } drop');
    assert.ok(dnsAccept < dnsDrop, "the host's resolver first, then every other DNS, DoT and DoQ port is closed");
    assert.ok(dnsDrop < idx('@allow4 accept') && idx('@host4 meta l4proto tcp reject with tcp reset') < idx('@allow4 accept'), 'an exception opens neither DNS nor the host');
    assert.ok(idx('@allow4 accept') < idx('@blocked4 meta l4proto tcp reject with tcp reset'));
    const svc = idx('iifname "sbbr0" ip daddr . tcp dport @allowsvc4 accept');
    assert.ok(dnsDrop < svc && idx('@host4 meta l4proto tcp reject with tcp reset') < svc && svc < idx('@blocked4 meta l4proto tcp reject with tcp reset'), 'a single-service exception comes after the DNS and host drops');
    assert.match(text, /set allowsvc4 \{ type ipv4_addr \. inet_service; elements = \{ 198\.18\.0\.9 \. 80, 198\.18\.0\.10 \. 8443 \} \}/);
    assert.ok(idx('iifname "sbbr0" meta nfproto != ipv4 drop') < dnsAccept, 'IPv6 dropped before any accept');
    assert.ok(lines.indexOf('oifname "sbbr0" drop') > lines.indexOf('oifname "sbbr0" ct state established,related accept'));
    assert.match(text, /ip saddr 10\.88\.0\.0\/16 oifname != \{ "sbbr0", "sbpxtest" \} masquerade/);
    assert.match(text, /set allow4 \{ type ipv4_addr; flags interval; auto-merge; elements = \{ 203\.0\.113\.80\/32 \} \}/);
    assert.match(text, /iifname "sbbr0" oifname "sbbr0" drop/);
    assert.match(text, /chain input \{[^}]*iifname "sbbr0" ip saddr vmap @policy4\s+iifname "sbbr0" ip daddr @dns4 meta l4proto \{ tcp, udp \} th dport 53 accept\s+iifname "sbbr0" drop\s+\}/s, 'input: established, the sandbox\'s policy, DNS to a resolver on the host, nothing else (IPv6 included)');
    const none = nftRuleset({ table: 't', bridge: 'b', subnet: parseSubnet('10.1.0.0/24'), resolvers: [], hostAddresses: [], proxyVeth: 'px', proxyMark: 1 });
    assert.match(none, /set dns4 \{ type ipv4_addr; \}/, 'empty sets are valid syntax');
    assert.match(none, /set allow4 \{ type ipv4_addr; flags interval; auto-merge; \}/);
    assert.match(none, /set allowsvc4 \{ type ipv4_addr \. inet_service; \}/);
  });

  test('blocked ranges: every IANA special-purpose range a sandbox has no business with, multicast, class E; disjoint', () => {
    for (const r of ['0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.0.0.0/24', '192.0.2.0/24',
      '192.31.196.0/24', '192.52.193.0/24', '192.88.99.0/24', '192.168.0.0/16', '192.175.48.0/24', '198.18.0.0/15', '198.51.100.0/24',
      '203.0.113.0/24', '224.0.0.0/4', '240.0.0.0/4']) {
      assert.ok(BLOCKED_RANGES.includes(r), r);
    }
    for (const ip of ['255.255.255.255', '198.19.255.1', '192.0.0.9', '239.1.2.3', '0.0.0.0', '127.0.0.1']) assert.ok(blockedRangeOf(ip), ip);
    for (const ip of ['1.1.1.1', '8.8.8.8', '11.22.33.44', '198.20.0.1', '192.0.1.1', '223.255.255.255', '100.128.0.1']) assert.equal(blockedRangeOf(ip), undefined, ip);
    const spans = BLOCKED_RANGES.map((c) => {
      const [ip, p] = c.split('/');
      assert.equal(normalizeCidr(c), c, `${c} is a network address`);
      return [ipToInt(ip!), ipToInt(ip!) + 2 ** (32 - Number(p)) - 1] as const;
    }).sort((x, y) => x[0] - y[0]);
    for (let i = 1; i < spans.length; i++) assert.ok(spans[i]![0] > spans[i - 1]![1], 'an nftables interval set refuses overlaps');
    assert.equal(blockedRangeOf('203.0.113.80', ['203.0.113.80/32']), undefined, 'an egress exception');
    assert.equal(blockedRangeOf('203.0.113.81', ['203.0.113.80/32']), '203.0.113.0/24');
  });

  test('bridge MACs: a pinned one is unicast, locally administered and stable per name', () => {
    assert.equal(stableMac('sbbr0'), stableMac('sbbr0'));
    assert.notEqual(stableMac('sbbr0'), stableMac('sbbr1'));
    assert.match(stableMac('sbbr0'), /^02(:[0-9a-f]{2}){5}$/);
    assert.ok(isUnicastMac(stableMac('x')));
    for (const bad of ['00:00:00:00:00:00', '01:00:5e:00:00:01', 'ff:ff:ff:ff:ff:ff', '', '02:00:00:00:00']) assert.ok(!isUnicastMac(bad), bad);
  });

  test('egress exceptions: addresses and CIDRs, host bits cleared, nonsense refused', () => {
    assert.equal(normalizeCidr('203.0.113.80'), '203.0.113.80/32');
    assert.equal(normalizeCidr(' 10.1.2.3/8 '), '10.0.0.0/8');
    assert.equal(normalizeCidr('0.0.0.0/0'), '0.0.0.0/0');
    for (const bad of ['', 'example.org', '10.0.0.256', '10.0.0.0/33', '10.0.0/8', 'fd00::1', '1.2.3.4/']) assert.throws(() => normalizeCidr(bad), bad);
    assert.ok(cidrContains('198.18.0.0/15', '198.19.1.1'));
    assert.ok(!cidrContains('198.18.0.0/15', '198.20.0.0'));
    assert.deepEqual(loadConfig({ SANDBOXD_EGRESS_ALLOW: '203.0.113.80, 10.1.0.0/16' }).runtime.egressAllow, ['203.0.113.80/32', '10.1.0.0/16']);
    assert.deepEqual(loadConfig({}).runtime.egressAllow, []);
    assert.throws(() => loadConfig({ SANDBOXD_EGRESS_ALLOW: 'mirror.internal' }), /SANDBOXD_EGRESS_ALLOW must list IPv4 addresses or CIDRs/);
    assert.equal(loadConfig({}).runtime.allowAptSources, true, "the host's apt sources stay reachable by default");
    assert.equal(loadConfig({ SANDBOXD_EGRESS_ALLOW_APT_SOURCES: 'false' }).runtime.allowAptSources, false);
    assert.throws(() => loadConfig({ SANDBOXD_EGRESS_ALLOW_APT_SOURCES: 'maybe' }), /must be true or false/);
  });

  test("the agent's loader reads none of the sandbox's loader files, and still starts node", async () => {
    const ldso = execFileSync('readlink', ['-f', '/lib64/ld-linux-x86-64.so.2'], { encoding: 'utf8' }).trim();
    const original = readFileSync(ldso);
    const { image, changed } = hardenLoader(original);
    assert.equal(changed, true);
    assert.equal(image.length, original.length);
    const text = image.toString('latin1');
    for (const path of ['/etc/ld.so.preload\0', '/etc/ld.so.cache\0', '/lib/x86_64-linux-gnu/\0', '\0/usr/lib/\0']) {
      assert.ok(!text.includes(path), `${JSON.stringify(path)} is gone`);
    }
    assert.equal(hardenLoader(image).changed, false, 'idempotent');
    assert.throws(() => hardenLoader(Buffer.from('not a loader')), /unsupported libc/);
    const dir = await mkdtemp(join(tmpdir(), 'sbd-ldso-'));
    try {
      await writeFile(join(dir, 'ld.so'), image, { mode: 0o755 });
      const diag = execFileSync(join(dir, 'ld.so'), ['--list-diagnostics'], { encoding: 'utf8' });
      const dirs = [...diag.matchAll(/^path\.system_dirs\[0x\d+\]="([^"]*)"/gm)].map((m) => m[1]!);
      assert.ok(dirs.length > 0 && dirs.every((d) => d.startsWith('/.sb/node/lib/') || d.startsWith('/sys/')), dirs.join(' '));
      const libDir = execFileSync('dirname', [execFileSync('readlink', ['-f', '/lib/x86_64-linux-gnu/libc.so.6'], { encoding: 'utf8' }).trim()], { encoding: 'utf8' }).trim();
      const out = execFileSync(join(dir, 'ld.so'), ['--library-path', libDir, process.execPath, '-e', 'console.log(6*7)'], { encoding: 'utf8' });
      assert.equal(out, '42\n');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('ldd output: libraries by soname plus the loader', () => {
    const out = parseLdd(`\tlinux-vdso.so.1 (0x00007ffd)\n\tlibdl.so.2 => /lib/x86_64-linux-gnu/libdl.so.2 (0x00007f1)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f2)\n`);
    assert.equal(out.loader, 'ld-linux-x86-64.so.2');
    assert.deepEqual(out.libs.map((l) => l.name), ['libdl.so.2', 'ld-linux-x86-64.so.2']);
  });
});

describe('sandbox id ranges', () => {
  test('above the canonical layer ids and any default subuid range, all below 2^32 - 1', () => {
    const SUB_UID_MAX = 600_100_000; // useradd's default
    assert.ok(CANONICAL_ID_OFFSET >= SUB_UID_MAX && CANONICAL_ID_OFFSET + ID_RANGE <= SANDBOX_ID_BASE);
    assert.equal(rangeBase(0), 1_000_000_000);
    assert.equal(rangeBase(2), 1_000_131_072);
    assert.ok(rangeBase(MAX_ID_RANGES - 1) + ID_RANGE - 1 < 2 ** 32 - 1);
    assert.ok(rangeBase(MAX_ID_RANGES) + ID_RANGE - 1 >= 2 ** 32 - 1);
  });

  test('allocation: distinct, round robin, a released range comes back once the others are used', () => {
    const r = new IdRanges();
    r.claim('old', rangeBase(1));
    const a = r.allocate('a');
    const b = r.allocate('b');
    assert.deepEqual([a, b], [rangeBase(2), rangeBase(3)], 'after the highest claimed one');
    assert.equal(r.holder(a), 'a');
    r.release('a');
    assert.equal(r.holder(a), undefined);
    assert.equal(r.allocate('c'), rangeBase(4), 'not the range just freed');
    r.claim('b', b);
    assert.throws(() => r.claim('d', b), (err: unknown) => err instanceof ServiceError && /also held by sandbox b/.test(err.detail ?? '') && !err.message.includes('sandbox b'));
    assert.throws(() => r.claim('d', rangeBase(1) + 1), /not the base/);
    assert.throws(() => r.claim('d', CANONICAL_ID_OFFSET), /not the base/);
    const full = new IdRanges();
    for (let i = 0; i < MAX_ID_RANGES; i++) full.allocate(`s${i}`);
    assert.throws(() => full.allocate('one-more'), /in use/);
    full.release('s7');
    assert.equal(full.allocate('again'), rangeBase(7));
    assert.equal(full.size, MAX_ID_RANGES);
  });

  test('the range file round-trips and a damaged one is refused', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ids-'));
    try {
      assert.equal(await readIdRange(dir), undefined);
      await writeIdRange(dir, { base: rangeBase(5), size: ID_RANGE });
      assert.deepEqual(await readIdRange(dir), { base: rangeBase(5), size: ID_RANGE });
      await writeIdRange(dir, { base: rangeBase(5), size: ID_RANGE, movingFrom: 100000 });
      assert.deepEqual(await readIdRange(dir), { base: rangeBase(5), size: ID_RANGE, movingFrom: 100000 });
      await writeFile(join(dir, 'ids.json'), JSON.stringify({ base: 100000, size: ID_RANGE }));
      await assert.rejects(readIdRange(dir), (err: unknown) => err instanceof ServiceError && /not a sandbox id range/.test(err.detail ?? '') && !err.message.includes(dir));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
