// Root tests with real containers: what a sandbox can reach, with and without internet access.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { after, before, describe, test } from 'node:test';
import { baseLayer } from '../testing/fixtures.js';
import { aptReleaseUrl, assertNoLeaks, createTestRuntime, sh, testSpec, type TestRuntime } from '../testing/runtime-fixtures.js';

/** curl's exit code and HTTP status (000 when nothing answered). */
async function curl(t: TestRuntime, id: string, url: string, timeoutS = 3): Promise<{ code: number | null; http: string }> {
  const r = await sh(t.rt, id, `curl -sS -o /dev/null -m ${timeoutS} -w '%{http_code}' '${url}'`, true);
  return { code: r.code, http: r.stdout.trim() };
}

describe('CrunRuntime networking', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let lower: string;
  let hostServer: Server;
  let hostPort = 0;

  before(async () => {
    lower = (await baseLayer()).path;
    t = await createTestRuntime();
    hostServer = createServer((s) => s.end('HTTP/1.0 200 OK\r\n\r\nhost service\n'));
    await new Promise<void>((r) => hostServer.listen(0, '0.0.0.0', r));
    hostPort = (hostServer.address() as { port: number }).port;
    await Promise.all([
      t.rt.create(testSpec('neta', [lower], { internetAccess: true })),
      t.rt.create(testSpec('netb', [lower], { internetAccess: true })),
      t.rt.create(testSpec('offl', [lower], { internetAccess: false })),
    ]);
  });

  after(async () => {
    hostServer?.close();
    if (t) {
      for (const id of await t.rt.list()) await t.rt.destroy(id);
      await assertNoLeaks(t.rt);
      await t.teardown();
    }
  });

  test("with internet: the host's apt mirror answers over plain HTTP (DNS through the host's resolver)", async () => {
    const r = await curl(t, 'neta', aptReleaseUrl(), 20);
    assert.equal(r.http, '200', `curl exit ${r.code}`);
  });

  test("with internet: the host's own services are unreachable (every host address, the bridge)", async () => {
    const hostAddrs = Object.values(networkInterfaces())
      .flat()
      .filter((a) => a && a.family === 'IPv4' && !a.internal)
      .map((a) => a!.address);
    assert.ok(hostAddrs.length > 0);
    // Sanity: the service is up and listening on every address.
    for (const addr of hostAddrs) {
      const r = await curl(t, 'neta', `http://${addr}:${hostPort}/`);
      assert.equal(r.http, '000', `${addr}:${hostPort} must not answer (curl exit ${r.code})`);
    }
  });

  test('with internet: another sandbox is unreachable, though it listens and the host reaches it', async () => {
    await sh(t.rt, 'netb', `setsid perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(LocalAddr => "0.0.0.0", LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die; while (my $c = $s->accept) { print $c "HTTP/1.0 200 OK\\r\\n\\r\\nb\\n"; close $c }' </dev/null >/dev/null 2>&1 & disown; sleep 0.3`);
    const ipB = (JSON.parse(readFileSync(`${t.dataDir}/sandboxes/netb/net.json`, 'utf8')) as { ip: string }).ip;
    const local = await curl(t, 'netb', 'http://127.0.0.1:8080/');
    assert.equal(local.http, '200', 'b serves');
    const fromHost = await fetch(`http://${ipB}:8080/`).then((r) => r.status);
    assert.equal(fromHost, 200, 'the host reaches b (port previews)');
    const fromA = await curl(t, 'neta', `http://${ipB}:8080/`);
    assert.equal(fromA.http, '000', `a must not reach b (curl exit ${fromA.code})`);
  });

  test('with internet: link-local/metadata and private ranges are blocked', async () => {
    for (const url of ['http://169.254.169.254/', 'http://10.0.0.1/', 'http://192.168.0.1/']) {
      const r = await curl(t, 'neta', url, 2);
      assert.equal(r.http, '000', url);
    }
  });

  test('without internet: loopback only, no DNS, no route out', async () => {
    const r = await sh(t.rt, 'offl', 'echo $(ls /sys/class/net); getent hosts example.org; echo "dns=$?"');
    assert.match(r.stdout, /^lo\n/);
    assert.match(r.stdout, /dns=2/);
    const out = await curl(t, 'offl', aptReleaseUrl(), 3);
    assert.equal(out.http, '000');
    const host = await curl(t, 'offl', `http://127.0.0.1:${hostPort}/`);
    assert.equal(host.http, '000', "the sandbox's 127.0.0.1 is its own");
  });
});
