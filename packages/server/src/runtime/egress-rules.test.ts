// Root tests with a real container and real "web servers": a sandbox's egress policy (allow and
// deny lists of addresses, CIDRs and domains), changed at runtime. The servers live in a network
// namespace the test makes, behind host routes, so a sandbox's packets take the real path
// (bridge, nftables, the egress proxy, NAT). Two names share one address, with a certificate from
// the test's own CA: only the name a connection carries tells them apart.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startEgressLab, type EgressLab } from '../testing/web-host.js';
import { aptReleaseUrl, type TestRuntime } from '../testing/runtime-fixtures.js';
import { CrunRuntime } from './crun-runtime.js';
import type { EgressPolicy } from './egress-policy.js';
import { procOk } from './proc.js';

const tag = String(process.pid % 100000);
const NS = `sbweb${tag}`;
const VETH = `sbwh${tag}`.slice(0, 15);
const LINK = 150 + (process.pid % 50);
/** Two public-looking addresses of the web servers: a.test and b.test are both on WEB1. */
const WEB1 = '11.23.34.45';
const WEB2 = '11.23.34.46';
const NAMES: Record<string, string[]> = { 'a.test': [WEB1], 'b.test': [WEB1], 'c.test': [WEB2] };

const SERVER = `
const http = require('node:http'), https = require('node:https'), net = require('node:net'), fs = require('node:fs');
const answer = (req, res) => res.end('web:' + req.headers.host + ':' + req.socket.localAddress + '\\n');
let pending = 3;
const up = () => { if (--pending === 0) process.stdout.write('ready\\n'); };
http.createServer(answer).listen(80, '0.0.0.0', up);
https.createServer({ key: fs.readFileSync(process.env.KEY), cert: fs.readFileSync(process.env.CERT) }, answer).listen(443, '0.0.0.0', up);
net.createServer((s) => { s.on('error', () => {}); s.end('raw\\n'); }).listen(2222, '0.0.0.0', up);
`;

describe('egress policy (allow and deny lists, at runtime)', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let lab: EgressLab | undefined;
  let dir: string;
  const id = 'egrules';
  const policy = (p: Partial<EgressPolicy>): EgressPolicy => ({ internet: true, allow: [], deny: [], ...p });

  /** curl from inside: the body, or 'refused' (reset, refused, TLS cut), or 'timeout'; with how long it took. */
  const fetchIn = async (rt: CrunRuntime, url: string, resolve?: string): Promise<{ got: string; ms: number }> => {
    const args = ['curl', '-sS', '-m', '4', '--cacert', '/tmp/ca.pem', ...(resolve ? ['--resolve', resolve] : []), url];
    const t0 = performance.now();
    const r = await rt.exec(id, args);
    const ms = performance.now() - t0;
    if (r.code === 0) return { got: r.stdout.trim(), ms };
    if (r.code === 28) return { got: 'timeout', ms };
    return { got: 'refused', ms };
  };

  /** A raw TCP connection from inside: the server's greeting, or 'closed'. */
  const rawIn = async (rt: CrunRuntime, address: string, port: number): Promise<string> => {
    const r = await rt.exec(id, ['bash', '-c', `timeout 3 bash -c 'exec 3<>/dev/tcp/${address}/${port} && head -1 <&3' 2>/dev/null || echo closed`]);
    return r.stdout.trim();
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-egress-'));
    // The test's CA, and one certificate for both names of WEB1 (and c.test).
    const ossl = (args: string[]) => procOk('openssl', args, { cwd: dir });
    await ossl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=sandboxd egress test CA']);
    await ossl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'web.key', '-out', 'web.csr', '-subj', '/CN=a.test']);
    await writeFile(join(dir, 'san.ext'), 'subjectAltName=DNS:a.test,DNS:b.test,DNS:c.test\n');
    await ossl(['x509', '-req', '-in', 'web.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'web.pem', '-days', '2', '-extfile', 'san.ext']);
    lab = await startEgressLab({ netns: NS, veth: VETH, link: LINK, addresses: [WEB1, WEB2], script: SERVER, env: { KEY: join(dir, 'web.key'), CERT: join(dir, 'web.pem') }, id, resolve: async (name) => NAMES[name] ?? [] });
    t = lab.t;
    await lab.putFile('/tmp/ca.pem', await readFile(join(dir, 'ca.pem')));
  });

  after(async () => {
    try {
      await lab?.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('with no policy, everything public is reached (the control)', async () => {
    assert.equal((await fetchIn(t.rt, `http://${WEB1}/`)).got, `web:${WEB1}:${WEB1}`);
    assert.equal(await rawIn(t.rt, WEB2, 2222), 'raw');
    assert.equal((await fetchIn(t.rt, 'https://a.test/', `a.test:443:${WEB1}`)).got, `web:a.test:${WEB1}`);
  });

  test('CIDR rules: an allow list refuses the rest at once; deny wins; changes apply within a second', async () => {
    await t.rt.setEgress(id, policy({ allow: [`${WEB1}`] }));
    assert.equal((await fetchIn(t.rt, `http://${WEB1}/`)).got, `web:${WEB1}:${WEB1}`);
    const refused = await fetchIn(t.rt, `http://${WEB2}/`);
    assert.equal(refused.got, 'refused');
    assert.ok(refused.ms < 2000, `refused fast, not a hang (${Math.round(refused.ms)} ms)`);

    const t0 = performance.now();
    await t.rt.setEgress(id, policy({ allow: ['11.23.34.0/24'], deny: [`${WEB2}/32`] }));
    const changeMs = performance.now() - t0;
    assert.ok(changeMs < 1000, `applied in ${Math.round(changeMs)} ms`);
    assert.equal((await fetchIn(t.rt, `http://${WEB1}/`)).got, `web:${WEB1}:${WEB1}`);
    assert.equal((await fetchIn(t.rt, `http://${WEB2}/`)).got, 'refused', 'deny wins over allow');

    const before = (await t.rt.stats(id)).egressDenied;
    assert.ok(before >= 2, `refusals are counted (${before})`);
    await fetchIn(t.rt, `http://${WEB2}/`);
    assert.ok((await t.rt.stats(id)).egressDenied > before);
  });

  test('internet off: nothing leaves, not even DNS; back on: everything again', async () => {
    await t.rt.setEgress(id, policy({ internet: false }));
    assert.equal((await fetchIn(t.rt, `http://${WEB1}/`)).got, 'refused');
    // A name the host's resolver knows (the apt mirror's) no longer resolves; it does again after.
    const mirror = new URL(aptReleaseUrl()).hostname;
    assert.match(mirror, /^[A-Za-z0-9.-]+$/);
    const resolves = async () => /^\d+\.\d+\.\d+\.\d+\s/m.test((await t.rt.exec(id, ['sh', '-c', `timeout 3 getent ahostsv4 ${mirror}`])).stdout);
    assert.equal(await resolves(), false, 'no name resolves');
    await t.rt.setEgress(id, policy({}));
    assert.equal(await resolves(), true);
    assert.equal((await fetchIn(t.rt, `http://${WEB2}/`)).got, `web:${WEB2}:${WEB2}`);
  });

  test('domain rules over HTTPS: two names on one address are told apart by SNI; a raw address or a forged name is refused', async () => {
    await t.rt.setEgress(id, policy({ allow: ['a.test'] }));
    assert.equal((await fetchIn(t.rt, 'https://a.test/', `a.test:443:${WEB1}`)).got, `web:a.test:${WEB1}`);
    assert.equal((await fetchIn(t.rt, 'https://b.test/', `b.test:443:${WEB1}`)).got, 'refused', 'same address, another name');
    assert.equal((await fetchIn(t.rt, `https://${WEB1}/`)).got, 'refused', 'no name at all');
    // An allowed name sent to an address it does not resolve to: the proxy does not take the name's word.
    assert.equal((await fetchIn(t.rt, 'https://a.test/', `a.test:443:${WEB2}`)).got, 'refused', 'forged name');
    // A domain opens HTTP and HTTPS of that name only: another port of its address stays closed.
    assert.equal(await rawIn(t.rt, WEB1, 2222), 'closed');
  });

  test('domain rules over HTTP: every request is judged by its Host, keep-alive included; wildcards; deny lists', async () => {
    await t.rt.setEgress(id, policy({ allow: ['*.test'], deny: ['b.test'] }));
    assert.equal((await fetchIn(t.rt, 'http://a.test/', `a.test:80:${WEB1}`)).got, `web:a.test:${WEB1}`);
    assert.equal((await fetchIn(t.rt, 'http://b.test/', `b.test:80:${WEB1}`)).got, 'refused', 'deny wins over the wildcard');
    assert.equal((await fetchIn(t.rt, 'http://c.test/', `c.test:80:${WEB2}`)).got, `web:c.test:${WEB2}`);
    // Two requests on one connection, the second for a denied name: the second is cut.
    const script = `exec 3<>/dev/tcp/${WEB1}/80; printf 'GET / HTTP/1.1\\r\\nHost: a.test\\r\\n\\r\\n' >&3; sleep 0.5; printf 'GET / HTTP/1.1\\r\\nHost: b.test\\r\\n\\r\\n' >&3; timeout 3 cat <&3`;
    const two = await t.rt.exec(id, ['bash', '-c', script]);
    assert.match(two.stdout, /web:a\.test:/);
    assert.doesNotMatch(two.stdout, /web:b\.test:/);
    // A deny list alone leaves everything else open.
    await t.rt.setEgress(id, policy({ deny: ['a.test'] }));
    assert.equal((await fetchIn(t.rt, 'https://a.test/', `a.test:443:${WEB1}`)).got, 'refused');
    assert.equal((await fetchIn(t.rt, 'https://b.test/', `b.test:443:${WEB1}`)).got, `web:b.test:${WEB1}`);
    assert.equal(await rawIn(t.rt, WEB2, 2222), 'raw');
  });

  test('the policy survives a restart of the runtime (the daemon), and is gone with the sandbox', async () => {
    await t.rt.setEgress(id, policy({ allow: ['c.test', `${WEB1}/32`] }));
    const opts = t.rt.options;
    await t.rt.close();
    // While no daemon runs, inspected connections are refused rather than let through.
    assert.equal((await fetchIn(t.rt, 'https://c.test/', `c.test:443:${WEB2}`)).got, 'refused');
    const again = new CrunRuntime(opts);
    await again.setupHost();
    assert.equal((await fetchIn(again, 'https://c.test/', `c.test:443:${WEB2}`)).got, `web:c.test:${WEB2}`);
    assert.equal((await fetchIn(again, `http://${WEB1}/`)).got, `web:${WEB1}:${WEB1}`);
    assert.equal(await rawIn(again, WEB2, 2222), 'closed');
    await again.destroy(id);
    const table = await procOk('nft', ['list', 'table', 'inet', again.nftTable]);
    assert.doesNotMatch(table, /chain p_/, 'no sandbox chain left');
    assert.match(table, /map policy4 \{\s+type ipv4_addr : verdict\s+\}/, 'the map is empty');
    await again.close();
    t = lab!.t = { ...t, rt: again };
  });
});
