// bench/egress: what a sandbox's egress policy adds to opening a connection, straight on the
// runtime. One sandbox opens connections, one after the other, to a web server in a network
// namespace of the benchmark's own behind a host route to a public-looking address (the plumbing of
// egress-rules.test.ts): with no policy (the baseline), with an allow list of 100 addresses and
// CIDRs (99 that do not match, then the server's: nftables looks it up in the sandbox's interval
// set), and with an allow list of 100 domains (99 others, then the server's name: the egress proxy
// reads the name, decides and connects on). The loop runs inside the sandbox (perl, Time::HiRes),
// so each figure is one connection's own time, not an exec's; the cases take turns in rounds, so
// that noise of the machine falls on all of them alike.
//   - TCP connect: connect() returning (SYN → SYN/ACK), port 80.
//   - first byte over HTTP: connect, one request with a Host header, the answer's first byte (80).
//   - first byte over TLS: connect, a real ClientHello naming the server (recorded once on the
//     host from Node's TLS client, sent as is), the ServerHello's first byte (443).
// With domain rules a connection to 80 or 443 is accepted by the proxy itself, so its TCP connect
// says nothing: only the first byte counts there.
// Usage (root, after npm run build): node bench/dist/egress.js [N=300] [ROUNDS=3]
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { connect as tlsConnect } from 'node:tls';
import { TEST_DATA_DIR } from '../../e2e/dist/harness.js';
import { loadConfig } from '../../packages/server/dist/config/index.js';
import { CrunRuntime } from '../../packages/server/dist/runtime/index.js';
import type { EgressPolicy } from '../../packages/server/dist/runtime/egress-policy.js';
import { clientHelloState, sniOf } from '../../packages/server/dist/runtime/egress-sniff.js';
import { proc, procOk } from '../../packages/server/dist/runtime/proc.js';
import { baseLayer } from '../../packages/server/dist/testing/fixtures.js';
import { percentile } from './stats.js';

const N = Number(process.argv[2] ?? 300);
const ROUNDS = Number(process.argv[3] ?? 3);
/** Connections at the start of each loop that are not counted (neighbour entries, the proxy's name cache). */
const WARMUP = 5;
const GOAL_MS = 1;

const tag = `eg${process.pid % 100000}`;
const NS = `sbbench${tag}`;
const VETH = `sbeh${process.pid % 100000}`;
const LINK = 200 + (process.pid % 50);
/** The server's address and name; other than the test's (11.23.34.45/46), whose routes may be up meanwhile. */
const WEB = `11.45.${process.pid % 250}.67`;
const NAME = 'web.bench.test';
const ID = `sb${tag}`;

const SERVER = `
const http = require('node:http'), https = require('node:https'), fs = require('node:fs');
const answer = (req, res) => { res.setHeader('connection', 'close'); res.end('ok\\n'); };
let pending = 2;
const up = () => { if (--pending === 0) process.stdout.write('ready\\n'); };
const h = http.createServer(answer);
h.on('clientError', (_e, s) => s.destroy());
h.listen(80, '0.0.0.0', up);
const t = https.createServer({ key: fs.readFileSync(process.env.KEY), cert: fs.readFileSync(process.env.CERT) }, answer);
t.on('tlsClientError', () => {});
t.listen(443, '0.0.0.0', up);
`;

/**
 * Inside the sandbox: N connections to ip:port one after the other, each sending the payload (hex)
 * and reading one byte. A line per connection: µs to connect, µs to the first byte, that byte (hex);
 * or "fail ...".
 */
const CLIENT = `
use strict; use Socket; use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
my ($ip, $port, $n, $hex) = @ARGV;
my $payload = pack('H*', $hex);
my $addr = pack_sockaddr_in($port, inet_aton($ip));
$| = 1;
for my $i (1 .. $n) {
  socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
  my $t0 = clock_gettime(CLOCK_MONOTONIC);
  if (!connect($s, $addr)) { print "fail connect: $!\\n"; close $s; next; }
  my $t1 = clock_gettime(CLOCK_MONOTONIC);
  if ((syswrite($s, $payload) // -1) != length $payload) { print "fail write: $!\\n"; close $s; next; }
  my $got = sysread($s, my $b, 1);
  my $t2 = clock_gettime(CLOCK_MONOTONIC);
  close $s;
  if (!$got) { print "fail read: ", (defined $got ? 'closed' : $!), "\\n"; next; }
  printf "%.1f %.1f %02x\\n", ($t1 - $t0) * 1e6, ($t2 - $t0) * 1e6, ord $b;
}
`;

const HTTP_REQUEST = Buffer.from(`GET / HTTP/1.1\r\nHost: ${NAME}\r\nConnection: close\r\n\r\n`);

/** 99 addresses and CIDRs of public-looking ranges, none holding WEB, none adjacent (the set would merge them). */
function otherCidrs(): string[] {
  const out: string[] = [];
  for (let i = 0; i < 99; i++) {
    const a = 20 + i; // 20..118: never 11.x
    if (i % 3 === 0) out.push(`${a}.${(i * 7) % 250}.${(i * 13) % 250}.${1 + (i % 200)}`);
    else if (i % 3 === 1) out.push(`${a}.${(i * 11) % 250}.${(i * 5) % 250}.0/24`);
    else out.push(`${a}.${(i * 3) % 250}.0.0/16`);
  }
  return out;
}

/** 99 other names, a quarter of them `*.` wildcards. */
function otherDomains(): string[] {
  return Array.from({ length: 99 }, (_, i) => (i % 4 === 3 ? `*.svc${i}.example.org` : `api${i}.example${i % 10}.com`));
}

interface Case {
  key: 'none-http' | 'cidr-http' | 'dom-http' | 'none-tls' | 'dom-tls';
  policy: EgressPolicy;
  port: number;
  payload: Buffer;
  /** The first byte the server's answer must start with. */
  first: number;
}

interface Samples {
  connect: number[];
  firstByte: number[];
}

/** The ClientHello Node's TLS client sends for `servername`, caught by a plain TCP listener on the host. */
async function recordClientHello(servername: string): Promise<Buffer> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  let client: Socket | undefined;
  try {
    const hello = new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no ClientHello in 5 s')), 5000);
      server.once('connection', (s: Socket) => {
        let buf = Buffer.alloc(0);
        s.on('error', () => undefined);
        s.on('data', (c: Buffer) => {
          buf = Buffer.concat([buf, c]);
          const state = clientHelloState(buf);
          if (state === 'partial') return;
          clearTimeout(timer);
          s.destroy();
          if (state === 'complete') resolve(buf);
          else reject(new Error('the recorded bytes are not a ClientHello'));
        });
      });
    });
    client = tlsConnect({ host: '127.0.0.1', port, servername, rejectUnauthorized: false });
    client.on('error', () => undefined);
    const b = await hello;
    if (sniOf(b) !== servername) throw new Error(`the recorded ClientHello names ${sniOf(b)}, not ${servername}`);
    return b;
  } finally {
    client?.destroy();
    server.close();
  }
}

const ms = (x: number) => (Number.isFinite(x) ? `${x.toFixed(3)} ms` : 'n/a');
const signed = (x: number) => `${x >= 0 ? '+' : ''}${ms(x)}`;

function line(name: string, samples: number[], baseline?: number[]): string {
  const p50 = percentile(samples, 50);
  let s = `  ${name.padEnd(40)} p50 ${ms(p50).padStart(10)}  p90 ${ms(percentile(samples, 90)).padStart(10)}  (n=${samples.length})`;
  if (baseline) s += `   extra p50 ${signed(p50 - percentile(baseline, 50))}`;
  return s;
}

async function main(): Promise<void> {
  const layer = (await baseLayer()).path;
  const dir = mkdtempSync(join(tmpdir(), 'sbx-bench-egress-'));
  const dataDir = join(TEST_DATA_DIR, `bench-${tag}`);
  let server: ChildProcess | undefined;
  let rt: CrunRuntime | undefined;
  let routed = false;
  let cleaned: Promise<void> | undefined;
  const cleanup = () =>
    (cleaned ??= (async () => {
      if (rt) {
        await rt.destroy(ID).catch((err: Error) => console.error(`destroy ${ID}: ${err.message}`));
        await rt.close().catch(() => undefined);
        await rt.teardownHost().catch((err: Error) => console.error(`teardown: ${err.message}`));
      }
      rmSync(dataDir, { recursive: true, force: true });
      if (server && server.exitCode === null) server.kill('SIGKILL');
      if (routed) await proc('ip', ['route', 'del', `${WEB}/32`]);
      await proc('ip', ['netns', 'del', NS]);
      await proc('ip', ['link', 'del', VETH]);
      rmSync(dir, { recursive: true, force: true });
    })());
  const onSignal = (sig: NodeJS.Signals) => void cleanup().finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    // The server: a certificate for its name (a throwaway self-signed one: the client checks nothing).
    await procOk('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'web.key', '-out', 'web.pem', '-days', '1', '-subj', `/CN=${NAME}`, '-addext', `subjectAltName=DNS:${NAME}`], { cwd: dir });
    await procOk('ip', ['-batch', '-'], {
      input: [`netns add ${NS}`, `link add ${VETH} type veth peer name eth0 netns ${NS}`, `addr add 169.254.${LINK}.1/30 dev ${VETH}`, `link set ${VETH} up`].join('\n') + '\n',
    });
    await procOk('ip', ['-n', NS, '-batch', '-'], {
      input: ['link set lo up', 'link set eth0 up', `addr add 169.254.${LINK}.2/30 dev eth0`, `addr add ${WEB}/32 dev lo`, `route add default via 169.254.${LINK}.1`].join('\n') + '\n',
    });
    routed = true;
    await procOk('ip', ['route', 'replace', `${WEB}/32`, 'via', `169.254.${LINK}.2`]);
    server = spawn('ip', ['netns', 'exec', NS, process.execPath, '-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, KEY: join(dir, 'web.key'), CERT: join(dir, 'web.pem') } });
    await new Promise<void>((resolve, reject) => {
      server!.stdout!.once('data', () => resolve());
      server!.once('exit', (c) => reject(new Error(`web server exited ${c}`)));
    });
    const hello = await recordClientHello(NAME);

    rt = new CrunRuntime({
      dataDir,
      agentBundlePath: loadConfig({ SANDBOXD_DATA_DIR: dataDir }).agentBundlePath,
      bridgeName: `sb${tag}`.slice(0, 15),
      subnetCidr: `10.98.${process.pid % 250}.0/24`,
      cgroupParent: `sandboxd-bench-${tag}`,
      egressResolve: async (name) => (name === NAME ? [WEB] : []),
    });
    await rt.setupHost();
    await rt.create({ id: ID, lowerDirs: [layer], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 256 }, internetAccess: true, hostname: ID, env: { SANDBOX_ID: ID, PATH: '/usr/bin:/bin' } });

    const none: EgressPolicy = { internet: true, allow: [], deny: [] };
    const cidrs: EgressPolicy = { internet: true, allow: [...otherCidrs(), WEB], deny: [] };
    const domains: EgressPolicy = { internet: true, allow: [...otherDomains(), NAME], deny: [] };
    const cases: Case[] = [
      { key: 'none-http', policy: none, port: 80, payload: HTTP_REQUEST, first: 0x48 },
      { key: 'cidr-http', policy: cidrs, port: 80, payload: HTTP_REQUEST, first: 0x48 },
      { key: 'dom-http', policy: domains, port: 80, payload: HTTP_REQUEST, first: 0x48 },
      { key: 'none-tls', policy: none, port: 443, payload: hello, first: 0x16 },
      { key: 'dom-tls', policy: domains, port: 443, payload: hello, first: 0x16 },
    ];
    // Controls: without the server's own entry, the same lists refuse it (the lookup is a real one).
    const client = (port: number, payload: Buffer, n: number) => rt!.exec(ID, ['timeout', '60', 'perl', '-e', CLIENT, WEB, String(port), String(n), payload.toString('hex')]);
    for (const [what, p, port, payload] of [
      ['addresses', cidrs, 80, HTTP_REQUEST],
      ['domains', domains, 443, hello],
    ] as const) {
      await rt.setEgress(ID, { ...p, allow: p.allow.filter((e) => e !== WEB && e !== NAME) });
      const r = await client(port, payload, 1);
      if (!r.stdout.startsWith('fail')) throw new Error(`control: the allow list of ${what} without the server let it through: ${r.stdout.trim()} ${r.stderr.trim()}`);
    }
    const got = new Map<Case['key'], Samples>(cases.map((c) => [c.key, { connect: [], firstByte: [] }]));
    const perRound = Math.ceil(N / ROUNDS);
    const t0 = performance.now();
    for (let round = 0; round < ROUNDS; round++) {
      for (const c of cases) {
        await rt.setEgress(ID, c.policy);
        const r = await client(c.port, c.payload, perRound + WARMUP);
        if (r.code !== 0) throw new Error(`${c.key}: the client exited ${r.code}: ${r.stderr.trim()}`);
        const lines = r.stdout.trim().split('\n');
        const failed = lines.filter((l) => !/^[\d.]+ [\d.]+ [0-9a-f]{2}$/.test(l) || parseInt(l.split(' ')[2]!, 16) !== c.first);
        if (failed.length) throw new Error(`${c.key}: ${failed.length} of ${lines.length} connections failed, e.g. ${JSON.stringify(failed[0])}`);
        const s = got.get(c.key)!;
        for (const l of lines.slice(WARMUP)) {
          const [connect, first] = l.split(' ').map(Number) as [number, number];
          s.connect.push(connect / 1000);
          s.firstByte.push(first / 1000);
        }
      }
    }
    const wall = (performance.now() - t0) / 1000;

    const g = (k: Case['key']) => got.get(k)!;
    console.log(`\nbench/egress on ${new Date().toISOString()} (N=${perRound * ROUNDS} connections per case in ${ROUNDS} interleaved rounds, one at a time from one sandbox to a server in a netns behind a host route, straight on the runtime; ${wall.toFixed(1)} s)`);
    console.log('TCP connect (connect() returns), port 80:');
    console.log(line('no policy (baseline)', g('none-http').connect));
    console.log(line('allow list: 100 addresses/CIDRs', g('cidr-http').connect, g('none-http').connect));
    console.log('connect + HTTP request → first byte of the answer, port 80 (Host header):');
    console.log(line('no policy (baseline)', g('none-http').firstByte));
    console.log(line('allow list: 100 addresses/CIDRs', g('cidr-http').firstByte, g('none-http').firstByte));
    console.log(line('allow list: 100 domains (egress proxy)', g('dom-http').firstByte, g('none-http').firstByte));
    console.log('connect + TLS ClientHello (SNI) → first byte of the ServerHello, port 443:');
    console.log(line('no policy (baseline)', g('none-tls').firstByte));
    console.log(line('allow list: 100 domains (egress proxy)', g('dom-tls').firstByte, g('none-tls').firstByte));
    const extra = percentile(g('cidr-http').connect, 50) - percentile(g('none-http').connect, 50);
    const verdict = extra <= GOAL_MS ? 'met' : 'NOT met';
    console.log(`goal: connection setup with a 100-entry allow list ≤ ${GOAL_MS} ms extra (p50): ${verdict} (${signed(extra)} on the TCP connect)`);
    const dHttp = percentile(g('dom-http').firstByte, 50) - percentile(g('none-http').firstByte, 50);
    const dTls = percentile(g('dom-tls').firstByte, 50) - percentile(g('none-tls').firstByte, 50);
    console.log(`domains through the egress proxy: ${signed(dHttp)} to the first byte over HTTP, ${signed(dTls)} over TLS (p50; no goal)`);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}

await main();
