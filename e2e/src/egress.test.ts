import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { aptSourceCidrs, aptSourceUrls } from './harness.js';
import { createSandbox, run, startAgentServer, stopServer, type CreatedSandbox, type TestServer } from './agent-support.js';

// Through the real daemon: what a sandbox with internet access may reach (the operator's egress
// exceptions), and which sockets it may make. runtime/egress.test.ts and
// runtime/socket-families.test.ts test the same walls in depth against the runtime alone.

let server: TestServer;
let sb: CreatedSandbox;

before(async () => {
  // Without the default exception: the host's apt sources are blocked if they sit in a blocked range.
  server = await startAgentServer({ templates: ['base'], env: { SANDBOXD_EGRESS_ALLOW_APT_SOURCES: 'false' } });
  sb = await createSandbox(server, { template_name: 'base', internet_access: true });
});
after(async () => {
  await stopServer(server);
});

/** curl's HTTP status from inside the sandbox (000 when nothing answered) and its complaint. */
async function statusFromSandbox(url: string, timeoutS = 5): Promise<{ status: string; stderr: string }> {
  const r = await run(sb, 'curl', ['-sS', '-o', '/dev/null', '-m', String(timeoutS), '-w', '%{http_code}', url]);
  return { status: String(r.stdout).trim(), stderr: String(r.stderr) };
}

describe('egress through the daemon', () => {
  test("an apt source in a blocked range: reachable on its port by default (nothing else of its range), closed with SANDBOXD_EGRESS_ALLOW_APT_SOURCES=false", async () => {
    const url = aptSourceUrls()[0];
    assert.ok(url, 'the host has an http(s) apt source');
    const fromHost = await fetch(url, { signal: AbortSignal.timeout(10_000) }).then((r) => r.status);
    assert.ok(fromHost > 0, 'the host reaches its apt source');
    const closed = (await statusFromSandbox(url)).status;
    const log = () => readFileSync(server.logFile, 'utf8');
    if (closed !== '000') {
      // A public mirror: nothing to allow, and nothing to say.
      assert.doesNotMatch(log(), /apt source/);
      return;
    }
    assert.match(log(), /warning: sandboxes cannot reach the apt source .* allow it with SANDBOXD_EGRESS_ALLOW_APT_SOURCES=true/);
    // The default: the source's address on its port, and nothing more.
    delete server.env.SANDBOXD_EGRESS_ALLOW_APT_SOURCES;
    await server.shutdown();
    await server.restart();
    assert.match(log(), /sandboxes may reach the host's apt source .* although .* is blocked/);
    const open = await statusFromSandbox(url, 20);
    assert.notEqual(open.status, '000', `the apt source answers (${open.stderr})`);
    // What is open is that address on that port, not the address, not its range.
    const u = new URL(url);
    const port = Number(u.port) || (u.protocol === 'https:' ? 443 : 80);
    const table = `sandboxd_${server.env.SANDBOXD_BRIDGE}`;
    const nft = (set: string) => execFileSync('nft', ['list', 'set', 'inet', table, set], { encoding: 'utf8' });
    for (const cidr of await aptSourceCidrs()) assert.match(nft('allowsvc4'), new RegExp(`${cidr.replace('/32', '').replace(/\./g, '\\.')} \\. ${port}\\b`));
    assert.doesNotMatch(nft('allow4'), /elements/, 'no whole address is allowed');
  });

  test('vsock and other address families are refused, high bits in the family too; unix, inet, inet6, netlink work', async () => {
    assert.equal(process.arch, 'x64', 'syscall numbers below are x86-64');
    const script = `for my $p (@ARGV) { my ($name, $family, $type) = split /:/, $p; $! = 0;
      my $r = syscall(41, $family + 0, $type + 0, 0); print "$name ", ($r >= 0 ? "ok" : $! + 0), "\\n" }`;
    const probes = ['unix:1:1', 'inet:2:1', 'inet6:10:1', 'netlink:16:2', 'vsock:40:1', 'alg:38:5', 'packet:17:3', 'rds:21:5', 'tipc:30:2',
      `vsock_hi:${2 ** 32 + 40}:1`, `inet_hi:${2 ** 32 + 2}:1`];
    const r = await run(sb, 'perl', ['-e', script, ...probes]);
    const got = Object.fromEntries(String(r.stdout).trim().split('\n').map((l) => l.split(' ')));
    const EAFNOSUPPORT = '97';
    assert.deepEqual(got, {
      unix: 'ok', inet: 'ok', inet6: 'ok', netlink: 'ok',
      vsock: EAFNOSUPPORT, alg: EAFNOSUPPORT, packet: EAFNOSUPPORT, rds: EAFNOSUPPORT, tipc: EAFNOSUPPORT, vsock_hi: EAFNOSUPPORT, inet_hi: EAFNOSUPPORT,
    });
  });
});
