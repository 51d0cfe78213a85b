// Root tests: a sandbox cannot crash, stall or exhaust the daemon through its egress proxy
// (egress-proxy.ts): an upstream answer Node cannot write back, request heads sent slowly or never
// finished, thousands of idle connections, pipelined requests by the thousand, connections closed
// while their name is looked up. Each test bounds what the daemon holds (descriptors, upstream
// connections, heap, event-loop delay). The servers (testing/egress-proxy-lab.ts) live in a netns
// of the test's own, behind host routes.
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, before, describe, test } from 'node:test';
import { startProxyLab, type ProxyLab } from '../testing/egress-proxy-lab.js';
import { clientHelloBytes } from '../testing/web-host.js';
import type { EgressPolicy } from './egress-policy.js';

const tag = String(process.pid % 100000);
const WEB = '11.23.36.45';
const RUDE = '11.23.36.47';
const NAMES: Record<string, string[]> = { 'a.test': [WEB], 'b.test': [WEB] };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fds = () => readdirSync('/proc/self/fd').length;

describe('egress proxy: a sandbox cannot crash, stall or exhaust the daemon', { timeout: 300_000 }, () => {
  let lab: ProxyLab | undefined;
  const id = 'egexhaust';
  const policy = (p: Partial<EgressPolicy>): EgressPolicy => ({ internet: true, allow: [], deny: [], ...p });
  const setEgress = (p: Partial<EgressPolicy>) => lab!.t.rt.setEgress(id, policy(p));
  const bash = (script: string) => lab!.bash(script);

  before(async () => {
    // slow.test: a name whose authoritative server is slow (the sandbox's owner runs it).
    const resolve = async (name: string) => (name === 'slow.test' ? sleep(1500).then(() => [WEB]) : (NAMES[name] ?? []));
    lab = await startProxyLab({ netns: `sbexw${tag}`, veth: `sbex${tag}`.slice(0, 15), link: 150 + (process.pid % 50), web: WEB, rude: RUDE, id, resolve });
  });

  after(async () => {
    await lab?.close();
  });

  test('an upstream answering "HTTP/1.1 099" (which Node will not write back) is a reset, not an uncaught exception in the daemon', async () => {
    await setEgress({ deny: ['b.test'] });
    const saved = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    const caught: Error[] = [];
    process.on('uncaughtException', (e) => caught.push(e));
    try {
      await bash(`curl -sS -m 3 http://${RUDE}/ -o /dev/null; true`);
      await sleep(300);
    } finally {
      process.removeAllListeners('uncaughtException');
      for (const l of saved) process.on('uncaughtException', l);
    }
    assert.deepEqual(caught, [], 'no uncaught exception in the daemon');
    // The proxy still serves.
    assert.match(await bash(`curl -sS -m 3 -H 'Host: a.test' http://${WEB}/`), /web:a\.test:/);
  });

  test('slowloris: a request head that takes longer than 10 s is cut', async () => {
    await setEgress({ allow: ['a.test'] });
    const out = await bash(`exec 3<>/dev/tcp/${WEB}/80; printf 'GET /late HTTP/1.1\\r\\n' >&3; sleep 14; printf 'Host: a.test\\r\\n\\r\\n' >&3; timeout 2 cat <&3`);
    assert.doesNotMatch(out, /web:a\.test:\/late/, 'a request head that took 14 s (the limit is 10) is not served');
  });

  test('one sandbox cannot make the daemon hold a descriptor per idle connection: capped, and cut after 10 s', async () => {
    await setEgress({ allow: ['a.test'] });
    const before = fds();
    const job = lab!.t.rt.exec(id, ['bash', '-c', `for i in $(seq 3000); do exec {fd}<>/dev/tcp/${WEB}/80; printf 'GET / HTTP/1.1\\r\\n' >&$fd; done; sleep 14`]);
    await sleep(12_000);
    const held = fds() - before;
    await job;
    assert.ok(held < 100, `the daemon holds ${held} more descriptors 12 s later (the head limit is 10 s)`);
  });

  test('pipelined requests do not outlive the sandbox connection: no upstream connection is left behind', async () => {
    await setEgress({ deny: ['b.test'] });
    const open0 = await lab!.conns();
    const fds0 = fds();
    // Two pipelined requests to a server that never answers, then the connection is closed; 200 times.
    await bash(`for i in $(seq 200); do exec 3<>/dev/tcp/${WEB}/80; printf 'GET /hang HTTP/1.1\\r\\nHost: a.test\\r\\n\\r\\nGET /hang HTTP/1.1\\r\\nHost: a.test\\r\\n\\r\\n' >&3; exec 3>&-; done`);
    await sleep(1500);
    const open = (await lab!.conns()) - 1 - open0;
    const held = fds() - fds0;
    await lab!.log();
    assert.ok(open < 20, `the proxy holds ${open} upstream connections (and the daemon ${held} more descriptors) for 200 sandbox connections that are closed`);
  });

  test('one connection of pipelined requests cannot grow the daemon heap without bound', async () => {
    // An allow list with an address range and a name: requests to the range are decided without a lookup.
    await setEgress({ allow: ['11.23.36.0/24', 'a.test'] });
    const one = 'GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n';
    await lab!.putFile('/tmp/pipe', Buffer.from('GET /hang HTTP/1.1\r\nHost: a.test\r\n\r\n' + one.repeat(30_000)));
    const heap0 = process.memoryUsage().heapUsed;
    const job = bash(`exec 3<>/dev/tcp/${WEB}/80; cat /tmp/pipe >&3; sleep 4`);
    await sleep(3500);
    const grown = (process.memoryUsage().heapUsed - heap0) / 1e6;
    await job;
    await lab!.log();
    assert.ok(grown < 40, `the daemon heap grew by ${grown.toFixed(0)} MB for one connection (1 MB sent)`);
  });

  test('a burst of pipelined requests does not stall the daemon (a deny list of a name and 999 ranges)', async () => {
    const deny = ['b.test', ...Array.from({ length: 999 }, (_, i) => `${30 + (i >> 8)}.${i & 255}.0.0/16`)];
    await setEgress({ deny });
    await lab!.putFile('/tmp/burst', Buffer.from('GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n'.repeat(300)));
    const h = monitorEventLoopDelay({ resolution: 10 });
    h.enable();
    await bash(`exec 3<>/dev/tcp/${WEB}/80; cat /tmp/burst >&3; timeout 4 cat <&3 >/dev/null; true`);
    h.disable();
    await lab!.log();
    const maxMs = h.max / 1e6;
    assert.ok(maxMs < 250, `the daemon's event loop was blocked for ${maxMs.toFixed(0)} ms by 300 requests (10 kB) of one connection`);
  });

  test('no upstream connection is made for a sandbox connection that closed while its name was looked up', async () => {
    await setEgress({ allow: ['slow.test'] });
    await lab!.putFile('/tmp/hello-slow', await clientHelloBytes('slow.test'));
    const before = await lab!.tlsConns();
    await bash(`for i in $(seq 10); do exec 3<>/dev/tcp/${WEB}/443; cat /tmp/hello-slow >&3; sleep 0.1; exec 3>&-; done`);
    await sleep(3000);
    const made = (await lab!.tlsConns()) - before;
    assert.equal(made, 0, `${made} upstream TLS connections were made for sandbox connections already closed (each stays open until the server drops it)`);
  });
});
