// Root tests with real containers: build steps (CrunRuntime.runStep) as the template builder uses them.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { baseLayer } from '../testing/fixtures.js';
import { assertNoLeaks, createTestRuntime, type TestRuntime } from '../testing/runtime-fixtures.js';
import type { StepRunOptions } from './types.js';

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
    assert.equal(hello.uid, 100000, 'root inside = canonical 100000 on disk');
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

  test('timeout kills the step and reports timedOut', async () => {
    const t0 = Date.now();
    const r = await t.rt.runStep(step('slow1', 'sleep 60 & sleep 60; echo never', { timeoutMs: 1000 }));
    assert.equal(r.timedOut, true);
    assert.notEqual(r.exitCode, 0);
    assert.ok(Date.now() - t0 < 15_000, 'killed promptly');
  });

  test('a step that writes more than its disk allowance is stopped', async () => {
    let output = '';
    const r = await t.rt.runStep(
      step('big1', 'dd if=/dev/zero of=/big bs=1M count=3000 status=none; echo finished', {
        resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 },
        onOutput: (c) => (output += c),
      }),
    );
    assert.notEqual(r.exitCode, 0);
    assert.match(output, /more than its 1 GB disk allowance/);
    assert.doesNotMatch(output, /finished/);
    await rm(join(scratch, 'big1'), { recursive: true, force: true });
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
