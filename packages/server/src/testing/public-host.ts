import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { proc, procOk } from '../runtime/proc.js';

/**
 * A stand-in for hosts on the internet: a network namespace behind a veth from the host, with
 * host routes (/32, /128) for the addresses it plays, so that a sandbox's packets to them take the
 * real path (bridge, forward chain, NAT) and the test sees what arrives. Listeners on every
 * address: tcp/80 and tcp/853 greet with `public:<port>`, udp and tcp 53 and udp/853 answer DNS
 * queries.
 */
export interface PublicHost {
  netns: string;
  /** The host end of the veth. */
  veth: string;
  /** Tears everything down (routes, listener, netns and so the veth); safe to call twice. */
  close: () => Promise<void>;
}

const LISTENER = `
const net = require('node:net');
const dgram = require('node:dgram');
// A DNS response to any query: the query itself with QR (and RA) set, no answers.
const answer = (q) => { const r = Buffer.from(q); r[2] |= 0x80; r[3] |= 0x80; return r; };
let pending = 0;
const up = () => { if (--pending === 0) process.stdout.write('ready\\n'); };
for (const port of [80, 853]) {
  pending++;
  net.createServer((s) => { s.on('error', () => {}); s.end('public:' + port + '\\n'); }).listen({ port, host: '::' }, up);
}
pending++;
net.createServer((s) => {
  s.on('error', () => {});
  let buf = Buffer.alloc(0);
  s.on('data', (c) => {
    buf = Buffer.concat([buf, c]);
    if (buf.length < 2 || buf.length < 2 + buf.readUInt16BE(0)) return;
    const r = answer(buf.subarray(2, 2 + buf.readUInt16BE(0)));
    const len = Buffer.alloc(2);
    len.writeUInt16BE(r.length);
    s.end(Buffer.concat([len, r]));
  });
}).listen({ port: 53, host: '::' }, up);
// One UDP socket per address: a wildcard one would answer from whichever address routing picks,
// and a connected client drops that.
for (const addr of JSON.parse(process.env.PUBLIC_ADDRESSES)) {
  for (const port of [53, 853]) {
    pending++;
    const u = dgram.createSocket(addr.includes(':') ? 'udp6' : 'udp4');
    u.on('message', (m, from) => { if (m.length >= 12) u.send(answer(m), from.port, from.address); });
    u.bind(port, addr, up);
  }
}
`;

/**
 * `tag` names the netns (`sbpub<tag>`) and veth (`sbph<tag>`, at most 15 characters); `link` is
 * the third octet of the veth's 169.254.<link>.0/30 and `v6` a hex group for its fd5d:<v6>::/64.
 */
export async function startPublicHost(opts: { tag: string; link: number; v6: string; ipv4: string[]; ipv6: string[] }): Promise<PublicHost> {
  const netns = `sbpub${opts.tag}`;
  const veth = `sbph${opts.tag}`.slice(0, 15);
  const hostLink = `169.254.${opts.link}.1`;
  const nsLink = `169.254.${opts.link}.2`;
  const hostLink6 = `fd5d:${opts.v6}::1`;
  const nsLink6 = `fd5d:${opts.v6}::2`;
  let listener: ChildProcess | undefined;
  const routes: string[][] = [];
  const close = async () => {
    if (listener && listener.exitCode === null && listener.signalCode === null) {
      const exited = new Promise((r) => listener!.once('close', r));
      listener.kill('SIGKILL');
      await exited;
    }
    for (const r of routes.splice(0)) await proc('ip', ['route', 'del', ...r]);
    if (existsSync(`/run/netns/${netns}`)) await procOk('ip', ['netns', 'del', netns]);
    if (existsSync(`/sys/class/net/${veth}`)) await proc('ip', ['link', 'del', veth]);
  };
  try {
    await procOk('ip', ['-batch', '-'], {
      input: [
        `netns add ${netns}`,
        `link add ${veth} type veth peer name eth0 netns ${netns}`,
        `addr add ${hostLink}/30 dev ${veth}`,
        `addr add ${hostLink6}/64 dev ${veth} nodad`,
        `link set ${veth} up`,
        '',
      ].join('\n'),
    });
    await procOk('ip', ['-n', netns, '-batch', '-'], {
      input: [
        'link set lo up',
        `addr add ${nsLink}/30 dev eth0`,
        `addr add ${nsLink6}/64 dev eth0 nodad`,
        'link set eth0 up',
        `route add default via ${hostLink}`,
        `route add default via ${hostLink6}`,
        ...opts.ipv4.map((a) => `addr add ${a}/32 dev lo`),
        ...opts.ipv6.map((a) => `addr add ${a}/128 dev lo nodad`),
        '',
      ].join('\n'),
    });
    for (const a of opts.ipv4) {
      await procOk('ip', ['route', 'add', `${a}/32`, 'via', nsLink, 'dev', veth]);
      routes.push([`${a}/32`, 'via', nsLink, 'dev', veth]);
    }
    for (const a of opts.ipv6) {
      await procOk('ip', ['-6', 'route', 'add', `${a}/128`, 'via', nsLink6, 'dev', veth]);
      routes.push([`${a}/128`, 'via', nsLink6, 'dev', veth]);
    }
    listener = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', LISTENER], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, PUBLIC_ADDRESSES: JSON.stringify([...opts.ipv4, nsLink, ...opts.ipv6]) },
    });
    await new Promise<void>((resolve, reject) => {
      let err = '';
      listener!.stderr!.setEncoding('utf8').on('data', (c: string) => (err += c));
      listener!.stdout!.setEncoding('utf8').on('data', (c: string) => c.includes('ready') && resolve());
      listener!.once('close', (code) => reject(new Error(`public host listener exited ${code}: ${err.trim()}`)));
      listener!.once('error', reject);
    });
  } catch (err) {
    await close();
    throw err;
  }
  return { netns, veth, close };
}

/**
 * Probes run in parallel by perl (perl-base is in every Debian image, IO::Socket::IP included),
 * the same script on the host and in a sandbox. Each argument `name=kind:address:port` prints
 * `name <result>`: kind `line` connects over TCP and reads one line (the greeting), `dnsudp` and
 * `dnstcp` send a DNS query for `query` and print `answer` when a response with its id comes back.
 * A probe that gets nothing in 2 s prints `none`.
 */
export function probeScript(query: string): string {
  return `
use IO::Socket::IP; use IO::Select;
my @kids;
for my $arg (@ARGV) {
  my ($name, $spec) = split /=/, $arg, 2;
  my ($kind, $rest) = split /:/, $spec, 2;
  my ($addr, $port) = $rest =~ /^\\[?(.*?)\\]?:(\\d+)$/;
  my $pid = fork;
  if ($pid) { push @kids, $pid; next }
  my $out = eval {
    local $SIG{ALRM} = sub { die "timeout\\n" };
    alarm 2;
    my $s = IO::Socket::IP->new(PeerHost => $addr, PeerPort => $port, Proto => $kind eq 'dnsudp' ? 'udp' : 'tcp', Timeout => 2) or die "connect\\n";
    if ($kind eq 'line') { my $l = <$s>; defined $l or die "eof\\n"; chomp $l; $l }
    else {
      my $id = int(rand(65535));
      my $q = pack('n6', $id, 0x0100, 1, 0, 0, 0) . join('', map { chr(length $_) . $_ } split /\\./, '${query}') . "\\0" . pack('n2', 1, 1);
      my $buf = '';
      if ($kind eq 'dnstcp') {
        print $s pack('n', length $q) . $q; $s->flush;
        read($s, my $len, 2) == 2 or die "eof\\n";
        read($s, $buf, unpack('n', $len)) or die "eof\\n";
      } else {
        $s->send($q);
        IO::Select->new($s)->can_read(2) or die "silent\\n";
        $s->recv($buf, 4096);
      }
      my ($rid, $flags) = unpack('n2', $buf);
      ($rid == $id && ($flags & 0x8000)) ? 'answer' : 'junk';
    }
  };
  print "$name ", (defined $out ? $out : 'none'), "\\n";
  exit 0;
}
waitpid($_, 0) for @kids;
`;
}

/** `name result` lines of probeScript into a record. */
export function parseProbes(stdout: string): Record<string, string> {
  return Object.fromEntries(stdout.trim().split('\n').filter(Boolean).map((l) => l.split(' ', 2) as [string, string]));
}
