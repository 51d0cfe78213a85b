// Unit tests of the egress policy's parts that need no root: entries, decisions, the nft text, and
// the proxy's readers of names (a real ClientHello from Node's TLS client, and hostile bytes).
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { describe, test } from 'node:test';
import { decide, dnsVerdict, filtersDns, normalizeEntries, normalizeEntry, policyRules, policyTransaction, usesProxy } from './egress-policy.js';
import { clientHelloState, hostOf, sniOf } from './egress-sniff.js';

/** The first bytes Node's TLS client sends for `servername` (none: it sends no server_name, as for an address). */
async function clientHello(servername?: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const server = createServer((s) => {
      let buf = Buffer.alloc(0);
      s.on('data', (c) => {
        buf = Buffer.concat([buf, c]);
        if (clientHelloState(buf) === 'complete') {
          s.destroy();
          server.close();
          resolve(buf);
        }
      });
    });
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      const c = tlsConnect({ host: '127.0.0.1', port, ...(servername ? { servername } : {}), rejectUnauthorized: false });
      c.on('error', () => undefined);
      setTimeout(() => reject(new Error('no hello')), 5000).unref();
    });
  });
}

describe('egress entries', () => {
  test('normalized: addresses, CIDRs with host bits cleared, lowercase names without a trailing dot, wildcards, IDN as punycode', () => {
    assert.equal(normalizeEntry('1.2.3.4', 'f'), '1.2.3.4');
    assert.equal(normalizeEntry(' 10.9.8.7/8 ', 'f'), '10.0.0.0/8');
    assert.equal(normalizeEntry('Example.COM.', 'f'), 'example.com');
    assert.equal(normalizeEntry('*.Example.org', 'f'), '*.example.org');
    assert.equal(normalizeEntry('bücher.example', 'f'), 'xn--bcher-kva.example');
    assert.deepEqual(normalizeEntries(['a.example', 'A.example.', '1.2.3.4'], 'f'), ['a.example', '1.2.3.4']);
  });

  test('refused with the entry named: IPv6, ports, stray wildcards, bad labels, bad addresses, too many', () => {
    for (const bad of ['::1', '2001:db8::/32', 'example.com:443', '*', '*.', 'a.*.example', '*example.com', 'a..b', '-a.example', 'a_b c', '1.2.3.256', '1.2.3.4/33', 'example.123', '', ' ', 'x'.repeat(301)]) {
      assert.throws(() => normalizeEntry(bad, 'allow_out'), (e: Error & { code?: string }) => e.code === 'VALIDATION_ERROR' && e.message.startsWith('allow_out:'), bad);
    }
    assert.throws(() => normalizeEntries(Array.from({ length: 1001 }, (_, i) => `h${i}.example`), 'deny_out'), /at most 1000/);
  });
});

describe('egress decisions', () => {
  const p = (allow: string[], deny: string[] = [], internet = true) => ({ internet, allow, deny });
  test('deny wins; an allow list refuses the rest; wildcards match below the name only; names need an allow by name', () => {
    assert.deepEqual(decide(p([]), '8.8.8.8', undefined), { allow: true, byName: false });
    assert.equal(decide(p([], [], false), '8.8.8.8', 'a.example').allow, false);
    assert.equal(decide(p(['8.8.8.0/24'], ['8.8.8.8']), '8.8.8.8', undefined).allow, false);
    assert.equal(decide(p(['*.example.com'], ['bad.example.com']), '1.1.1.1', 'bad.example.com').allow, false);
    assert.deepEqual(decide(p(['*.example.com']), '1.1.1.1', 'a.b.example.com'), { allow: true, byName: true });
    assert.equal(decide(p(['*.example.com']), '1.1.1.1', 'example.com').allow, false, 'the wildcard is not the name itself');
    assert.equal(decide(p(['*.example.com']), '1.1.1.1', 'badexample.com').allow, false);
    assert.equal(decide(p(['example.com']), '1.1.1.1', 'a.example.com').allow, false);
    assert.equal(decide(p(['example.com']), '1.1.1.1', undefined).allow, false, 'no name, not allowed by address');
    assert.deepEqual(decide(p(['1.1.1.0/24']), '1.1.1.1', 'anything.example'), { allow: true, byName: false });
    // With names denied, a name is trusted only for where it resolves, and no name is refused.
    assert.deepEqual(decide(p([], ['evil.example']), '1.1.1.1', 'good.example'), { allow: true, byName: true });
    assert.equal(decide(p([], ['evil.example']), '1.1.1.1', undefined).allow, false);
    assert.deepEqual(decide(p(['1.1.1.0/24'], ['evil.example']), '1.1.1.1', undefined), { allow: true, byName: false });
    assert.deepEqual(decide(p([], ['9.9.9.9']), '1.1.1.1', undefined), { allow: true, byName: false });
    assert.equal(decide(p(['1.1.1.0/24']), '1.1.1.1', null).allow, false, 'an unreadable name is refused');
  });

  test('the nft text: the default removes; internet off refuses everything; domain rules refuse QUIC and inspected ports off the proxy', () => {
    const off = policyRules('10.0.0.2', p([], [], false), 'px');
    assert.equal(off.length, 2);
    assert.ok(off.every((r) => r.includes('reject')));
    const dom = policyRules('10.0.0.2', p(['a.example', '1.2.3.0/24'], ['9.9.9.9']), 'px').join('\n');
    assert.match(dom, /ip daddr @p_10_0_0_2_d meta l4proto tcp counter name "p_10_0_0_2_n" reject with tcp reset/);
    assert.match(dom, /udp dport 443 counter name "p_10_0_0_2_n" reject/);
    assert.match(dom, /tcp dport \{ 80, 443 \} oifname != "px" meta l4proto tcp/);
    assert.ok(dom.indexOf('oifname != "px"') < dom.indexOf('@p_10_0_0_2_a return'), 'the proxy is not skipped by an allowed address');
    const cidrOnly = policyTransaction('t', '10.0.0.2', p(['1.2.3.0/24']), 'px');
    assert.match(cidrOnly, /add element inet t inspect4 \{ 10\.0\.0\.2 \}\ndelete element inet t inspect4 \{ 10\.0\.0\.2 \}/, 'no proxy without domain rules');
    assert.match(policyTransaction('t', '10.0.0.2', p([]), 'px'), /delete chain inet t p_10_0_0_2/);
  });

  test('DNS: with an allow list, only the names a connection may name resolve, and only address types; a deny list refuses its names', () => {
    const A = 1, AAAA = 28, HTTPS = 65, TXT = 16, ANY = 255, MX = 15;
    const allowed = p(['a.example', '*.wild.example', '1.2.3.0/24'], ['bad.wild.example']);
    for (const t of [A, AAAA, HTTPS]) assert.deepEqual(dnsVerdict(allowed, 'a.example', t), { allow: true });
    assert.equal(dnsVerdict(allowed, 'x.wild.example', A).allow, true, 'below a wildcard');
    for (const [name, t] of [
      ['x.evil.example', A],
      ['sub.a.example', A], // a plain entry is the name only, as for connections
      ['wild.example', A], // a wildcard is not the name itself
      ['bad.wild.example', A], // deny wins
      ['a.example', TXT],
      ['a.example', ANY],
      ['a.example', MX],
      ['', A],
    ] as const) {
      assert.equal(dnsVerdict(allowed, name, t).allow, false, `${name} ${t}`);
    }
    // The names dnsVerdict allows are those decide() allows by name.
    for (const name of ['a.example', 'x.wild.example', 'bad.wild.example', 'x.evil.example']) {
      assert.equal(dnsVerdict(allowed, name, A).allow, decide(allowed, '9.9.9.9', name).allow, name);
    }
    const denyOnly = p([], ['evil.example', '*.evil.example']);
    assert.equal(dnsVerdict(denyOnly, 'data.evil.example', TXT).allow, false);
    assert.equal(dnsVerdict(denyOnly, 'good.example', TXT).allow, true, 'a deny list leaves other names and types alone');
    // Which policies go through the filter: an allow list (even of addresses only), deny entries of names.
    assert.equal(filtersDns(p(['1.2.3.0/24'])), true);
    assert.equal(usesProxy(p(['1.2.3.0/24'])), true);
    assert.equal(filtersDns(denyOnly), true);
    assert.equal(filtersDns(p([], ['9.9.9.9'])), false);
    assert.equal(filtersDns(p([], [], false)), false, 'internet off: no DNS at all, nothing to filter');
    assert.equal(filtersDns(p([])), false);
  });

  test('the nft text of filtered DNS: to the filter only, rate-limited, refused at once otherwise; the sandbox joins dnsf4', () => {
    const rules = policyRules('10.0.0.2', p(['a.example']), 'px');
    const dns = rules.filter((r) => r.includes('dport 53'));
    assert.match(dns[0]!, /oifname "px" limit rate over \d+\/second burst \d+ packets counter name "p_10_0_0_2_n" drop/);
    assert.match(dns[1]!, /oifname "px" return$/);
    assert.ok(dns.slice(2).every((r) => r.includes('reject')) && dns.length === 4, dns.join('\n'));
    assert.equal(rules.indexOf(dns[0]!), 0, 'DNS is decided first');
    assert.deepEqual(policyRules('10.0.0.2', p([], ['9.9.9.9']), 'px')[0], 'ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 return', 'unfiltered DNS as before');
    assert.match(policyTransaction('t', '10.0.0.2', p(['a.example']), 'px'), /add element inet t dnsf4 \{ 10\.0\.0\.2 \}\nadd rule|add element inet t dnsf4 \{ 10\.0\.0\.2 \}\n$/);
    assert.match(policyTransaction('t', '10.0.0.2', p([], ['9.9.9.9']), 'px'), /delete element inet t dnsf4/);
    assert.match(policyTransaction('t', '10.0.0.2', undefined, 'px'), /delete element inet t dnsf4/);
  });
});

describe('names a connection carries', () => {
  test("a real ClientHello's SNI, whole or split at every byte; not yet complete is 'partial'; none is undefined", async () => {
    assert.equal(sniOf(await clientHello()), undefined);
    const hello = await clientHello('Sub.Example.COM');
    assert.equal(sniOf(hello), 'sub.example.com');
    for (let i = 1; i < hello.length; i += 7) assert.notEqual(clientHelloState(hello.subarray(0, i)), 'complete', `cut at ${i}`);
    // The same handshake split over two TLS records.
    const body = hello.subarray(5);
    const cut = 40;
    const rec = (b: Buffer) => Buffer.concat([Buffer.from([22, 3, 1, b.length >> 8, b.length & 255]), b]);
    assert.equal(sniOf(Buffer.concat([rec(body.subarray(0, cut)), rec(body.subarray(cut))])), 'sub.example.com');
  });

  test('hostile bytes give no name and no throw', async () => {
    const hello = await clientHello('a.example');
    assert.equal(clientHelloState(Buffer.from('GET / HTTP/1.1\r\n')), 'other');
    assert.equal(sniOf(Buffer.from([22, 3, 1, 0, 0])), null);
    for (let i = 0; i < 2000; i++) {
      const b = Buffer.from(hello);
      for (let k = 0; k < 4; k++) b[Math.floor(Math.random() * b.length)] = Math.floor(Math.random() * 256);
      const name = sniOf(b);
      assert.ok(name === undefined || name === null || /^[a-z0-9._-]+$/.test(name), String(name));
    }
    // A name with a NUL or a space in it is no name.
    const evil = Buffer.from(hello);
    const at = evil.indexOf('a.example');
    evil[at + 1] = 0;
    assert.equal(sniOf(evil), null, 'unreadable, not absent');
    assert.equal(sniOf(hello.subarray(0, hello.length - 1)), null, 'an incomplete hello is unreadable');
  });

  test('HTTP: Host without its port, the absolute-form target when there is one, nothing when they disagree', () => {
    assert.equal(hostOf({ url: '/', headers: { host: 'A.Example:8080' } }), 'a.example');
    assert.equal(hostOf({ url: 'http://b.example/x', headers: { host: 'b.example' } }), 'b.example');
    assert.equal(hostOf({ url: 'http://b.example/x', headers: { host: 'a.example' } }), null, 'two hosts: unreadable');
    assert.equal(hostOf({ url: 'http://b.example/x', headers: {} }), 'b.example');
    assert.equal(hostOf({ url: '/', headers: {} }), undefined);
    assert.equal(hostOf({ url: '/', headers: { host: 'a.example, b.example' } }), null);
    assert.equal(hostOf({ url: '/', headers: { host: '[::1]:80' } }), null);
    assert.equal(hostOf({ url: '/', headers: { host: 'b.example..' } }), 'b.example', 'every trailing dot goes');
    assert.equal(hostOf({ url: '/', headers: { host: 'a..example' } }), null);
    assert.equal(hostOf({ url: 'ftp://x', headers: {} }), 'x');
  });
});
