// The CPU weight of a sandbox's cgroup as the warm pool sets it: the file and value on each cgroup
// version, written and read back on a directory fixture shaped like each layout (the real cgroup
// files are read by e2e/src/warm-pool-weight.test.ts).
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { cpuWeightFile, readCpuWeight, sharesOfWeight, writeCpuWeight, type CgroupLayout } from './cgroups.js';

test('v1 shares are the same share of the default as the v2 weight (100 ↔ 1024), at least 2', () => {
  assert.equal(sharesOfWeight(100), 1024);
  assert.equal(sharesOfWeight(10), 102);
  assert.equal(sharesOfWeight(1), 10);
  assert.equal(sharesOfWeight(10_000), 102_400);
});

test('the weight is written to cpu.weight (v2) or the cpu hierarchy\'s cpu.shares (v1), and read back on the v2 scale', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-cpuw-'));
  try {
    const v2: CgroupLayout = { version: 2, root: dir };
    const v1: CgroupLayout = { version: 1, hierarchies: [{ mountPoint: join(dir, 'memory'), controllers: ['memory'] }, { mountPoint: join(dir, 'cpu'), controllers: ['cpu'] }] };
    assert.deepEqual(cpuWeightFile(v2, '/sandboxd/a', 10), { file: `${dir}/sandboxd/a/cpu.weight`, value: '10' });
    assert.deepEqual(cpuWeightFile(v1, '/sandboxd/a', 10), { file: `${dir}/cpu/sandboxd/a/cpu.shares`, value: '102' });
    // No such cgroup (the sandbox does not run): nothing written, false.
    assert.equal(await writeCpuWeight(v2, '/sandboxd/a', 10), false);
    assert.equal(await readCpuWeight(v2, '/sandboxd/a'), undefined);
    await mkdir(join(dir, 'sandboxd/a'), { recursive: true });
    await writeFile(join(dir, 'sandboxd/a/cpu.weight'), '100\n');
    await mkdir(join(dir, 'cpu/sandboxd/a'), { recursive: true });
    await writeFile(join(dir, 'cpu/sandboxd/a/cpu.shares'), '1024\n');
    assert.equal(await writeCpuWeight(v2, '/sandboxd/a', 10), true);
    assert.equal(await readFile(join(dir, 'sandboxd/a/cpu.weight'), 'utf8'), '10');
    assert.equal(await readCpuWeight(v2, '/sandboxd/a'), 10);
    assert.equal(await writeCpuWeight(v1, '/sandboxd/a', 10), true);
    assert.equal(await readFile(join(dir, 'cpu/sandboxd/a/cpu.shares'), 'utf8'), '102');
    assert.equal(Math.round((await readCpuWeight(v1, '/sandboxd/a'))!), 10);
    // Out of range: refused before anything is written.
    for (const bad of [0, 10_001, 1.5, Number.NaN]) await assert.rejects(writeCpuWeight(v2, '/sandboxd/a', bad), /cpu weight must be an integer from 1 to 10000/);
    assert.equal(await readFile(join(dir, 'sandboxd/a/cpu.weight'), 'utf8'), '10');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
