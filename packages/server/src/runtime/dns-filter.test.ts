// Root tests of the DNS filter (dns-filter.ts) with real sandboxes: their queries take the real path
// (bridge, nftables, the proxy's namespace, the filter, the daemon's own query to the resolver).
// The resolver is the test's own, at a public-looking address in a netns of the test's, which
// answers a.test and counts what reaches it: a refused query must never get there. Queries are
// sent from inside by a small perl program (perl-base is in every Debian image).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { baseLayer } from '../testing/fixtures.js';
import { testSpec } from '../testing/runtime-fixtures.js';
import { getText, startEgressLab, type EgressLab } from '../testing/web-host.js';
import { CrunRuntime } from './crun-runtime.js';
import type { EgressPolicy } from './egress-policy.js';

const tag = String(process.pid % 100000);
const WEB = '11.23.38.45';
/** The test's resolver: DNS on 53 (UDP and TCP), and on 80 what reached it (/seen). */
const DNS = '11.23.38.53';

const RESOLVER = `
const dgram = require('node:dgram'), net = require('node:net'), http = require('node:http');
const seen = [];
function answer(q) {
  let off = 12; const labels = [];
  while (q[off]) { labels.push(q.toString('latin1', off + 1, off + 1 + q[off])); off += 1 + q[off]; }
  const name = labels.join('.'), type = q.readUInt16BE(off + 1);
  seen.push(name + '/' + type);
  const h = Buffer.from(q.subarray(0, 12));
  h.writeUInt16BE(0x8180, 2); h.writeUInt16BE(1, 4); h.writeUInt16BE(0, 8); h.writeUInt16BE(0, 10);
  const an = [];
  if (name === 'a.test' && type === 1) an.push(Buffer.from('c00c000100010000000500040b17262d', 'hex'));
  if (name === 'a.test' && type === 16) an.push(Buffer.from('c00c0010000100000005000504686f6c61', 'hex'));
  if (name !== 'a.test') h[3] = 0x83;
  h.writeUInt16BE(an.length, 6);
  return Buffer.concat([h, q.subarray(12, off + 5), ...an]);
}
let pending = 3;
const up = () => { if (--pending === 0) process.stdout.write('ready\\n'); };
const u = dgram.createSocket('udp4');
u.on('message', (m, r) => u.send(answer(m), r.port, r.address));
u.bind(53, '${DNS}', up);
net.createServer((s) => {
  s.on('error', () => {});
  s.once('data', (d) => { const a = answer(d.subarray(2)); const l = Buffer.alloc(2); l.writeUInt16BE(a.length); s.end(Buffer.concat([l, a])); });
}).listen(53, '${DNS}', up);
http.createServer((req, res) => res.end(JSON.stringify(seen))).listen(80, '${DNS}', up);
`;

/** Inside: `dnsq SERVER udp|tcp TYPE NAME`, `dnsq SERVER raw HEX`, `dnsq SERVER flood TYPE NAME COUNT SECONDS`, `dnsq SERVER seq TYPE NAME COUNT` (ms per lookup). */
const DNSQ = `
use strict; use IO::Socket::INET; use IO::Select; use Time::HiRes;
my ($server, $mode, @a) = @ARGV;
sub query { my ($t, $name, $id) = @_; my $qn = join('', map { chr(length $_) . $_ } split /\\./, $name) . "\\0"; return pack('n6', $id, 0x0100, 1, 0, 0, 0) . $qn . pack('n2', $t, 1); }
sub show { my ($r) = @_; my ($id, $fl, $qd, $an) = unpack('n4', $r); print 'rcode=' . ($fl & 15) . " an=$an\\n"; }
if ($mode eq 'tcp') {
  my $s = IO::Socket::INET->new(PeerAddr => $server, PeerPort => 53, Proto => 'tcp', Timeout => 3) or do { print "refused\\n"; exit };
  my $q = query($a[0], $a[1], 4242); print $s pack('n', length $q) . $q;
  my $sel = IO::Select->new($s); my $buf = '';
  while (length($buf) < 2 || length($buf) < 2 + unpack('n', $buf)) { last unless $sel->can_read(3); my $n = sysread($s, $buf, 65536, length $buf); last unless $n; }
  if (length($buf) >= 2 && length($buf) >= 2 + unpack('n', $buf)) { show(substr($buf, 2)) } else { print "timeout\\n" }
  exit;
}
my $s = IO::Socket::INET->new(PeerAddr => $server, PeerPort => 53, Proto => 'udp') or die "socket: $!";
my $sel = IO::Select->new($s);
if ($mode eq 'flood') {
  my ($t, $name, $count, $secs) = @a; my ($sent, $got, $ok) = (0, 0, 0); my $end = time + $secs;
  my $drain = sub { my $r; while ($sel->can_read($_[0])) { recv($s, $r, 4096, 0) or last; $got++; $ok++ if ((unpack('n2', $r))[1] & 15) == 0; } };
  while ($sent < $count && time < $end) { send($s, query($t, $name, $sent & 0xffff), 0); $sent++; $drain->(0) if $sent % 50 == 0; }
  $drain->(1);
  print "sent=$sent answered=$got noerror=$ok\\n"; exit;
}
if ($mode eq 'seq') {
  my ($t, $name, $n) = @a; my $ok = 0; my $t0 = Time::HiRes::time();
  for my $i (1 .. $n) { send($s, query($t, $name, $i), 0); my $r; if ($sel->can_read(2) && recv($s, $r, 4096, 0)) { $ok++ if ((unpack('n2', $r))[1] & 15) == 0 } }
  printf "ok=%d ms=%.3f\n", $ok, (Time::HiRes::time() - $t0) * 1000 / $n; exit;
}
send($s, $mode eq 'raw' ? pack('H*', $a[0]) : query($a[0], $a[1], 4242), 0);
if ($sel->can_read(3)) { my $r; if (recv($s, $r, 65536, 0) && length $r >= 4) { show($r) } else { print "refused\\n" } } else { print "timeout\\n" }
`;

describe('DNS filter: with domain rules, DNS answers only what the policy allows', { timeout: 300_000 }, () => {
  let lab: EgressLab | undefined;
  const id = 'egdns1';
  const other = 'egdns2';
  const policy = (p: Partial<EgressPolicy>): EgressPolicy => ({ internet: true, allow: [], deny: [], ...p });
  const seen = async (): Promise<string[]> => JSON.parse(await getText(`http://${DNS}/`)) as string[];
  /** One lookup from inside `sb`: 'rcode=N an=M', 'timeout' or 'refused' (ICMP/reset), and how long it took. */
  const ask = async (sb: string, ...args: string[]): Promise<{ got: string; ms: number }> => {
    const t0 = performance.now();
    const r = await lab!.t.rt.exec(sb, ['perl', '/tmp/dnsq.pl', DNS, ...args]);
    return { got: r.stdout.trim() || r.stderr.trim(), ms: performance.now() - t0 };
  };
  const denied = async (sb: string) => (await lab!.t.rt.stats(sb)).egressDenied;

  before(async () => {
    lab = await startEgressLab({
      netns: `sbdns${tag}`,
      veth: `sbdn${tag}`.slice(0, 15),
      link: 150 + (process.pid % 50),
      addresses: [WEB, DNS],
      script: RESOLVER,
      id,
      resolve: async (name) => (name === 'a.test' ? [WEB] : []),
      runtime: { dnsResolvers: [DNS] },
    });
    await lab.putFile('/tmp/dnsq.pl', DNSQ);
    await lab.t.rt.create(testSpec(other, [(await baseLayer()).path], { internetAccess: true }));
    await lab.t.rt.exec(other, ['sh', '-c', 'base64 -d > /tmp/dnsq.pl'], { input: Buffer.from(DNSQ).toString('base64') + '\n' });
  });

  after(async () => {
    await lab?.close();
  });

  test('no policy: DNS goes to the resolver as before (the control)', async () => {
    assert.equal((await ask(id, 'udp', '16', 'x.evil.test')).got, 'rcode=3 an=0');
    assert.ok((await seen()).includes('x.evil.test/16'));
  });

  test("allow_out ['a.test']: a.test answers (UDP and TCP); x.evil.test is refused at once and never reaches the resolver", async () => {
    await lab!.t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    const before = (await seen()).length;
    assert.equal((await ask(id, 'udp', '1', 'a.test')).got, 'rcode=0 an=1');
    assert.equal((await ask(id, 'tcp', '1', 'a.test')).got, 'rcode=0 an=1');
    assert.equal((await ask(id, 'udp', '1', 'A.TeSt')).got, 'rcode=0 an=1', 'the name in any case');
    const d0 = await denied(id);
    for (const name of ['x.evil.test', 'deadbeef01.evil.test', 'sub.a.test']) {
      const r = await ask(id, 'udp', '1', name);
      assert.equal(r.got, 'rcode=5 an=0', name);
      assert.ok(r.ms < 2000, `refused at once, not a timeout (${Math.round(r.ms)} ms)`);
    }
    assert.equal((await ask(id, 'tcp', '1', 'x.evil.test')).got, 'rcode=5 an=0', 'over TCP too');
    const reached = (await seen()).slice(before);
    assert.deepEqual(reached, ['a.test/1', 'a.test/1', 'a.test/1'], 'only the allowed lookups reached the resolver, in lowercase');
    assert.ok((await denied(id)) >= d0 + 4, 'refusals are counted in egress_denied');
  });

  test('an allowed name: TXT and ANY are refused (only address types); a deny list alone refuses its names of any type', async () => {
    await lab!.t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    assert.equal((await ask(id, 'udp', '16', 'a.test')).got, 'rcode=5 an=0', 'TXT');
    assert.equal((await ask(id, 'udp', '255', 'a.test')).got, 'rcode=5 an=0', 'ANY');
    assert.equal((await ask(id, 'udp', '28', 'a.test')).got, 'rcode=0 an=0', 'AAAA passes');
    await lab!.t.rt.setEgress(id, policy({ deny: ['*.evil.test'] }));
    assert.equal((await ask(id, 'udp', '16', 'data.evil.test')).got, 'rcode=5 an=0');
    assert.equal((await ask(id, 'udp', '16', 'a.test')).got, 'rcode=0 an=1', 'other names, any type');
  });

  test('malformed packets are dropped or refused; the filter goes on answering', async () => {
    await lab!.t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    const before = (await seen()).length;
    assert.equal((await ask(id, 'raw', '12')).got, 'timeout', 'too short for a header: no answer');
    assert.equal((await ask(id, 'raw', '123401000002000000000000016104746573740000010001016204746573740000010001')).got, 'rcode=5 an=0', 'two questions');
    assert.equal((await ask(id, 'raw', '123401000001000000000000c00c00010001')).got, 'rcode=5 an=0', 'a compression pointer');
    assert.equal((await ask(id, 'raw', '1234010000010000000000003f')).got, 'rcode=5 an=0', 'cut in the name');
    assert.equal((await ask(id, 'raw', '123481000001000000000000016104746573740000010001')).got, 'timeout', 'an answer sent as a query');
    assert.deepEqual((await seen()).slice(before), [], 'none reached the resolver');
    assert.equal((await ask(id, 'udp', '1', 'a.test')).got, 'rcode=0 an=1');
  });

  test("a flood from one sandbox is bounded, and another sandbox's lookups still answer at once", async (t) => {
    await lab!.t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    await lab!.t.rt.setEgress(other, policy({ allow: ['a.test'] }));
    // The other sandbox's lookups at rest (the exec into the sandbox is most of each figure).
    const rest: number[] = [];
    for (let i = 0; i < 10; i++) rest.push((await ask(other, 'udp', '1', 'a.test')).ms);
    rest.sort((a, b) => a - b);
    const before = (await seen()).length;
    const t0 = performance.now();
    const flood = lab!.t.rt.exec(id, ['perl', '/tmp/dnsq.pl', DNS, 'flood', '1', 'a.test', '100000', '4']);
    await new Promise((r) => setTimeout(r, 500));
    const times: number[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await ask(other, 'udp', '1', 'a.test');
      assert.equal(r.got, 'rcode=0 an=1', `the other sandbox's lookup ${i}`);
      times.push(r.ms);
    }
    const out = (await flood).stdout.trim();
    const secs = (performance.now() - t0) / 1000;
    const m = /sent=(\d+) answered=(\d+) noerror=(\d+)/.exec(out);
    assert.ok(m, out);
    const [sent, , noerror] = [Number(m[1]), Number(m[2]), Number(m[3])];
    const upstream = (await seen()).slice(before).length - 10;
    // The filter's rate (100/s, bursts of 200) bounds what it asks the resolver for that sandbox.
    const bound = 200 + 100 * secs + 20;
    assert.ok(sent > 5 * bound, `the flood was a flood (${sent} sent)`);
    assert.ok(upstream <= bound && noerror <= bound, `${upstream} lookups reached the resolver, ${noerror} answered, for ${sent} sent in ${secs.toFixed(1)} s (bound ${Math.round(bound)})`);
    times.sort((a, b) => a - b);
    t.diagnostic(`flood: ${sent} sent in ${secs.toFixed(1)} s, ${noerror} answered, ${upstream} reached the resolver; the other sandbox's lookups: median ${Math.round(times[5]!)} ms, max ${Math.round(times[9]!)} ms (at rest: median ${Math.round(rest[5]!)} ms)`);
    assert.ok(times[times.length - 1]! < 1500, `the other sandbox's lookups during the flood: ${times.map(Math.round).join(', ')} ms`);
  });

  test('what the filter costs a lookup: sequential lookups of an allowed name, filtered and not, same run', async (t) => {
    const seq = async () => {
      const out = (await lab!.t.rt.exec(other, ['perl', '/tmp/dnsq.pl', DNS, 'seq', '1', 'a.test', '100'])).stdout.trim();
      const m = /ok=(\d+) ms=([\d.]+)/.exec(out);
      assert.ok(m && m[1] === '100', out);
      return Number(m[2]);
    };
    const plain: number[] = [];
    const filtered: number[] = [];
    for (let round = 0; round < 3; round++) {
      await lab!.t.rt.setEgress(other, policy({}));
      plain.push(await seq());
      await lab!.t.rt.setEgress(other, policy({ allow: ['a.test'] }));
      // 100 lookups fit in the filter's burst (200) once the rate's bucket is full again.
      await new Promise((r) => setTimeout(r, 2000));
      filtered.push(await seq());
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[1]!;
    t.diagnostic(`lookup: ${median(plain).toFixed(3)} ms plain, ${median(filtered).toFixed(3)} ms through the filter (+${(median(filtered) - median(plain)).toFixed(3)} ms)`);
    assert.ok(median(filtered) < median(plain) + 5, 'the filter adds well under 5 ms to a lookup');
  });

  test('internet off: no DNS at all, not even of an allowed name', async () => {
    await lab!.t.rt.setEgress(id, policy({ internet: false }));
    const r = await ask(id, 'udp', '1', 'a.test');
    assert.notEqual(r.got, 'rcode=0 an=1');
    assert.match(r.got, /refused|timeout/);
    await lab!.t.rt.setEgress(id, policy({}));
    assert.equal((await ask(id, 'udp', '1', 'a.test')).got, 'rcode=0 an=1', 'back to the default: DNS as before');
  });

  test('(last) while the daemon is down, filtered DNS is refused at once, not let through; after a restart the filter answers again', async () => {
    await lab!.t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    const opts = lab!.t.rt.options;
    await lab!.t.rt.close();
    const before = (await seen()).length;
    const down = await ask(id, 'udp', '1', 'x.evil.test');
    assert.equal(down.got, 'refused', 'an ICMP refusal from the sandbox chain');
    assert.ok(down.ms < 2000, `at once (${Math.round(down.ms)} ms)`);
    assert.equal((await ask(id, 'tcp', '1', 'a.test')).got, 'refused');
    assert.deepEqual((await seen()).slice(before), [], 'nothing reached the resolver');
    const again = new CrunRuntime(opts);
    try {
      await again.setupHost();
      lab!.t = { ...lab!.t, rt: again };
      assert.equal((await ask(id, 'udp', '1', 'a.test')).got, 'rcode=0 an=1');
      assert.equal((await ask(id, 'udp', '1', 'x.evil.test')).got, 'rcode=5 an=0');
    } finally {
      // The lab's teardown holds the first runtime: this one's sandboxes and filter end here.
      await again.destroy(id).catch(() => undefined);
      await again.destroy(other).catch(() => undefined);
      await again.close();
    }
  });
});
