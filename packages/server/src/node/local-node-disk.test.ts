import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ServiceError } from '@sandboxd/protocol';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { LocalNode } from './local-node.js';
import type { TakeAsk } from './types.js';

/**
 * A node of a cluster admits the disks it makes (LocalNode claimDisk; roles/node.ts holds a
 * DiskRoom over its data filesystem): a take asks for its disk's room first and is refused with
 * nothing booted, keeps the room once its sandbox is made, and gives it back when the take fails.
 */
test('a take claims its disk first: refused, nothing is created; made, the claim is kept; failed, it is given back', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-node-disk-'));
  const layer = join(dir, 'layer');
  await mkdir(layer);
  const runtime = new FakeRuntime({ socketDir: join(dir, 's') });
  await runtime.setupHost();
  const claims: Array<{ bytes: number; what: string; kept?: boolean | undefined; released: boolean }> = [];
  let refuse = false;
  const node = new LocalNode({
    id: 'n',
    runtime,
    pool: { minPerKey: 0, maxMemoryMb: 0, horizonSeconds: 0, shrinkAfterMs: 60_000, bootConcurrency: 2, refillDelayMs: 0, tickMs: 0 },
    agentReadyTimeoutMs: 5000,
    log: () => undefined,
    claimDisk: async (bytes, what) => {
      if (refuse) throw new ServiceError('INSUFFICIENT_STORAGE', `no room for ${what}`);
      const c: (typeof claims)[number] = { bytes, what, released: false };
      claims.push(c);
      return (kept) => {
        c.kept = kept;
        c.released = true;
      };
    },
  });
  const ask: TakeAsk = {
    spec: { id: '', hostname: '', lowerDirs: [layer], layerIds: ['l'], resources: { vcpu: 1, memoryMb: 256, diskGb: 3, pidsMax: 256 }, internetAccess: false, env: {} },
    poolId: 'tpl',
    label: 'tpl',
    env: {},
    egress: null,
  };
  try {
    const made = await node.take(ask);
    assert.equal(claims.length, 1);
    assert.equal(claims[0]!.bytes, 3 * 1024 ** 3);
    assert.match(claims[0]!.what, /3 GB/);
    assert.deepEqual([claims[0]!.released, claims[0]!.kept], [true, undefined], 'kept: the disk now counts as it is');
    assert.deepEqual(await node.ownedIds(), [made.id], 'the node holds it for someone: its disk may grow');

    refuse = true;
    const before = (await runtime.list()).length;
    await assert.rejects(node.take(ask), (err: unknown) => err instanceof ServiceError && err.code === 'INSUFFICIENT_STORAGE');
    assert.equal((await runtime.list()).length, before, 'refused before anything was booted');

    refuse = false;
    const heal = runtime.failOn('create', new Error('boot failed'));
    await assert.rejects(node.take(ask));
    heal();
    const failed = claims.at(-1)!;
    assert.deepEqual([failed.released, failed.kept], [true, false], 'a failed take gives its room back');
  } finally {
    await node.close().catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
});
