// Root tests with a real container: which address families a sandbox can make sockets of. perl
// (perl-base is in every Debian image) makes the raw syscalls, so that the family argument can
// carry high bits, which the kernel drops and a loose filter would not.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { baseLayer } from '../testing/fixtures.js';
import { i386Result, i386Socket, i386SocketcallSocket } from '../testing/i386.js';
import { assertNoLeaks, createTestRuntime, testSpec, type TestRuntime } from '../testing/runtime-fixtures.js';
import { ALLOWED_SOCKET_FAMILIES } from './seccomp.js';

const NR: Record<string, { socket: number; socketpair: number }> = { x64: { socket: 41, socketpair: 53 }, arm64: { socket: 198, socketpair: 199 } };
const AF_VSOCK = 40;
const AF_ALG = 38;
const AF_PACKET = 17;
/** Linux 6.x knows families up to AF_MCTP (45); a few more show that unknown ones are refused too. */
const LAST_FAMILY = 50;
const TYPES = [1, 2, 3, 5]; // stream, dgram, raw, seqpacket
const EAFNOSUPPORT = '97';
const ENOSYS = '38';
const HIGH = 2 ** 32;

/** Each probe `name:nr:family:type[:pair]` prints `name ok` or `name <errno>`; the same script runs on the host and inside. */
const PROBE = `for my $p (@ARGV) {
  my ($name, $nr, $family, $type, $pair) = split /:/, $p;
  my $sv = "\\0" x 8;
  $! = 0;
  my $r = $pair ? syscall($nr + 0, $family + 0, $type + 0, 0, $sv) : syscall($nr + 0, $family + 0, $type + 0, 0);
  print "$name ", ($r >= 0 ? "ok" : $! + 0), "\\n";
}`;

const parse = (out: string): Record<string, string> => Object.fromEntries(out.trim().split('\n').map((l) => l.split(' ') as [string, string]));

describe('socket address families', { timeout: 300_000 }, () => {
  const nr = NR[process.arch];
  let t: TestRuntime;
  const id = 'afam';
  let hostDir = '';

  before(async () => {
    const lower = (await baseLayer()).path;
    t = await createTestRuntime();
    hostDir = await mkdtemp(join(tmpdir(), 'sandboxd-afam-'));
    await t.rt.create(testSpec(id, [lower], { internetAccess: true }));
  });

  after(async () => {
    await rm(hostDir, { recursive: true, force: true });
    if (t) {
      await t.rt.destroy(id).catch(() => undefined);
      await assertNoLeaks(t.rt);
      await t.teardown();
    }
  });

  const inside = async (probes: string[]) => parse((await t.rt.exec(id, ['perl', '-e', PROBE, ...probes])).stdout);
  const onHost = (probes: string[]) => parse(spawnSync('perl', ['-e', PROBE, ...probes], { encoding: 'utf8' }).stdout);

  test('unix, inet, inet6 and netlink work; every other family, vsock first, answers EAFNOSUPPORT', async () => {
    assert.ok(nr, `syscall numbers for ${process.arch}`);
    const allowed = [`unix:${nr.socket}:1:1`, `inet:${nr.socket}:2:1`, `inet6:${nr.socket}:10:1`, `netlink:${nr.socket}:16:2`, `unixpair:${nr.socketpair}:1:1:1`];
    assert.deepEqual(await inside(allowed), Object.fromEntries(allowed.map((p) => [p.split(':')[0], 'ok'])));

    const allowedSet = new Set(Object.values(ALLOWED_SOCKET_FAMILIES));
    const probes: string[] = [];
    for (let family = 0; family <= LAST_FAMILY; family++) {
      if (allowedSet.has(family)) continue;
      for (const type of TYPES) probes.push(`af${family}t${type}:${nr.socket}:${family}:${type}`);
      probes.push(`af${family}pair:${nr.socketpair}:${family}:1:1`);
    }
    const got = await inside(probes);
    const host = onHost(probes);
    const wrong = probes.map((p) => p.split(':')[0]!).filter((name) => got[name] !== EAFNOSUPPORT);
    assert.deepEqual(wrong.map((n) => `${n}=${got[n]}`), [], 'every refused family answers EAFNOSUPPORT');
    // The control: the host's kernel has these families, so the answers above come from the filter.
    const hostHas = (family: number) => TYPES.some((type) => host[`af${family}t${type}`] !== EAFNOSUPPORT);
    assert.ok(hostHas(AF_VSOCK), `the host makes vsock sockets: ${JSON.stringify(host)}`);
    assert.equal(host[`af${AF_VSOCK}t1`], 'ok');
    assert.ok(hostHas(AF_PACKET));
    const kernelFamilies = Array.from({ length: LAST_FAMILY + 1 }, (_, f) => f).filter((f) => !allowedSet.has(f) && hostHas(f));
    assert.ok(kernelFamilies.length >= 3, `families the host kernel has and sandboxes do not: ${kernelFamilies.join(', ')}`);
    // AF_ALG: the host kernel may lack it; the sandbox refuses it either way (checked above).
    assert.equal(got[`af${AF_ALG}t5`], EAFNOSUPPORT);
  });

  test('high bits in the family register do not let vsock, or anything, through', async () => {
    assert.ok(nr);
    const probes = [
      `vsock_hi32:${nr.socket}:${HIGH + AF_VSOCK}:1`,
      `vsock_allhi:${nr.socket}:${'18446744069414584360' /* 0xffffffff00000028 */}:1`,
      `inet_hi32:${nr.socket}:${HIGH + 2}:1`,
      `unix_hi32:${nr.socket}:${HIGH + 1}:1`,
      `netlink_hi32:${nr.socket}:${HIGH + 16}:2`,
      `unixpair_hi32:${nr.socketpair}:${HIGH + 1}:1:1`,
      `minus1:${nr.socket}:-1:1`,
    ];
    const got = await inside(probes);
    assert.deepEqual(got, Object.fromEntries(probes.map((p) => [p.split(':')[0], EAFNOSUPPORT])));
    // The control: the kernel itself reads only the low 32 bits, so on the host these are sockets.
    const host = onHost(probes.slice(0, 5));
    assert.deepEqual(host, { vsock_hi32: 'ok', vsock_allhi: 'ok', inet_hi32: 'ok', unix_hi32: 'ok', netlink_hi32: 'ok' });
  });

  test('32-bit x86: socketcall answers ENOSYS (its arguments are out of the filter\'s sight); direct socket() is filtered', { skip: process.arch !== 'x64' && 'x86 only' }, async () => {
    const probes = {
      socketcall_vsock: i386SocketcallSocket(AF_VSOCK),
      socketcall_inet: i386SocketcallSocket(2),
      socket_vsock: i386Socket(AF_VSOCK),
      socket_inet: i386Socket(2),
    };
    const host: Record<string, string> = {};
    const got: Record<string, string> = {};
    for (const [name, elf] of Object.entries(probes)) {
      const path = join(hostDir, name);
      await writeFile(path, elf);
      await chmod(path, 0o755);
      host[name] = i386Result(spawnSync(path).status);
      const copied = await t.rt.exec(id, ['/bin/sh', '-c', `base64 -d > /tmp/${name} && chmod +x /tmp/${name}`], { input: elf.toString('base64') });
      assert.equal(copied.code, 0, copied.stderr);
    }
    // The host runs 32-bit code (IA32 emulation) and the multiplexer would hand out vsock sockets.
    assert.deepEqual(host, { socketcall_vsock: 'fd', socketcall_inet: 'fd', socket_vsock: 'fd', socket_inet: 'fd' });
    for (const name of Object.keys(probes)) got[name] = i386Result((await t.rt.exec(id, [`/tmp/${name}`])).code);
    assert.deepEqual(got, { socketcall_vsock: ENOSYS, socketcall_inet: ENOSYS, socket_vsock: EAFNOSUPPORT, socket_inet: 'fd' });
  });
});
