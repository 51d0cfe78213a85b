import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { LocalNode, NORMAL_CPU_WEIGHT, POOL_CPU_WEIGHT } from './local-node.js';
import type { TakeAsk } from './types.js';

/**
 * The CPU weight of the warm pool's sandboxes through the real LocalNode over the FakeRuntime
 * (which records the weight a cgroup would hold; e2e/src/warm-pool-weight.test.ts reads the real
 * cgroup files): booted ahead and waiting unclaimed at POOL_CPU_WEIGHT, taken at the normal one.
 */
test('a sandbox booted ahead waits at the low CPU weight; a create gets it at the normal weight; one booted for a create is normal throughout', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-weight-'));
  const layer = join(dir, 'layer');
  await mkdir(layer);
  const runtime = new FakeRuntime({ socketDir: join(dir, 's') });
  await runtime.setupHost();
  const node = new LocalNode({
    id: 'n',
    runtime,
    pool: { minPerKey: 2, maxMemoryMb: 200, horizonSeconds: 0, shrinkAfterMs: 60_000, bootConcurrency: 2, refillDelayMs: 0, tickMs: 0 },
    agentReadyTimeoutMs: 5000,
    log: () => undefined,
  });
  const ask: TakeAsk = {
    spec: { id: '', hostname: '', lowerDirs: [layer], layerIds: ['l'], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 256 }, internetAccess: false, env: {} },
    poolId: 'tpl',
    label: 'tpl',
    env: {},
    egress: null,
  };
  const readyIds = async (n: number) => {
    for (let i = 0; i < 200; i++) {
      const held = node.held();
      if (node.warmStats().ready >= n && node.warmStats().booting === 0) return held;
      await sleep(10);
    }
    throw new Error('the pool did not fill');
  };
  try {
    // The first create boots for itself (nothing was ready): the normal weight from the start.
    const first = await node.take(ask);
    assert.equal(first.warm, false);
    assert.equal(runtime.cpuWeightOf(first.id), NORMAL_CPU_WEIGHT);
    // Then the pool boots its floor ahead, at the low weight, and holds them so.
    const ready = await readyIds(2);
    assert.equal(ready.length, 2);
    for (const id of ready) assert.equal(runtime.cpuWeightOf(id), POOL_CPU_WEIGHT, id);
    // A create takes one: the normal weight before it is handed out; the other still waits low.
    const second = await node.take(ask);
    assert.equal(second.warm, true);
    assert.ok(ready.includes(second.id));
    assert.equal(runtime.cpuWeightOf(second.id), NORMAL_CPU_WEIGHT);
    const other = ready.find((id) => id !== second.id)!;
    assert.equal(runtime.cpuWeightOf(other), POOL_CPU_WEIGHT);
    // A sandbox whose weight cannot be set back is not handed out: the next one is.
    const heal = runtime.failOn('setCpuWeight', new Error('injected'), (id) => id === other);
    const third = await node.take(ask);
    heal();
    assert.notEqual(third.id, other);
    assert.equal(runtime.cpuWeightOf(third.id), NORMAL_CPU_WEIGHT);
    assert.equal(runtime.cpuWeightOf(other), undefined, 'the one that failed is destroyed');
  } finally {
    await node.close();
    for (const id of await runtime.list()) await runtime.destroy(id);
    await runtime.dispose();
    await rm(dir, { recursive: true, force: true });
  }
});
