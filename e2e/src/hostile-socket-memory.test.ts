// Socket buffers are kernel memory that cgroup v1 charges to no memory limit unless the sandbox's
// cgroup has a TCP limit (memory.kmem.tcp.limit_in_bytes, which also turns socket accounting on).
// Before the fix a sandbox of 512 MB filled loopback TCP connections and held 570 MB of the
// host's TCP memory (tcp_mem is host-wide: past its hard limit every TCP socket of the host
// stalls, the API's and every other sandbox's included), and UDP sockets held 264 MB of udp_mem.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { agent, api, createSandbox, startServer, type CreatedSandbox, type TestServer } from './harness.js';

let server: TestServer;

before(async () => {
  server = await startServer({ templates: ['base'] });
});
after(async () => {
  await server?.stop();
});

/** Pages of `proto` memory in use host-wide (/proc/net/sockstat). */
function sockstatPages(proto: 'TCP' | 'UDP'): number {
  const m = new RegExp(`^${proto}: .*\\bmem (\\d+)`, 'm').exec(readFileSync('/proc/net/sockstat', 'utf8'));
  return Number(m?.[1] ?? 0);
}

const TCP_FILL = `
use IO::Socket::INET;
$| = 1;
my $n = shift;
my $srv = IO::Socket::INET->new(Listen => 4096, LocalAddr => '127.0.0.1', LocalPort => 0, ReuseAddr => 1) or die "listen: $!";
my (@keep, $tot);
my $buf = 'x' x 65536;
for (1 .. $n) {
  my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $srv->sockport) or die "connect: $!";
  my $a = $srv->accept;
  $c->blocking(0);
  while (1) { my $w = syswrite($c, $buf); last unless defined $w && $w > 0; $tot += $w }
  push @keep, $c, $a;
}
print "filled $n $tot\\n";
sleep 25;
`;

const UDP_FILL = `
use IO::Socket::INET;
$| = 1;
my $n = shift;
my $snd = IO::Socket::INET->new(Proto => 'udp') or die;
my @keep;
my $msg = 'x' x 60000;
for (1 .. $n) {
  my $r = IO::Socket::INET->new(Proto => 'udp', LocalAddr => '127.0.0.1', LocalPort => 0) or die "udp: $!";
  my $to = $r->sockname;
  send($snd, $msg, 0, $to) for 1 .. 8;
  push @keep, $r;
}
print "filled $n\\n";
sleep 25;
`;

/** Starts `script` in the background, waits until it says it filled its sockets, returns the host's pages then. */
async function fill(sb: CreatedSandbox, script: string, arg: number, proto: 'TCP' | 'UDP'): Promise<number> {
  await agent(sb, 'POST', '/files/write', { path: '/root/fill.pl', content: script });
  const r = await agent(sb, 'POST', '/commands/run', { command: 'bash', args: ['-c', `ulimit -n 8192; perl /root/fill.pl ${arg} > /root/fill.out 2>&1 &`] });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  for (let i = 0; i < 120; i++) {
    await new Promise((res) => setTimeout(res, 500));
    const out = (await agent(sb, 'POST', '/commands/run', { command: 'cat', args: ['/root/fill.out'] })).body.stdout as string;
    if (out.includes('filled')) return sockstatPages(proto);
    assert.doesNotMatch(out, /listen|connect|udp:/, out);
  }
  throw new Error('the fill did not finish');
}

describe("a sandbox's socket buffers count against it, not against the host", { timeout: 300_000 }, () => {
  test('150 loopback TCP connections filled, then 1500 UDP sockets: the host holds at most ~the 64 MB limit each', async (t) => {
    const sb = await createSandbox(server, { timeout_seconds: 300 });
    assert.equal(sb.body.resources.memory_mb, 512);
    const tcpBefore = sockstatPages('TCP');
    const tcpAfter = await fill(sb, TCP_FILL, 150, 'TCP');
    const tcpMb = ((tcpAfter - tcpBefore) * 4096) / 2 ** 20;
    t.diagnostic(`TCP: ${Math.round(tcpMb)} MB (${(await agent(sb, 'POST', '/commands/run', { command: 'cat', args: ['/root/fill.out'] })).body.stdout.trim()})`);
    assert.ok(tcpMb < 100, `the sandbox holds ${Math.round(tcpMb)} MB of the host's TCP memory`);
    // The sandbox's own network still works within its limit, and the service is untouched.
    assert.equal((await agent(sb, 'POST', '/commands/run', { command: 'true' })).status, 200);
    assert.equal((await api(server, 'GET', '/health')).status, 200);
    await agent(sb, 'POST', '/commands/run', { command: 'pkill', args: ['-f', 'fill.pl'] });

    const udpBefore = sockstatPages('UDP');
    const udpAfter = await fill(sb, UDP_FILL, 1500, 'UDP');
    const udpMb = ((udpAfter - udpBefore) * 4096) / 2 ** 20;
    t.diagnostic(`UDP: ${Math.round(udpMb)} MB`);
    assert.ok(udpMb < 100, `the sandbox holds ${Math.round(udpMb)} MB of the host's UDP memory`);
    await agent(sb, 'POST', '/commands/run', { command: 'pkill', args: ['-f', 'fill.pl'] });
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });
});
