// Root tests with real containers: build steps (CrunRuntime.runStep) as the template builder uses them.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, statSync } from 'node:fs';
import { chown, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CANONICAL_ID_OFFSET, ID_RANGE, LEGACY_ID_OFFSET } from './ids.js';
import { baseLayer } from '../testing/fixtures.js';
import { assertNoLeaks, createTestRuntime, type TestRuntime } from '../testing/runtime-fixtures.js';
import type { StepRunOptions } from './types.js';

/** uid:gid of every entry under `dir` outside the canonical range (at most 5). */
function nonCanonical(dir: string): string[] {
  const out: string[] = [];
  const inRange = (id: number) => id >= CANONICAL_ID_OFFSET && id < CANONICAL_ID_OFFSET + ID_RANGE;
  const stack = [dir];
  while (stack.length > 0 && out.length < 5) {
    const d = stack.pop()!;
    for (const p of [d, ...readdirSync(d).map((n) => join(d, n))]) {
      const st = lstatSync(p);
      if (!inRange(st.uid) || !inRange(st.gid)) out.push(`${p} ${st.uid}:${st.gid}`);
      if (p !== d && st.isDirectory()) stack.push(p);
    }
  }
  return out;
}

describe('CrunRuntime.runStep', { timeout: 300_000 }, () => {
  let t: TestRuntime;
  let lower: string;
  let scratch: string;

  before(async () => {
    lower = (await baseLayer()).path;
    t = await createTestRuntime();
    scratch = await mkdtemp(join(t.dataDir, 'layers-'));
  });

  after(async () => {
    if (t) {
      await assertNoLeaks(t.rt);
      await rm(scratch, { recursive: true, force: true });
      await t.teardown();
    }
  });

  const step = (id: string, script: string, extra: Partial<StepRunOptions> = {}): StepRunOptions => ({
    id,
    lowerDirs: [lower],
    upperDir: join(scratch, id),
    argv: ['/bin/bash', '-c', script],
    env: { DEBIAN_FRONTEND: 'noninteractive' },
    cwd: '/',
    internetAccess: false,
    resources: { vcpu: 2, memoryMb: 1024, diskGb: 4, pidsMax: 512 },
    timeoutMs: 120_000,
    ...extra,
  });

  test('apt-get update && apt-get install works inside (NAT, apt sandbox user); the upper becomes a canonical layer', async () => {
    let output = '';
    const r = await t.rt.runStep(
      step('apt1', 'apt-get update -q && apt-get install -y -q --no-install-recommends hello && hello && id -u _apt', {
        internetAccess: true,
        onOutput: (c) => (output += c),
      }),
    );
    assert.deepEqual(r, { exitCode: 0, timedOut: false }, output.slice(-2000));
    assert.match(output, /Setting up hello/);
    assert.match(output, /Hello, world!/);
    const upper = join(scratch, 'apt1');
    const hello = statSync(join(upper, 'usr/bin/hello'));
    assert.equal(hello.uid, CANONICAL_ID_OFFSET, 'root inside = the canonical offset on disk');
    assert.equal(statSync(upper).uid, CANONICAL_ID_OFFSET);
    assert.deepEqual(nonCanonical(upper), [], 'every file of the layer in canonical ownership');
    assert.equal(statSync(upper).uid, statSync(lower).uid, "the layer's root directory looks like the image's");
    assert.ok(!existsSync(join(upper, '.sb')), 'no mount targets of ours in the layer');
    assert.ok(!existsSync(join(upper, 'tmp', 'apt-dpkg-install')), '/tmp was a tmpfs');
    assert.deepEqual(readdirSync(dirname(upper)).filter((n) => n.includes('.work-')), [], 'overlay workdir removed');
  });

  test('exit code, env, cwd and read-only binds; no network without internet access', async () => {
    const input = join(scratch, 'input.txt');
    await writeFile(input, 'from the host\n');
    let output = '';
    const r = await t.rt.runStep(
      step('misc1', 'pwd; echo "$FOO"; cat /in/input.txt; echo x >> /in/input.txt || echo ro; getent hosts example.org || echo nodns; echo layer > /made-here; exit 7', {
        env: { FOO: 'bar' },
        cwd: '/var',
        binds: [{ source: input, target: '/in/input.txt' }],
        onOutput: (c) => (output += c),
      }),
    );
    assert.deepEqual(r, { exitCode: 7, timedOut: false });
    assert.match(output, /^\/var\nbar\nfrom the host\n/);
    assert.match(output, /ro\n/);
    assert.match(output, /nodns\n/);
    assert.ok(existsSync(join(scratch, 'misc1', 'made-here')));
    assert.ok(!existsSync(join(scratch, 'misc1', 'in')), 'bind targets crun had to create are not in the layer');
  });

  test('a lower still at the legacy offset is idmapped to canonical; the output is canonical', async () => {
    const legacy = join(scratch, 'legacy-layer');
    await mkdir(join(legacy, 'opt/old'), { recursive: true });
    await writeFile(join(legacy, 'opt/old/file'), 'old layer\n');
    for (const [p, k] of [['', 0], ['opt', 0], ['opt/old', 1000], ['opt/old/file', 1000]] as const) {
      await chown(join(legacy, p), LEGACY_ID_OFFSET + k, LEGACY_ID_OFFSET + k);
    }
    let output = '';
    const r = await t.rt.runStep({
      ...step('legacy1', 'stat -c "%u %n" / /opt/old/file /usr/bin/bash; cat /opt/old/file; echo new > /opt/old/new; chown 1000 /opt/old/new'),
      lowerDirs: [legacy, lower],
      onOutput: (c) => (output += c),
    });
    assert.deepEqual(r, { exitCode: 0, timedOut: false }, output);
    assert.equal(output, '0 /\n1000 /opt/old/file\n0 /usr/bin/bash\nold layer\n');
    const upper = join(scratch, 'legacy1');
    assert.equal(statSync(upper).uid, CANONICAL_ID_OFFSET, "the layer's root is canonical although the top lower is not");
    assert.equal(statSync(join(upper, 'opt/old/new')).uid, CANONICAL_ID_OFFSET + 1000);
    assert.equal(statSync(join(upper, 'opt/old')).uid, CANONICAL_ID_OFFSET + 1000, 'copied up in canonical form');
    assert.deepEqual(nonCanonical(upper), []);
    assert.equal(statSync(join(legacy, 'opt/old/file')).uid, LEGACY_ID_OFFSET + 1000, 'the lower is untouched');
    assert.deepEqual(readdirSync(join(t.dataDir, 'steps')), [], 'no step directory (or idmapped mount) left');
  });

  test('timeout kills the step and reports timedOut', async () => {
    const t0 = Date.now();
    const r = await t.rt.runStep(step('slow1', 'sleep 60 & sleep 60; echo never', { timeoutMs: 1000 }));
    assert.equal(r.timedOut, true);
    assert.notEqual(r.exitCode, 0);
    assert.ok(Date.now() - t0 < 15_000, 'killed promptly');
  });

  test('a step writes to a disk of its own: past its diskGb it gets ENOSPC inside, and only that much lands on the host', async () => {
    let output = '';
    const r = await t.rt.runStep(
      step('big1', 'dd if=/dev/zero of=/big bs=1M count=3000 status=none; echo "dd exit $?"; stat -c "size %s" /big', {
        resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 },
        onOutput: (c) => (output += c),
      }),
    );
    assert.equal(r.exitCode, 0, output);
    assert.match(output, /No space left on device/);
    assert.match(output, /dd exit 1/);
    const size = Number(/size (\d+)/.exec(output)![1]);
    assert.ok(size > 500 * 1024 ** 2 && size <= 1024 ** 3, `wrote ${size} bytes`);
    assert.equal(statSync(join(scratch, 'big1', 'big')).size, size, 'the result is the step disk copied out');
    await rm(join(scratch, 'big1'), { recursive: true, force: true });
  });

  test("no host user can reach a running step's rootfs (an image's setuid files would run as its root's host uid)", async () => {
    const running = t.rt.runStep(step('peek1', 'sleep 3'));
    const rootfs = join(t.dataDir, 'steps', 'peek1', 'rootfs');
    for (let i = 0; i < 100 && !existsSync(join(rootfs, 'bin')); i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(existsSync(join(rootfs, 'bin')), 'the step runs');
    const peek = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', '--', 'ls', join(rootfs, 'bin')], { encoding: 'utf8' });
    assert.notEqual(peek.status, 0);
    assert.match(peek.stderr, /Permission denied/);
    assert.deepEqual(await running, { exitCode: 0, timedOut: false });
    await rm(join(scratch, 'peek1'), { recursive: true, force: true });
  });

  test('an abort signal kills the step and rejects', async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('build cancelled')), 800);
    const t0 = Date.now();
    await assert.rejects(t.rt.runStep(step('abort1', 'sleep 60', { signal: ac.signal })), /build cancelled/);
    assert.ok(Date.now() - t0 < 15_000);
    await assert.rejects(t.rt.runStep(step('abort2', 'true', { signal: ac.signal })), /build cancelled/);
  });
});
