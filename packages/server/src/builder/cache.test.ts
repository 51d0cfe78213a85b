import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { BuildCache } from './cache.js';

const dir = mkdtempSync(join(tmpdir(), 'sbd-build-cache-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('prune drops the entries whose layer was collected, and keeps the others', async () => {
  const cache = new BuildCache(join(dir, 'cache'));
  const [k1, k2, k3] = ['1', '2', '3'].map((c) => c.repeat(64));
  const [kept, gone] = ['a'.repeat(64), 'b'.repeat(64)];
  await cache.set(k1!, kept);
  await cache.set(k2!, gone);
  await cache.set(k3!, kept);
  assert.equal(await cache.prune(async (id) => id === kept), 1);
  assert.equal(await cache.get(k1!), kept);
  assert.equal(await cache.get(k2!), undefined);
  assert.equal(await cache.get(k3!), kept);
  assert.equal(await new BuildCache(join(dir, 'none')).prune(async () => false), 0, 'no cache directory: nothing to do');
});
