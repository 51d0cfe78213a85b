// Root tests with a real container and a real "internet": what a sandbox with internet access may
// reach. A network namespace plays public hosts (host routes send their addresses through a veth),
// with listeners on tcp/80, DNS (udp and tcp 53) and DNS over TLS/QUIC (853). The host itself
// reaches every listener: that control proves each path works, so a probe that fails from the
// sandbox was stopped by the sandbox's firewall.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { baseLayer } from '../testing/fixtures.js';
import { parseProbes, probeScript, startPublicHost, type PublicHost } from '../testing/public-host.js';
import { aptReleaseUrl, aptSourceCidrs, assertNoLeaks, createTestRuntime, sh, testSpec, type TestRuntime } from '../testing/runtime-fixtures.js';
import { deleteBridge, ensureBridge, hostResolvers, isUnicastMac, stableMac } from './host.js';
import { parseSubnet } from './net.js';
import { proc, procOk } from './proc.js';

const tag = String(process.pid % 100000);
const LINK = 200 + (process.pid % 50); // the public host's veth: 169.254.<LINK>.0/30
const V6 = (process.pid % 0xffff).toString(16);
/** A public-looking address: the control that proves the path to the public host works. */
const PUBLIC = '11.22.33.44';
/** In a blocked range, but made reachable by the operator (SANDBOXD_EGRESS_ALLOW). */
const EXEMPT = '198.18.77.77';
/** One address in each blocked range the kernel would forward (multicast and broadcast it does not). */
const BLOCKED: [range: string, address: string][] = [
  ['0.0.0.0/8', '0.22.33.44'],
  ['10.0.0.0/8', '10.222.33.44'],
  ['100.64.0.0/10', '100.64.22.33'],
  ['172.16.0.0/12', '172.31.22.33'],
  ['192.0.0.0/24', '192.0.0.9'],
  ['192.31.196.0/24', '192.31.196.1'],
  ['192.52.193.0/24', '192.52.193.1'],
  ['192.88.99.0/24', '192.88.99.1'],
  ['192.168.0.0/16', '192.168.222.33'],
  ['192.175.48.0/24', '192.175.48.1'],
  ['198.18.0.0/15', '198.19.22.33'],
  ['198.51.100.0/24', '198.51.100.22'],
  ['203.0.113.0/24', '203.0.113.22'],
  ['240.0.0.0/4', '250.22.33.44'],
];
const PUBLIC6 = `fd5c:${V6}::80`;
const BRIDGE6 = `fd5b:${V6}::1`;
const SANDBOX6 = `fd5b:${V6}::2`;

describe('sandbox egress (internet access)', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let pub: PublicHost | undefined;
  const id = 'egress';
  const mirrorHost = new URL(aptReleaseUrl()).hostname;
  assert.match(mirrorHost, /^[A-Za-z0-9.-]+$/);
  const script = probeScript(mirrorHost);
  const inSandbox = async (probes: string[]) => {
    const r = await t.rt.exec(id, ['perl', '-e', script, ...probes]);
    assert.equal(r.code, 0, r.stderr);
    return parseProbes(r.stdout);
  };
  // Not spawnSync: one probe reaches a server of this very process.
  const onHost = async (probes: string[]) => {
    const r = await proc('perl', ['-e', script, ...probes]);
    assert.equal(r.code, 0, r.stderr);
    return parseProbes(r.stdout);
  };

  before(async () => {
    const lower = (await baseLayer()).path;
    t = await createTestRuntime({ egressAllow: [...(await aptSourceCidrs()), `${EXEMPT}/32`] });
    pub = await startPublicHost({ tag, link: LINK, v6: V6, ipv4: [PUBLIC, EXEMPT, ...BLOCKED.map(([, a]) => a)], ipv6: [PUBLIC6] });
    await t.rt.create(testSpec(id, [lower], { internetAccess: true }));
  });

  after(async () => {
    try {
      await pub?.close();
    } finally {
      if (t) {
        await t.rt.destroy(id).catch(() => undefined);
        await assertNoLeaks(t.rt);
        await t.teardown();
      }
    }
  });

  test("DNS goes to the host's resolver only: no other host's port 53 or 853, though its port 80 answers", async () => {
    const resolvers = await hostResolvers();
    assert.ok(resolvers.length > 0, 'the host has a resolver');
    const probes = [
      `http=line:${PUBLIC}:80`,
      `udp53=dnsudp:${PUBLIC}:53`,
      `tcp53=dnstcp:${PUBLIC}:53`,
      `dot=line:${PUBLIC}:853`,
      `doq=dnsudp:${PUBLIC}:853`,
      // An egress exception opens an address, not its DNS ports.
      `exempt_udp53=dnsudp:${EXEMPT}:53`,
      `exempt_dot=line:${EXEMPT}:853`,
      ...resolvers.flatMap((r, i) => [`resolver${i}_udp=dnsudp:${r}:53`, `resolver${i}_tcp=dnstcp:${r}:53`]),
    ];
    const host = await onHost(probes);
    // The resolver answers DNS over UDP; over TCP, whatever answers on its port 53 must answer the sandbox too.
    const resolverAnswers = Object.fromEntries(Object.entries(host).filter(([k]) => k.startsWith('resolver')));
    resolvers.forEach((_, i) => {
      assert.equal(host[`resolver${i}_udp`], 'answer');
      assert.notEqual(host[`resolver${i}_tcp`], 'none');
    });
    assert.deepEqual(host, {
      http: 'public:80', udp53: 'answer', tcp53: 'answer', dot: 'public:853', doq: 'answer', exempt_udp53: 'answer', exempt_dot: 'public:853', ...resolverAnswers,
    });
    assert.deepEqual(await inSandbox(probes), {
      http: 'public:80', udp53: 'none', tcp53: 'none', dot: 'none', doq: 'none', exempt_udp53: 'none', exempt_dot: 'none', ...resolverAnswers,
    });
    // And names resolve, through the resolver the sandbox's resolv.conf names.
    const name = await sh(t.rt, id, `getent ahostsv4 ${mirrorHost} | head -1`);
    assert.match(name.stdout, /^\d+\.\d+\.\d+\.\d+\s/);
  });

  test("every special-purpose range is unreachable, the operator's exception and a public address are not", async () => {
    const probes = [
      `public=line:${PUBLIC}:80`,
      `exempt=line:${EXEMPT}:80`,
      `linklocal=line:169.254.${LINK}.2:80`,
      ...BLOCKED.map(([, a], i) => `blocked${i}=line:${a}:80`),
    ];
    const host = await onHost(probes);
    assert.deepEqual(host, Object.fromEntries(probes.map((p) => [p.split('=')[0], 'public:80'])), 'the host reaches every address');
    const got = await inSandbox(probes);
    const expected = Object.fromEntries(probes.map((p) => [p.split('=')[0], 'none']));
    expected.public = 'public:80';
    expected.exempt = 'public:80';
    const named = (r: Record<string, string>) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k.startsWith('blocked') ? `${k} ${BLOCKED[Number(k.slice(7))]![0]}` : k, v]));
    assert.deepEqual(named(got), named(expected));
  });

  test("the gateway's MAC stays put while other sandboxes and ports come and go", async () => {
    const br = t.rt.bridge;
    const mac = () => readFileSync(`/sys/class/net/${br}/address`, 'utf8').trim();
    const before = mac();
    assert.equal(readFileSync(`/sys/class/net/${br}/addr_assign_type`, 'utf8').trim(), '3', 'set, not inherited from a port');
    // A port with the lowest possible MAC joins and leaves: an unpinned bridge would adopt it,
    // and fall back to another port's when it leaves.
    const probe = `sbmac${tag}`.slice(0, 15);
    try {
      await procOk('ip', ['-batch', '-'], { input: `link add ${probe} type veth peer name ${probe}p\nlink set ${probe} address 02:00:00:00:00:01\nlink set ${probe} master ${br}\n` });
      assert.equal(mac(), before);
    } finally {
      await proc('ip', ['link', 'del', probe]);
    }
    await t.rt.create(testSpec('egress2', [(await baseLayer()).path], { internetAccess: true }));
    await t.rt.destroy('egress2');
    assert.equal(mac(), before);
    assert.ok(isUnicastMac(before), before);
    // A bridge left without ports has the MAC 00:00:00:00:00:00; setting up on it pins a real one.
    const scratch = `sbmacb${tag}`.slice(0, 15);
    try {
      await procOk('ip', ['-batch', '-'], { input: `link add ${scratch} type bridge\nlink add ${probe} type veth peer name ${probe}p\nlink set ${probe} master ${scratch}\nlink del ${probe}\n` });
      assert.equal(readFileSync(`/sys/class/net/${scratch}/address`, 'utf8').trim(), '00:00:00:00:00:00');
      await ensureBridge(scratch, parseSubnet(`10.94.${process.pid % 250}.0/29`));
      assert.equal(readFileSync(`/sys/class/net/${scratch}/address`, 'utf8').trim(), stableMac(scratch));
      assert.equal(readFileSync(`/sys/class/net/${scratch}/addr_assign_type`, 'utf8').trim(), '3');
    } finally {
      await deleteBridge(scratch);
    }
    // The sandbox that stayed still reaches its gateway at once (a stale ARP entry would cost ~30 s).
    const r = await sh(t.rt, id, `timeout 3 getent ahostsv4 ${mirrorHost} | head -1`);
    assert.match(r.stdout, /^\d+\.\d+\.\d+\.\d+\s/);
  });

  test('IPv6 is dropped on the forward and the input path, even with addresses and routes on both sides', async () => {
    const br = t.rt.bridge;
    assert.equal(readFileSync(`/proc/sys/net/ipv6/conf/${br}/disable_ipv6`, 'utf8').trim(), '1', 'the bridge has no IPv6');
    // The worst case: IPv6 on the bridge (say the sysctl failed), forwarding on, and a sandbox that
    // somehow has a global address and a route (root inside has no CAP_NET_ADMIN; we do it for it).
    writeFileSync(`/proc/sys/net/ipv6/conf/${br}/disable_ipv6`, '0');
    await procOk('ip', ['addr', 'add', `${BRIDGE6}/64`, 'dev', br, 'nodad']);
    // Per interface (Linux 6.17+): the host-wide IPv6 forwarding switch stays as it is.
    for (const dev of [br, pub!.veth]) writeFileSync(`/proc/sys/net/ipv6/conf/${dev}/force_forwarding`, '1');
    const ns = t.rt.netnsName(id);
    await procOk('ip', ['-n', ns, '-batch', '-'], { input: `addr add ${SANDBOX6}/64 dev eth0 nodad\nroute add default via ${BRIDGE6}\n` });
    // Static neighbours, so that the forward path is tested on its own: the input chain also
    // drops neighbour discovery, which alone would keep the sandbox from sending anything.
    const bridgeMac = readFileSync(`/sys/class/net/${br}/address`, 'utf8').trim();
    const sandboxMac = /link\/ether ([0-9a-f:]{17})/.exec(await procOk('ip', ['-n', ns, '-o', 'link', 'show', 'dev', 'eth0']))![1]!;
    await procOk('ip', ['-n', ns, 'neigh', 'replace', BRIDGE6, 'lladdr', bridgeMac, 'dev', 'eth0', 'nud', 'permanent']);
    await procOk('ip', ['neigh', 'replace', SANDBOX6, 'lladdr', sandboxMac, 'dev', br, 'nud', 'permanent']);
    let hostServer: Server | undefined;
    const handles: { chain: string; handle: string }[] = [];
    try {
      hostServer = createServer((s) => s.end('host:v6\n'));
      await new Promise<void>((r) => hostServer!.listen(0, '::', r));
      const port = (hostServer.address() as { port: number }).port;
      const probes = [`input=line:[${BRIDGE6}]:${port}`, `forward=line:[${PUBLIC6}]:80`];
      assert.deepEqual(await onHost(probes), { input: 'host:v6', forward: 'public:80' });
      assert.deepEqual(await inSandbox(probes), { input: 'none', forward: 'none' });
      // The control: with IPv6 let through at the top of this runtime's own chains, the same
      // probes get through, so it is the firewall that stopped them above.
      for (const chain of ['forward', 'input']) {
        const out = await procOk('nft', ['--echo', '--handle', 'insert', 'rule', 'inet', t.rt.nftTable, chain, 'iifname', br, 'meta', 'nfproto', 'ipv6', 'accept']);
        handles.push({ chain, handle: /# handle (\d+)/.exec(out)![1]! });
      }
      let open: Record<string, string> = {};
      for (let i = 0; i < 5 && !(open.input === 'host:v6' && open.forward === 'public:80'); i++) open = await inSandbox(probes);
      assert.deepEqual(open, { input: 'host:v6', forward: 'public:80' });
    } finally {
      for (const h of handles) await procOk('nft', ['delete', 'rule', 'inet', t.rt.nftTable, h.chain, 'handle', h.handle]);
      await proc('ip', ['neigh', 'del', SANDBOX6, 'dev', br]);
      hostServer?.close();
      writeFileSync(`/proc/sys/net/ipv6/conf/${br}/disable_ipv6`, '1');
    }
  });
});
