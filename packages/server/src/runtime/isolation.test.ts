// Root tests with real containers: what a sandbox can see and do. One sandbox, many probes.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { writeFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CANONICAL_ID_OFFSET, ID_RANGE } from './ids.js';
import { baseLayer } from '../testing/fixtures.js';
import { agentGet, assertNoLeaks, createTestRuntime, hostView, sh, testSpec, type TestRuntime } from '../testing/runtime-fixtures.js';
import { SANDBOX_ID_BASE } from './id-ranges.js';

/** Runs argv on the host as uid = gid = `id` with no supplementary groups (an unprivileged user). */
function asHostUser(id: number, argv: string[]): { code: number | null; stderr: string } {
  const r = spawnSync('setpriv', [`--reuid=${id}`, `--regid=${id}`, '--clear-groups', '--', ...argv], { encoding: 'utf8' });
  return { code: r.status, stderr: r.stderr };
}

/** Host uid of the sandbox's init (root inside), from /proc/<pid>/status. */
async function hostRootUid(t: TestRuntime, id: string): Promise<{ uid: number; gid: number }> {
  const pid = await t.rt.initPid(id);
  assert.ok(pid);
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const uids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$/m.exec(status)!.slice(1).map(Number);
  const gids = /^Gid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$/m.exec(status)!.slice(1).map(Number);
  assert.equal(new Set(uids).size, 1, status);
  assert.equal(new Set(gids).size, 1, status);
  return { uid: uids[0]!, gid: gids[0]! };
}

/** Entries under `dir` (same filesystem) whose uid or gid is in [lo, hi); at most 5 reported. */
function ownedWithin(dir: string, lo: number, hi: number): string[] {
  const out: string[] = [];
  const root = lstatSync(dir);
  const stack = [dir];
  const check = (p: string) => {
    const st = lstatSync(p);
    if ((st.uid >= lo && st.uid < hi) || (st.gid >= lo && st.gid < hi)) out.push(`${p} ${st.uid}:${st.gid}`);
    return st;
  };
  check(dir);
  while (stack.length > 0 && out.length < 5) {
    const d = stack.pop()!;
    for (const n of readdirSync(d)) {
      const st = check(join(d, n));
      if (st.isDirectory() && st.dev === root.dev) stack.push(join(d, n));
    }
  }
  return out;
}

describe('CrunRuntime isolation', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let lower: string;
  const id = 'iso1';
  const other = 'iso2';
  const hostMarker = `/tmp/sandboxd-host-only-${process.pid}`;

  before(async () => {
    lower = (await baseLayer()).path;
    t = await createTestRuntime();
    await writeFile(hostMarker, 'host secret');
    // Concurrently: the two must still get distinct id ranges.
    await Promise.all([
      t.rt.create(testSpec(id, [lower], { hostname: 'iso-host', env: { SANDBOX_ID: id, GREETING: 'hi there' } })),
      t.rt.create(testSpec(other, [lower], { internetAccess: true })),
    ]);
  });

  after(async () => {
    await rm(hostMarker, { force: true });
    if (t) {
      await t.rt.destroy(id).catch(() => undefined);
      await t.rt.destroy(other).catch(() => undefined);
      await assertNoLeaks(t.rt);
      await t.teardown();
    }
  });

  test('the agent answers on the host-side socket, with the spec env, as root inside', async () => {
    const r = await agentGet(t.rt.agentSocket(id));
    assert.equal(r.ok, true);
    assert.equal(r.hostname, 'iso-host');
    assert.equal(r.uid, 0);
    assert.equal(r.pid, 2, 'the agent is the only child of init');
    const env = r.env as Record<string, string>;
    assert.equal(env.GREETING, 'hi there');
    assert.equal(env.SANDBOX_ID, id);
    assert.ok(env.PATH?.includes('/usr/bin'), 'PATH is set when the spec has none');
    assert.equal(env.SANDBOXD_AGENT_LISTEN_FD, undefined, 'the agent hid the fd variable');
    // The socket lives in the sandbox's host directory, which is not mounted into the sandbox.
    assert.ok(t.rt.agentSocket(id).startsWith(`${t.dataDir}/sandboxes/${id}/`));
    const st = statSync(t.rt.agentSocket(id));
    assert.ok(st.isSocket());
    assert.equal(st.mode & 0o777, 0o600, 'only host root may connect');
    assert.equal(st.uid, 0);
    const inside = await sh(t.rt, id, 'grep -c agent.sock /proc/self/mountinfo', true);
    assert.equal(inside.stdout.trim(), '0', 'the agent socket is not mounted inside');
  });

  test('own hostname and pid namespace: PID 1 is catatonit, host processes are invisible', async () => {
    const r = await sh(t.rt, id, 'hostname; cat /proc/1/cmdline | tr "\\0" " "; echo; ls /proc | grep -c "^[0-9]*$"');
    const [hostname, cmdline, count] = r.stdout.trim().split('\n');
    assert.equal(hostname, 'iso-host');
    assert.match(cmdline!, /^\/\.sb\/init -- /);
    assert.ok(Number(count) < 10, `only the sandbox's few processes are visible (saw ${count})`);
    const hostPid = process.pid;
    const probe = await sh(t.rt, id, `test -e /proc/${hostPid}/cmdline && cat /proc/${hostPid}/cmdline | tr "\\0" " "`, true);
    assert.doesNotMatch(probe.stdout, /node/, 'the test runner (host pid) is not visible by its pid');
  });

  test('host files are invisible', async () => {
    const r = await sh(t.rt, id, `test -e ${hostMarker} && echo visible; test -e ${t.dataDir} && echo datadir; cat /etc/os-release | head -1; ls /root | wc -l`);
    assert.doesNotMatch(r.stdout, /visible|datadir/);
    assert.match(r.stdout, /Debian/);
  });

  test("root inside is the sandbox's own host id range, distinct per sandbox; its files land owned by it", async () => {
    const a = await hostRootUid(t, id);
    const b = await hostRootUid(t, other);
    for (const [name, r] of [[id, a], [other, b]] as const) {
      assert.ok(r.uid >= SANDBOX_ID_BASE && (r.uid - SANDBOX_ID_BASE) % ID_RANGE === 0, `${name}: ${r.uid}`);
      assert.equal(r.gid, r.uid);
      const persisted = JSON.parse(readFileSync(`${t.dataDir}/sandboxes/${name}/ids.json`, 'utf8')) as { base: number };
      assert.equal(persisted.base, r.uid, `${name}: the range is recorded in its directory`);
      const map = await sh(t.rt, name, 'cat /proc/self/uid_map /proc/self/gid_map');
      for (const line of map.stdout.trim().split('\n')) assert.deepEqual(line.trim().split(/\s+/), ['0', String(r.uid), '65536']);
    }
    assert.ok(Math.abs(a.uid - b.uid) >= ID_RANGE, `distinct ranges: ${a.uid} and ${b.uid}`);
    // The networked one joined the netns holder's user namespace: mapped the same way.
    const pid = await t.rt.initPid(other);
    assert.equal(readFileSync(`/proc/${pid}/uid_map`, 'utf8').trim().split(/\s+/).join(' '), `0 ${b.uid} 65536`);

    await sh(t.rt, id, 'echo data > /owned-by-root-inside && mkdir -p /home/u && chown 1000:1000 /home/u');
    // No mount of a running sandbox stays in the host's table: the idmapped layer mounts were
    // detached once the overlay was made, the overlay and the disk once the container held them.
    await t.rt.settled(id);
    const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.includes(`/sandboxes/${id}/`));
    assert.deepEqual(mounts, []);
    const view = await hostView(t.rt, id);
    try {
      const upper = view.upper;
      assert.equal(statSync(`${upper}/owned-by-root-inside`).uid, a.uid);
      assert.equal(statSync(`${upper}/home/u`).uid, a.uid + 1000);
      // The layer is shared and stays canonical on disk; inside it is root's, through the idmapped mount.
      assert.equal(statSync(lower).uid, CANONICAL_ID_OFFSET);
      assert.equal(statSync(`${lower}/usr/bin/bash`).uid, CANONICAL_ID_OFFSET);
      const inside = await sh(t.rt, id, 'stat -c "%u:%g" / /usr/bin/bash /etc/shadow; touch /usr/bin/bash && echo copied-up');
      assert.equal(inside.stdout, `0:0\n0:0\n0:42\ncopied-up\n`, 'layer files are root:root (and shadow root:shadow) inside');
      assert.equal(statSync(`${upper}/usr/bin/bash`).uid, a.uid, 'a copy-up lands in the sandbox range');
      assert.equal(statSync(`${lower}/usr/bin/bash`).uid, CANONICAL_ID_OFFSET, 'the shared layer is untouched');
    } finally {
      view.close();
    }
  });

  test("another sandbox's host user cannot reach a sandbox's files; its own can", async () => {
    const a = await hostRootUid(t, id);
    const b = await hostRootUid(t, other);
    await sh(t.rt, id, 'echo secret > /root/private && chmod 600 /root/private && chmod 755 /root');
    const dir = `${t.dataDir}/sandboxes/${id}`;
    const st = statSync(dir);
    assert.deepEqual([st.uid, st.gid, st.mode & 0o777], [0, a.gid, 0o710], 'sandbox dir: root, group of its own range');
    await t.rt.settled(id);
    assert.ok(!existsSync(`${dir}/rootfs/root`), 'the root is not at a host path while the sandbox runs (detached)');
    // Where the host shows it (its init's root; its disk mounted again), another sandbox's host
    // user is refused, and so is its own through its init's root; host root reads it there.
    const root = `/proc/${await t.rt.initPid(id)}/root/root/private`;
    const view = await hostView(t.rt, id);
    try {
      assert.deepEqual([statSync(`${dir}/disk`).uid, statSync(`${dir}/disk`).mode & 0o777], [0, 0o700]);
      for (const path of [root, `${view.upper}/root/private`]) {
        const r = asHostUser(b.uid, ['cat', path]);
        assert.notEqual(r.code, 0, `sandbox ${other}'s root (host ${b.uid}) read ${path}`);
        assert.match(r.stderr, /Permission denied/);
      }
    } finally {
      view.close();
    }
    const own = asHostUser(a.uid, ['cat', root]);
    assert.notEqual(own.code, 0, `its own host user (${a.uid}) read ${root}`);
    assert.equal(readFileSync(root, 'utf8'), 'secret\n', 'the control: the file is there');
  });

  test('a host user holding the default subuid range (100000...) can touch neither layers nor sandbox files', async (ctx) => {
    const view = await hostView(t.rt, id);
    ctx.after(() => view.close());
    const upper = view.upper;
    await sh(t.rt, id, 'echo x > /tmp-free-file && chmod 666 /tmp-free-file');
    // Every id a user could map with Debian's default /etc/subuid entries (100000 + 65536 n, up to SUB_UID_MAX).
    const SUB_UID_MAX = 600_100_000;
    assert.deepEqual(ownedWithin(lower, 100_000, SUB_UID_MAX), [], 'no layer file owned by a subuid id');
    assert.deepEqual(ownedWithin(upper, 100_000, SUB_UID_MAX), [], 'no sandbox file owned by a subuid id');
    for (const uid of [100_000, 165_535]) {
      assert.notEqual(asHostUser(uid, ['touch', `${lower}/usr/bin/bash`]).code, 0, `uid ${uid} wrote to the layer`);
      assert.notEqual(asHostUser(uid, ['sh', '-c', `echo y > ${upper}/tmp-free-file`]).code, 0, `uid ${uid} wrote to the sandbox`);
      assert.notEqual(asHostUser(uid, ['ls', `${t.dataDir}/sandboxes/${id}/rootfs/`]).code, 0, `uid ${uid} listed the sandbox`);
    }
  });

  test('capabilities: Docker default set minus NET_RAW, no CAP_SYS_ADMIN, no_new_privs, seccomp filter on', async () => {
    const r = await sh(t.rt, id, 'grep -E "^(CapEff|CapBnd|NoNewPrivs|Seccomp):" /proc/1/status /proc/self/status');
    assert.match(r.stdout, /\/proc\/1\/status:CapEff:\s+00000000a80405fb/);
    assert.match(r.stdout, /\/proc\/self\/status:CapBnd:\s+00000000a80405fb/);
    assert.match(r.stdout, /\/proc\/1\/status:NoNewPrivs:\s+1/);
    assert.match(r.stdout, /\/proc\/self\/status:NoNewPrivs:\s+1/);
    assert.match(r.stdout, /\/proc\/1\/status:Seccomp:\s+2/);
    const capEff = BigInt('0x' + /\/proc\/self\/status:CapEff:\s+(\w+)/.exec(r.stdout)![1]);
    const CAP_SYS_ADMIN = 21n;
    assert.equal((capEff >> CAP_SYS_ADMIN) & 1n, 0n);
    // No raw or packet sockets (frame forging on the bridge); ICMP datagram sockets (ping) work.
    const sock = await sh(t.rt, id, `perl -MSocket -e '
      printf "packet=%d\\n", socket(my $p, 17, SOCK_RAW, 0) ? 1 : 0;
      printf "raw=%d\\n", socket(my $r, PF_INET, SOCK_RAW, 1) ? 1 : 0;
      printf "icmp_dgram=%d\\n", socket(my $d, PF_INET, SOCK_DGRAM, 1) ? 1 : 0;'`);
    assert.equal(sock.stdout, 'packet=0\nraw=0\nicmp_dgram=1\n');
  });

  test('seccomp denies unshare, mount, keyctl, bpf-class calls; clone3 and io_uring say ENOSYS', async () => {
    const u = await sh(t.rt, id, 'unshare -U true', true);
    assert.notEqual(u.code, 0);
    assert.match(u.stderr, /Operation not permitted/);
    const m = await sh(t.rt, id, 'mount -t tmpfs x /mnt', true);
    assert.notEqual(m.code, 0);
    // perl (perl-base is in every Debian image) makes the raw syscalls that have no CLI here.
    // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1) needs no capability: without the
    // filter it returns a keyring id (the host check below proves it).
    const probe = `perl -e 'for my $t (@ARGV) { my ($n,@a)=split /,/, $t; my @b=map { $_+0 } @a; $!=0; my $r=syscall($b[0], @b[1..$#b]); printf "%s %d %d\\n", $n, $r, $!+0 }' \
      keyctl,250,0,-3,1 userfaultfd,323,1 io_uring_setup,425,1,0 clone3,435,0,0 clone_newuser,56,268435473,0,0,0,0 \
      personality_norandom,135,262144 personality_query,135,4294967295 setns,308,0,0 perf_event_open,298,0,0,-1,-1,0`;
    const r = await sh(t.rt, id, probe);
    const res = Object.fromEntries(r.stdout.trim().split('\n').map((l) => { const [n, ret, errno] = l.split(' '); return [n, { ret: Number(ret), errno: Number(errno) }]; }));
    const EPERM = 1;
    const ENOSYS = 38;
    assert.deepEqual(res.keyctl, { ret: -1, errno: EPERM });
    assert.deepEqual(res.userfaultfd, { ret: -1, errno: EPERM });
    assert.deepEqual(res.io_uring_setup, { ret: -1, errno: ENOSYS });
    assert.deepEqual(res.clone3, { ret: -1, errno: ENOSYS });
    assert.deepEqual(res.clone_newuser, { ret: -1, errno: EPERM });
    assert.deepEqual(res.personality_norandom, { ret: -1, errno: EPERM });
    assert.ok(res.personality_query!.ret >= 0, 'querying the personality still works');
    assert.deepEqual(res.setns, { ret: -1, errno: EPERM });
    assert.deepEqual(res.perf_event_open, { ret: -1, errno: EPERM });
    const { spawnSync } = await import('node:child_process');
    const host = spawnSync('perl', ['-e', '$!=0; my $r=syscall(250,0,-3,1); print "$r $!\\n"'], { encoding: 'utf8' });
    if (host.status === 0) assert.ok(Number(host.stdout.split(' ')[0]) > 0, `keyctl works without the filter (host: ${host.stdout})`);
  });

  test("the agent is out of reach: no pidfd_getfd of its socket, no ptrace, no /proc/<agent>/fd, mem or environ", async () => {
    // PID 2 is the agent (catatonit's one child), started through the execute-only loader; fd 3 is
    // its listening socket. A sibling user process is the control: the same probes work on it.
    // PTRACE_SEIZE makes the same access check as PTRACE_ATTACH without stopping the tracee.
    const probe = (pid: string) => `perl -e '
        my $pid = $ARGV[0] + 0; $!=0; my $pfd = syscall(434, $pid, 0); printf "pidfd_open=%s\n", $pfd >= 0 ? "ok" : $!+0;
        $!=0; my $r = syscall(438, $pfd, 3, 0); printf "pidfd_getfd=%s\n", $r >= 0 ? "ok" : $!+0;
        $!=0; $r = syscall(101, 0x4206, $pid, 0, 0); printf "ptrace_attach=%s\n", $r >= 0 ? "ok" : $!+0;' ${pid}
      for f in environ mem maps; do (exec 4</proc/${pid}/$f) 2>/dev/null && echo "$f=ok" || echo "$f=denied"; done
      ls /proc/${pid}/fd >/dev/null 2>&1 && echo "fd=ok" || echo "fd=denied"`;
    const agent = await sh(t.rt, id, `test "$(cat /proc/2/comm)" = ld-linux-x86-64 && ${probe('2')}`);
    const EPERM = '1';
    assert.deepEqual(Object.fromEntries(agent.stdout.trim().split('\n').map((l) => l.split('='))), {
      pidfd_open: 'ok', pidfd_getfd: EPERM, ptrace_attach: EPERM, environ: 'denied', mem: 'denied', maps: 'denied', fd: 'denied',
    });
    const sibling = await sh(t.rt, id, `sleep 30 & S=$!; ${probe('$S')}; kill -9 $S`);
    assert.deepEqual(Object.fromEntries(sibling.stdout.trim().split('\n').map((l) => l.split('='))), {
      pidfd_open: 'ok', pidfd_getfd: EPERM, ptrace_attach: 'ok', environ: 'ok', mem: 'ok', maps: 'ok', fd: 'ok',
    });
    // And the agent still answers.
    assert.equal((await agentGet(t.rt.agentSocket(id), '/after-probes')).ok, true);
  });

  test('/proc/keys and other paths are masked, /proc/sys and /sys are read-only, no cgroup tree', async () => {
    const r = await sh(t.rt, id, `
      echo "keys=$(wc -c < /proc/keys)"; echo "timer_list=$(wc -c < /proc/timer_list)"
      touch /sys/kernel/x 2>/dev/null && echo sys-writable
      echo 1 > /proc/sys/kernel/domainname 2>/dev/null && echo procsys-writable
      echo "cgroup_entries=$(ls -A /sys/fs/cgroup | wc -l)"
      echo "net=$(ls /sys/class/net | tr '\\n' ' ')"
      grep -E " /sys | /proc/sys " /proc/self/mountinfo | grep -c " ro," || true`);
    assert.match(r.stdout, /keys=0/);
    assert.match(r.stdout, /timer_list=0/);
    assert.doesNotMatch(r.stdout, /sys-writable|procsys-writable/);
    assert.match(r.stdout, /cgroup_entries=0/);
    assert.match(r.stdout, /net=lo $/m, "sysfs is the sandbox's own: only its loopback");
  });

  test('mounts: tmpfs /tmp, CA bundle and resolv.conf read-only, agent runtime read-only, nofile limit', async () => {
    const r = await sh(t.rt, id, `
      findmnt -n -o FSTYPE /tmp; grep "Max open files" /proc/2/limits | awk '{print $4}'
      echo x >> /etc/ssl/certs/ca-certificates.crt 2>/dev/null && echo ca-writable
      echo x >> /etc/resolv.conf 2>/dev/null && echo resolv-writable
      touch /.sb/node/x 2>/dev/null && echo node-writable
      touch /.sb/agent/x 2>/dev/null && echo agent-writable
      cmp -s /etc/ssl/certs/ca-certificates.crt /dev/stdin < /etc/ssl/certs/ca-certificates.crt && echo same
      touch /.sb/state/ok && echo state-writable`);
    const lines = r.stdout.trim().split('\n');
    assert.equal(lines[0], 'tmpfs');
    assert.equal(lines[1], '16384', "the agent's (and so every execution's) open-file limit");
    assert.doesNotMatch(r.stdout, /ca-writable|resolv-writable|node-writable|agent-writable/);
    assert.match(r.stdout, /state-writable/);
    assert.equal(readFileSync('/etc/ssl/certs/ca-certificates.crt', 'utf8').length > 0, true);
    const inside = await sh(t.rt, id, 'sha256sum /etc/ssl/certs/ca-certificates.crt | cut -d" " -f1');
    const { createHash } = await import('node:crypto');
    assert.equal(inside.stdout.trim(), createHash('sha256').update(readFileSync('/etc/ssl/certs/ca-certificates.crt')).digest('hex'), "the host's CA bundle");
  });

  test('stats report cgroup and disk figures', async () => {
    const s = await t.rt.stats(id);
    assert.ok(s.cpuUsageNs > 0);
    assert.ok(s.memoryBytes > 0);
    assert.equal(s.memoryLimitBytes, 256 * 1024 * 1024);
    assert.equal(s.oomKills, 0);
    assert.ok(s.pids >= 2, 'init and agent');
    assert.ok(s.diskTotalBytes > 0.9 * 1024 ** 3 && s.diskTotalBytes <= 1024 ** 3);
    assert.ok(s.diskUsedBytes > 0 && s.diskUsedBytes < s.diskTotalBytes);
    assert.ok(existsSync(t.rt.agentSocket(id)));
  });
});
