// Red-team tests of the egress proxy (egress-proxy.ts): ways a sandbox could get around its domain
// rules, or stop the daemon, through the proxy. Each test is one finding of a red-team pass, and
// asserts that it stays closed (each control shows the probe reaches what it probes).
// Same setup as egress-rules.test.ts: web servers in a netns of the test's own, behind host routes.
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { clientHelloBytes, getText, startEgressLab, type EgressLab } from '../testing/web-host.js';
import type { TestRuntime } from '../testing/runtime-fixtures.js';
import type { EgressPolicy } from './egress-policy.js';
import { procOk } from './proc.js';

const tag = String(process.pid % 100000);
const NS = `sbrtw${tag}`;
const VETH = `sbrw${tag}`.slice(0, 15);
const LINK = 100 + (process.pid % 50);
const WEB1 = '11.23.35.45';
const WEB3 = '11.23.35.47';
const NAMES: Record<string, string[]> = { 'a.test': [WEB1], 'b.test': [WEB1] };

const SERVER = `
const http = require('node:http'), https = require('node:https'), net = require('node:net'), fs = require('node:fs'), tls = require('node:tls');
const sni = [];
const answer = (req, res) => {
  if (req.url === '/sni') return res.end(JSON.stringify(sni) + '\\n');
  if (req.url === '/slow') {
    let i = 0;
    const t = setInterval(() => { res.write('x'); if (++i === 12) { clearInterval(t); res.end('\\n'); } }, 500);
    return;
  }
  const hosts = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i].toLowerCase() === 'host') hosts.push(req.rawHeaders[i + 1]);
  res.end('web:' + hosts.join(',') + ':' + req.url + '\\n');
};
const ctx = tls.createSecureContext({ key: fs.readFileSync(process.env.KEY), cert: fs.readFileSync(process.env.CERT) });
let pending = 3;
const up = () => { if (--pending === 0) process.stdout.write('ready\\n'); };
const h = http.createServer(answer);
// Like most web servers outside a WebSocket location (nginx serving files): Upgrade is ignored, the connection stays HTTP.
h.on('upgrade', (req, sock, head) => {
  const body = 'web:' + req.headers.host + ':' + req.url + '\\n';
  sock.write('HTTP/1.1 200 OK\\r\\nContent-Length: ' + body.length + '\\r\\n\\r\\n' + body);
  if (head.length) sock.unshift(head);
  h.emit('connection', sock);
});
h.listen(80, '${WEB1}', up);
https.createServer({ key: fs.readFileSync(process.env.KEY), cert: fs.readFileSync(process.env.CERT), SNICallback: (n, cb) => { sni.push(n); cb(null, ctx); } }, answer).listen(443, '${WEB1}', up);
// An upstream the sandbox's owner controls: a status line Node's server refuses to write back.
net.createServer((s) => { s.on('error', () => {}); s.once('data', () => s.end('HTTP/1.1 099 X\\r\\nContent-Length: 0\\r\\n\\r\\n')); }).listen(80, '${WEB3}', up);
`;


/** The same hello with `extraSuites` bogus cipher suites and a GREASE extension of `pad` bytes, in records of 16000. */
function inflateHello(rec: Buffer, extraSuites: number, pad: number): Buffer {
  const hs = rec.subarray(5);
  const body = hs.subarray(4, 4 + hs.readUIntBE(1, 3));
  let off = 34;
  off += 1 + body[off]!;
  const csLen = body.readUInt16BE(off);
  const suites = body.subarray(off + 2, off + 2 + csLen);
  off += 2 + csLen;
  const comp = body.subarray(off, off + 1 + body[off]!);
  off += comp.length;
  const extLen = body.readUInt16BE(off);
  const exts = body.subarray(off + 2, off + 2 + extLen);
  const head = body.subarray(0, 34 + 1 + body[34]!);
  const bogus = Buffer.alloc(extraSuites * 2, 0x5a);
  const cs = Buffer.concat([suites, bogus]);
  const padExt = Buffer.alloc(4 + pad);
  padExt.writeUInt16BE(0x4a4a, 0);
  padExt.writeUInt16BE(pad, 2);
  const allExt = Buffer.concat([exts, padExt]);
  const u16 = (n: number) => Buffer.from([n >> 8, n & 255]);
  const newBody = Buffer.concat([head, u16(cs.length), cs, comp, u16(allExt.length), allExt]);
  const msg = Buffer.concat([Buffer.from([1, (newBody.length >> 16) & 255, (newBody.length >> 8) & 255, newBody.length & 255]), newBody]);
  const records: Buffer[] = [];
  for (let i = 0; i < msg.length; i += 16000) {
    const part = msg.subarray(i, i + 16000);
    records.push(Buffer.from([22, 3, 1, part.length >> 8, part.length & 255]), part);
  }
  return Buffer.concat(records);
}


describe('egress proxy red team', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let lab: EgressLab | undefined;
  let dir: string;
  const id = 'egred';
  const policy = (p: Partial<EgressPolicy>): EgressPolicy => ({ internet: true, allow: [], deny: [], ...p });
  const bash = (script: string) => lab!.bash(script);
  const sniSeen = async (): Promise<string[]> => JSON.parse(await getText(`http://${WEB1}/sni`)) as string[];
  const putFile = (path: string, data: Buffer) => lab!.putFile(path, data);

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-egred-'));
    await procOk('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'web.key', '-out', 'web.pem', '-days', '2', '-subj', '/CN=a.test'], { cwd: dir });
    lab = await startEgressLab({ netns: NS, veth: VETH, link: LINK, addresses: [WEB1, WEB3], script: SERVER, env: { KEY: join(dir, 'web.key'), CERT: join(dir, 'web.pem') }, id, resolve: async (name) => NAMES[name] ?? [] });
    t = lab.t;
  });

  after(async () => {
    try {
      await lab?.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('an upstream answering "HTTP/1.1 099" (which Node will not write back) is a reset, not an uncaught exception in the daemon', async () => {
    await t.rt.setEgress(id, policy({ deny: ['b.test'] }));
    const saved = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    const caught: Error[] = [];
    process.on('uncaughtException', (e) => caught.push(e));
    try {
      await bash(`curl -sS -m 3 http://${WEB3}/ -o /dev/null; true`);
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      process.removeAllListeners('uncaughtException');
      for (const l of saved) process.on('uncaughtException', l);
    }
    assert.deepEqual(caught, [], 'no uncaught exception in the daemon');
    // The proxy still serves.
    assert.match(await bash(`curl -sS -m 3 -H 'Host: a.test' http://${WEB1}/`), /web:a\.test:/);
  });

  test('allow list: an Upgrade the server ignores does not turn the connection into an unchecked tunnel', async () => {
    await t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    const direct = await bash(`exec 3<>/dev/tcp/${WEB1}/80; printf 'GET / HTTP/1.1\\r\\nHost: b.test\\r\\n\\r\\n' >&3; timeout 2 cat <&3`);
    assert.doesNotMatch(direct, /web:b\.test/, 'control: b.test alone is refused');
    const out = await bash(
      `exec 3<>/dev/tcp/${WEB1}/80; printf 'GET / HTTP/1.1\\r\\nHost: a.test\\r\\nConnection: Upgrade\\r\\nUpgrade: foo\\r\\n\\r\\nGET /second HTTP/1.1\\r\\nHost: b.test\\r\\n\\r\\n' >&3; timeout 2 cat <&3`,
    );
    assert.doesNotMatch(out, /web:b\.test/, out);
    // A WebSocket upgrade the server answers with 200, not 101: its answer comes back, then the end.
    const ws = await bash(
      `exec 3<>/dev/tcp/${WEB1}/80; printf 'GET / HTTP/1.1\\r\\nHost: a.test\\r\\nConnection: Upgrade\\r\\nUpgrade: websocket\\r\\n\\r\\nGET /second HTTP/1.1\\r\\nHost: b.test\\r\\n\\r\\n' >&3; timeout 2 cat <&3`,
    );
    assert.match(ws, /web:a\.test:\//, 'the upgrade request itself was answered');
    assert.doesNotMatch(ws, /web:b\.test/, ws);
  });

  test('deny list: an absolute-form target naming a denied host, with another Host, is refused', async () => {
    await t.rt.setEgress(id, policy({ deny: ['b.test'] }));
    const control = await bash(`exec 3<>/dev/tcp/${WEB1}/80; printf 'GET http://b.test/x HTTP/1.1\\r\\nHost: b.test\\r\\n\\r\\n' >&3; timeout 2 cat <&3`);
    assert.doesNotMatch(control, /web:/, 'control: refused');
    const out = await bash(`exec 3<>/dev/tcp/${WEB1}/80; printf 'GET http://b.test/x HTTP/1.1\\r\\nHost: a.test\\r\\n\\r\\n' >&3; timeout 2 cat <&3`);
    // RFC 9112 3.2.2: an origin server takes the target's host and ignores Host.
    assert.doesNotMatch(out, /web:/, out);
    // No Host at all (HTTP/1.0) names nothing: refused while names are denied.
    assert.doesNotMatch(await bash(`exec 3<>/dev/tcp/${WEB1}/80; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; timeout 2 cat <&3`), /web:/);
  });

  test('allow list: a request with two Host headers is refused', async () => {
    await t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    const out = await bash(`exec 3<>/dev/tcp/${WEB1}/80; printf 'GET / HTTP/1.1\\r\\nHost: a.test\\r\\nHost: b.test\\r\\n\\r\\n' >&3; timeout 2 cat <&3`);
    assert.doesNotMatch(out, /web:/, out);
  });

  test('deny list: a ClientHello sent slowly (past 10 s) is refused, not judged as naming nothing', async () => {
    await t.rt.setEgress(id, policy({ deny: ['b.test'] }));
    await putFile('/tmp/hello-b', await clientHelloBytes('b.test'));
    const control = await bash(`exec 3<>/dev/tcp/${WEB1}/443; cat /tmp/hello-b >&3; timeout 2 head -c 3 <&3 | od -An -tx1`);
    assert.equal(control.trim(), '', 'control: refused');
    const before = (await sniSeen()).length;
    const out = await bash(`exec 3<>/dev/tcp/${WEB1}/443; head -c 20 /tmp/hello-b >&3; sleep 11; tail -c +21 /tmp/hello-b >&3; timeout 3 head -c 3 <&3 | od -An -tx1`);
    assert.equal(out.trim(), '', `no ServerHello came back: ${out}`);
    assert.deepEqual((await sniSeen()).slice(before), []);
  });

  test('deny list: a ClientHello over 64 KiB is read whole and judged by its name', async () => {
    await t.rt.setEgress(id, policy({ deny: ['b.test'] }));
    const big = inflateHello(await clientHelloBytes('b.test'), 6000, 60_000);
    assert.ok(big.length > 70_000);
    await putFile('/tmp/hello-big', big);
    const before = (await sniSeen()).length;
    const out = await bash(`exec 3<>/dev/tcp/${WEB1}/443; cat /tmp/hello-big >&3; timeout 3 head -c 3 <&3 | od -An -tx1`);
    assert.equal(out.trim(), '', `no ServerHello came back: ${out}`);
    assert.deepEqual((await sniSeen()).slice(before), []);
    // The same size naming an allowed name goes through: the hello was read, not refused for its size.
    await t.rt.setEgress(id, policy({ deny: ['a.test'] }));
    assert.equal((await bash(`exec 3<>/dev/tcp/${WEB1}/443; cat /tmp/hello-big >&3; timeout 3 head -c 3 <&3 | od -An -tx1`)).trim(), '16 03 03');
  });

  test('slowloris: a request head that takes longer than 10 s is cut', async () => {
    await t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    const out = await bash(`exec 3<>/dev/tcp/${WEB1}/80; printf 'GET /late HTTP/1.1\\r\\n' >&3; sleep 14; printf 'Host: a.test\\r\\n\\r\\n' >&3; timeout 2 cat <&3`);
    assert.doesNotMatch(out, /web:a\.test:\/late/, 'a request head that took 14 s (the limit is 10) is not served');
  });

  test('one sandbox cannot make the daemon hold a descriptor per idle connection: capped, and cut after 10 s', async () => {
    await t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    const fds = () => readdirSync('/proc/self/fd').length;
    const before = fds();
    const job = t.rt.exec(id, ['bash', '-c', `for i in $(seq 3000); do exec {fd}<>/dev/tcp/${WEB1}/80; printf 'GET / HTTP/1.1\\r\\n' >&$fd; done; sleep 14`]);
    await new Promise((r) => setTimeout(r, 12_000));
    const held = fds() - before;
    await job;
    assert.ok(held < 100, `the daemon holds ${held} more descriptors 12 s later (the head limit is 10 s)`);
  });

  test('a connection allowed by name is cut when a new policy denies the name', async () => {
    await t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    const job = t.rt.exec(id, ['bash', '-c', `curl -sk -m 10 --resolve a.test:443:${WEB1} https://a.test/slow`]);
    await new Promise((r) => setTimeout(r, 1500));
    await t.rt.setEgress(id, policy({ deny: ['a.test'] }));
    const r = await job;
    assert.notEqual(r.stdout.trim(), 'x'.repeat(12), 'the slow body stopped when the name was denied');
    assert.ok(r.stdout.trim().length < 12);
  });
});
