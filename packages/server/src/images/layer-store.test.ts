import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { BUILTIN_TEMPLATES } from './builtin.js';
import { FsLayerStore, rootfsKey } from './layer-store.js';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import { baseLayer, layerStoreForTests, testDataDir } from '../testing/fixtures.js';

let scratch: string;

before(async () => {
  await mkdir(testDataDir(), { recursive: true });
  scratch = await mkdtemp(join(testDataDir(), 'layer-store-test-'));
});
after(async () => {
  await rm(scratch, { recursive: true, force: true });
});

const fakeId = (n: number) => n.toString(16).padStart(64, '0');

test('base rootfs: canonical ownership, mount points, no apt lists; the second call is a cache hit', async () => {
  const base = await baseLayer();
  const store = await layerStoreForTests();
  const recipe = BUILTIN_TEMPLATES.find((t) => t.name === 'base')!.recipe;
  assert.equal(base.id, rootfsKey(recipe));
  assert.equal(base.path, store.path(base.id));
  const root = await lstat(base.path);
  assert.equal(root.uid, CANONICAL_ID_OFFSET);
  assert.equal((await lstat(join(base.path, 'usr/bin/bash'))).uid, CANONICAL_ID_OFFSET);
  assert.equal((await lstat(join(base.path, 'usr/bin/su'))).mode & 0o7777, 0o4755);
  assert.ok((await stat(join(base.path, 'usr/bin/curl'))).isFile());
  assert.ok((await stat(join(base.path, 'workspace'))).isDirectory());
  assert.ok((await stat(join(base.path, '.sb'))).isDirectory());
  assert.equal((await stat(join(base.path, 'tmp'))).mode & 0o7777, 0o1777);
  assert.deepEqual((await readdir(join(base.path, 'var/lib/apt/lists'))).filter((n) => n !== 'partial'), []);

  const metaBefore = await store.meta(base.id);
  const mtimeBefore = (await stat(join(store.root, base.id, 'meta.json'))).mtimeMs;
  const lines: string[] = [];
  const again = await store.ensureRootfs({ ...recipe, packages: [...recipe.packages].reverse() }, (l) => lines.push(l));
  assert.deepEqual(again, base, 'package order does not change the key');
  assert.deepEqual(lines, [], 'no build ran');
  assert.deepEqual(await store.meta(base.id), metaBefore);
  assert.equal((await stat(join(store.root, base.id, 'meta.json'))).mtimeMs, mtimeBefore);
  assert.ok((await store.list()).includes(base.id));
});

test('a build that fails leaves no layer, no tmp dir and no lock', async () => {
  const store = new FsLayerStore(join(scratch, 'fail'));
  const recipe = { kind: 'debian-rootfs' as const, suite: 'bookworm', variant: 'minbase' as const, packages: ['no-such-package-sandboxd-xyz'] };
  const lines: string[] = [];
  await assert.rejects(store.ensureRootfs(recipe, (l) => lines.push(l)), /mmdebstrap failed/);
  assert.ok(lines.some((l) => l.includes('mmdebstrap')), 'progress was streamed');
  assert.equal(await store.has(rootfsKey(recipe)), false);
  assert.deepEqual(await readdir(store.root), []);
});

test('concurrent callers share one build; leftovers of a dead builder are removed', async () => {
  const store = new FsLayerStore(join(scratch, 'share'));
  const id = fakeId(1);
  await mkdir(store.root, { recursive: true });
  const dead = spawnSync('true').pid!;
  await mkdir(join(store.root, `.tmp-${id}-${dead}-abcd/tree/half`), { recursive: true });
  await writeFile(join(store.root, `.lock-${id}`), String(dead));
  let builds = 0;
  const build = async (tree: string) => {
    builds++;
    await new Promise((r) => setTimeout(r, 50));
    await writeFile(join(tree, 'hello'), 'hi');
    return { kind: 'test', sizeBytes: 2, entries: 2 };
  };
  const [a, b] = await Promise.all([store.ensureLayer(id, build, () => {}), store.ensureLayer(id, build, () => {})]);
  assert.equal(builds, 1);
  assert.deepEqual(a, b);
  assert.equal((await stat(join(a.path, 'hello'))).size, 2);
  assert.deepEqual((await readdir(store.root)).sort(), [id]);
  assert.equal((await store.meta(id))?.kind, 'test');

  await store.ensureLayer(id, build, () => {});
  assert.equal(builds, 1, 'cached');
  await store.remove(id);
  assert.equal(await store.has(id), false);
  assert.deepEqual(await store.list(), []);
  assert.deepEqual(await readdir(store.root), []);
});

test('a build that throws after writing files leaves nothing behind', async () => {
  const store = new FsLayerStore(join(scratch, 'throw'));
  const id = fakeId(2);
  await assert.rejects(
    store.ensureLayer(id, async (tree) => {
      await writeFile(join(tree, 'partial'), 'x');
      throw new Error('boom');
    }, () => {}),
    /boom/,
  );
  assert.equal(await store.has(id), false);
  assert.deepEqual(await readdir(store.root), []);
});

test("a directory shared with other hosts: another host's lock is kept while renewed and taken once stale; its temporary directories are left until old", async () => {
  const store = new FsLayerStore(join(scratch, 'shared-hosts'));
  await mkdir(store.root, { recursive: true });
  const fresh = fakeId(7);
  const stale = fakeId(8);
  // Pid 1 is alive here, but on another host it means nothing: only the lock's age counts.
  await writeFile(join(store.root, `.lock-${fresh}`), '999999@another-host');
  await writeFile(join(store.root, `.lock-${stale}`), '1@another-host');
  const old = new Date(Date.now() - 10 * 60_000);
  await utimes(join(store.root, `.lock-${stale}`), old, old);
  const youngTmp = `.tmp-${fresh}-999999-h00000000-abcd`;
  const oldTmp = `.tmp-${stale}-999999-h00000000-abcd`;
  await mkdir(join(store.root, youngTmp, 'tree'), { recursive: true });
  await mkdir(join(store.root, oldTmp, 'tree'), { recursive: true });
  const ancient = new Date(Date.now() - 7 * 3600_000);
  await utimes(join(store.root, oldTmp), ancient, ancient);
  await store.cleanupStale();
  const left = await readdir(store.root);
  assert.ok(left.includes(`.lock-${fresh}`), "a renewed lock of another host stays");
  assert.ok(!left.includes(`.lock-${stale}`), 'a stale one goes');
  assert.ok(left.includes(youngTmp), "another host's young temporary directory stays (its builder may be at work)");
  assert.ok(!left.includes(oldTmp), 'an old one goes');
  // A build of the held layer waits for the other host; of the one whose lock went stale, goes on.
  const build = async (tree: string) => {
    await writeFile(join(tree, 'x'), 'x');
    return { kind: 'test', sizeBytes: 1, entries: 1 };
  };
  const ac = new AbortController();
  const waiting = store.ensureLayer(fresh, build, () => {}, { signal: ac.signal });
  await new Promise((r) => setTimeout(r, 700));
  assert.equal(await store.has(fresh), false, 'still waiting for the other host');
  ac.abort();
  await assert.rejects(waiting);
  await writeFile(join(store.root, `.lock-${stale}`), '1@another-host');
  await utimes(join(store.root, `.lock-${stale}`), old, old);
  await store.ensureLayer(stale, build, () => {});
  assert.equal(await store.has(stale), true);
  assert.ok(!(await readdir(store.root)).includes(`.lock-${stale}`), 'our lock is released after the build');
});

