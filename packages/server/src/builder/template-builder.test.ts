import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { BaseImageResolver } from '../images/base-images.js';
import { FsBlobStore } from '../images/blob-store.js';
import { FsImageStore } from '../images/image-store.js';
import type { FsLayerStore } from '../images/layer-store.js';
import { importImageArchive } from '../images/oci-archive.js';
import { RegistryClient } from '../images/registry.js';
import { type LayerInfo } from '../images/types.js';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import type { CopyInput } from './types.js';
import type { BuildStep } from './types.js';
import { layerStoreForTests, testDataDir } from '../testing/fixtures.js';
import { writeBusyboxImage } from '../testing/oci-fixtures.js';
import { stepRuntimeForTests } from '../testing/step-runtime.js';
import { BuildCache, orgRootKey, stepKey } from './cache.js';
import { TemplateBuilder, type BuildOutput } from './template-builder.js';

let scratch: string;
let layers: FsLayerStore;
let blobs: FsBlobStore;
let images: FsImageStore;
let teardown: (() => Promise<void>) | undefined;
let builder: TemplateBuilder;
let resolver: BaseImageResolver;
const mounts: string[] = [];
/** Layers the builds of this file made (base images excluded): removed at the end. */
const made = new Set<string>();

before(async () => {
  await mkdir(testDataDir(), { recursive: true });
  scratch = await mkdtemp(join(testDataDir(), 'builder-test-'));
  layers = await layerStoreForTests();
  blobs = new FsBlobStore(join(scratch, 'blobs'));
  images = new FsImageStore(join(scratch, 'images'));
  const rt = await stepRuntimeForTests('bld', 1);
  teardown = rt.teardown;
  resolver = new BaseImageResolver({ layers, images, blobs, registry: null, registryHint: 'SANDBOXD_REGISTRY_URL' });
  builder = new TemplateBuilder({ runtime: rt.runtime, layers, bases: resolver, cache: new BuildCache(join(scratch, 'cache')), inputsDir: join(scratch, 'inputs') });
});

after(async () => {
  for (const m of mounts.reverse()) execFileSync('umount', [m]);
  for (const id of made) await layers.remove(id);
  await teardown?.();
  await rm(scratch, { recursive: true, force: true });
});

const res = { cpu: 1, memoryMb: 1024, diskGb: 2 };

const ORG = 'org_builder_test';

async function build(
  steps: BuildStep[],
  opts: { skipCache?: boolean; copies?: Map<number, CopyInput[]>; lines?: string[]; orgId?: string } = {},
): Promise<BuildOutput> {
  const base = await resolver.resolve((steps[0] as { image: string }).image, () => {});
  const out = await builder.build(
    { orgId: opts.orgId ?? ORG, steps, ...res, skipCache: opts.skipCache ?? false, copies: opts.copies },
    { onLog: (l) => opts.lines?.push(l) },
  );
  for (const l of out.layers) if (!base.layers.some((b) => b.id === l.id)) made.add(l.id);
  return out;
}

/** A local port nothing listens on. */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

/** Mounts the layers read-only as overlayfs, as a sandbox would see them. */
async function mountLayers(ls: LayerInfo[]): Promise<string> {
  const dir = await mkdtemp(join(scratch, 'merged-'));
  execFileSync('mount', ['-t', 'overlay', 'overlay', '-o', `ro,lowerdir=${ls.map((l) => l.path).join(':')}`, dir]);
  mounts.push(dir);
  return dir;
}

async function unmount(dir: string): Promise<void> {
  execFileSync('umount', [dir]);
  mounts.splice(mounts.indexOf(dir), 1);
}

test('python:3.11: env, workdir, run and copy steps make layers; a rebuild is all cache hits; skipCache rebuilds', { timeout: 15 * 60_000 }, async () => {
  const file = Buffer.from('hello file\n');
  const fileBlob = await blobs.put((async function* () { yield file; })());
  const ctx = join(scratch, 'ctx');
  await mkdir(join(ctx, 'src/lib'), { recursive: true });
  await writeFile(join(ctx, 'src/main.py'), 'print("main")\n');
  await writeFile(join(ctx, 'src/lib/util.py'), 'X = 1\n');
  await writeFile(join(ctx, 'README.md'), '# readme\n');
  await writeFile(join(ctx, 'other.txt'), 'not copied\n');
  const tgz = execFileSync('tar', ['-c', '-z', '-f', '-', '-C', ctx, '.']);
  const tgzBlob = await blobs.put((async function* () { yield tgz; })());

  const steps: BuildStep[] = [
    { type: 'from', image: 'python:3.11' },
    { type: 'env', key: 'GREETING', value: 'hi there' },
    { type: 'workdir', path: '/app' },
    {
      type: 'run',
      command: 'echo "$GREETING" > greeting.txt && python3 -c "import sys; print(sys.version)" > pyver.txt && /usr/local/bin/pip3 --version > pipver.txt && test ! -e /usr/lib/python3.11/EXTERNALLY-MANAGED',
    },
    { type: 'copy', dest: '/app/data/', fileIds: ['f_1'], srcPaths: [], filesHash: null, owner: null, permissions: null },
    { type: 'copy', dest: '/app/', fileIds: [], srcPaths: ['src', 'README.md'], filesHash: 'abc123', owner: '1000:1000', permissions: null },
  ];
  const copies = new Map<number, CopyInput[]>([
    [4, [{ hostPath: blobs.path(fileBlob.sha256), kind: 'file', name: 'input.txt', sha256: fileBlob.sha256 }]],
    [5, [{ hostPath: blobs.path(tgzBlob.sha256), kind: 'tarball', name: 'ctx', sha256: tgzBlob.sha256 }]],
  ]);
  const lines: string[] = [];
  const first = await build(steps, { copies, lines });
  assert.equal(first.built, 3);
  assert.equal(first.cached, 0);
  assert.deepEqual(first.env, { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8', GREETING: 'hi there' });
  assert.equal(first.workdir, '/app');
  assert.ok(lines.some((l) => l.startsWith('[4/6] RUN ')), 'numbered step lines');

  const m = await mountLayers(first.layers);
  try {
    assert.equal(await readFile(join(m, 'app/greeting.txt'), 'utf8'), 'hi there\n');
    assert.match(await readFile(join(m, 'app/pyver.txt'), 'utf8'), /^3\.11\.2 /);
    assert.match(await readFile(join(m, 'app/pipver.txt'), 'utf8'), /^pip 23\./);
    assert.equal(await readFile(join(m, 'app/data/input.txt'), 'utf8'), 'hello file\n');
    const input = await lstat(join(m, 'app/data/input.txt'));
    assert.equal(input.uid, CANONICAL_ID_OFFSET);
    assert.equal(input.mode & 0o777, 0o644);
    // Docker's rule: a directory's contents go into dest.
    assert.equal(await readFile(join(m, 'app/main.py'), 'utf8'), 'print("main")\n');
    assert.equal(await readFile(join(m, 'app/lib/util.py'), 'utf8'), 'X = 1\n');
    assert.equal((await lstat(join(m, 'app/lib/util.py'))).uid, CANONICAL_ID_OFFSET + 1000, 'owner 1000 → canonical + 1000');
    assert.equal((await lstat(join(m, 'app/README.md'))).gid, CANONICAL_ID_OFFSET + 1000);
    await assert.rejects(lstat(join(m, 'app/other.txt')), { code: 'ENOENT' });
    await assert.rejects(lstat(join(m, 'app/src')), { code: 'ENOENT' });
    // The COPY bind targets and the tarball scratch are not in any layer.
    for (const l of first.layers.slice(0, 3)) await assert.rejects(lstat(join(l.path, '.sb/in')), { code: 'ENOENT' });
    assert.deepEqual((await readdir(join(m, 'tmp'))).filter((n) => n.startsWith('.sb')), []);
  } finally {
    await unmount(m);
  }

  const again: string[] = [];
  const second = await build(steps, { copies, lines: again });
  assert.equal(second.built, 0);
  assert.equal(second.cached, 3);
  assert.deepEqual(second.layers, first.layers);
  assert.equal(again.filter((l) => l.endsWith('(cached)')).length, 3);

  // A changed file changes the key of its step and of every later step.
  const other = await blobs.put((async function* () { yield Buffer.from('other content\n'); })());
  const changed = new Map(copies);
  changed.set(4, [{ hostPath: blobs.path(other.sha256), kind: 'file', name: 'input.txt', sha256: other.sha256 }]);
  const third = await build(steps, { copies: changed });
  assert.equal(third.cached, 1, 'the run step before the changed copy is reused');
  assert.equal(third.built, 2);
  assert.equal(third.layers[2]!.id, first.layers[2]!.id);
  assert.notEqual(third.layers[1]!.id, first.layers[1]!.id);

  const fresh = await build(steps, { copies, skipCache: true });
  assert.equal(fresh.built, 3);
  assert.equal(fresh.key, first.key, 'same steps, same key');
  for (let i = 0; i < 3; i++) assert.notEqual(fresh.layers[i]!.id, first.layers[i]!.id, 'skipCache never reuses a layer');
  assert.deepEqual(fresh.layers.slice(3), first.layers.slice(3), 'base layers are shared');
  const after = await build(steps, { copies });
  assert.deepEqual(after.layers, fresh.layers, 'the cache now points at the rebuilt layers');
});

test('the cache is per organization: no "(cached)" across organizations, and skipCache repoints only its own entries', { timeout: 10 * 60_000 }, async () => {
  const steps: BuildStep[] = [
    { type: 'from', image: 'debian:11' },
    { type: 'run', command: 'echo tenant-secret-step > /step.txt' },
  ];
  const aLines: string[] = [];
  const a = await build(steps, { orgId: 'org_a', lines: aLines });
  assert.equal(a.built, 1);
  const bLines: string[] = [];
  const b = await build(steps, { orgId: 'org_b', lines: bLines });
  assert.equal(b.built, 1, "org B runs the step itself, A's result is not offered to it");
  assert.equal(b.cached, 0);
  assert.ok(!bLines.some((l) => l.includes('(cached)')), bLines.join('\n'));
  assert.notEqual(b.layers[0]!.id, a.layers[0]!.id, 'step layers are per organization');
  assert.notEqual(b.key, a.key);
  assert.deepEqual(b.layers.slice(1), a.layers.slice(1), 'base image layers stay shared');

  // B's skipCache rebuild repoints B's entry only: A's next build gets A's own layer.
  const bFresh = await build(steps, { orgId: 'org_b', skipCache: true });
  assert.notEqual(bFresh.layers[0]!.id, b.layers[0]!.id);
  const aAgain = await build(steps, { orgId: 'org_a' });
  assert.equal(aAgain.cached, 1);
  assert.equal(aAgain.layers[0]!.id, a.layers[0]!.id, "A's cache entry is untouched by B's rebuild");
  const bAgain = await build(steps, { orgId: 'org_b' });
  assert.equal(bAgain.layers[0]!.id, bFresh.layers[0]!.id, "B's entry points at B's rebuild");
  assert.throws(() => orgRootKey('k', ''), /organization/);
});

test('a failing step fails the build with its exit status and leaves no layer', { timeout: 5 * 60_000 }, async () => {
  const steps: BuildStep[] = [
    { type: 'from', image: 'python:3.11' },
    { type: 'run', command: 'echo about to fail; echo partial > /partial.txt; exit 3' },
  ];
  const lines: string[] = [];
  await assert.rejects(build(steps, { lines }), /\[2\/2\] RUN .* failed: exit status 3/);
  assert.ok(lines.includes('  about to fail'), 'step output streamed to the log');
  const base = await resolver.resolve('python:3.11', () => {});
  const key = stepKey(orgRootKey(base.key, ORG), steps[1]!);
  assert.equal(await layers.has(key), false);
  assert.deepEqual((await readdir(layers.root)).filter((n) => n.includes(key)), [], 'no tmp dir or lock left');
});

test('debian:11 comes from Debian packages (bullseye)', { timeout: 10 * 60_000 }, async () => {
  const out = await build([
    { type: 'from', image: 'debian:11' },
    { type: 'run', command: 'grep "^11\\." /etc/debian_version > /version.txt' },
  ]);
  const m = await mountLayers(out.layers);
  try {
    assert.match(await readFile(join(m, 'version.txt'), 'utf8'), /^11\.\d+/);
  } finally {
    await unmount(m);
  }
});

test('an imported image is used as the base as it is; apt fails clearly where there is no apt', { timeout: 5 * 60_000 }, async () => {
  const archive = join(scratch, 'busybox.tar');
  // A private image store: the name is only a handle for this test.
  writeBusyboxImage(join(scratch, 'bb'), 'alpine:3.18', archive);
  const rec = await importImageArchive(archive, undefined, { layers, images, tmpDir: join(scratch, 'tmp'), log: () => {} });
  for (const id of rec.layers) made.add(id);
  const lines: string[] = [];
  const out = await build(
    [
      { type: 'from', image: 'alpine:3.18' },
      { type: 'workdir', path: '/work/dir' },
      { type: 'run', command: 'echo "$IMAGE_MARK" > mark.txt; id -u > uid.txt' },
    ],
    { lines },
  );
  assert.ok(lines.some((l) => l.includes('base alpine:3.18: import')));
  assert.equal(out.env.IMAGE_MARK, 'busybox', 'image config env kept');
  const m = await mountLayers(out.layers);
  try {
    assert.equal(await readFile(join(m, 'work/dir/mark.txt'), 'utf8'), 'busybox\n');
    assert.equal(await readFile(join(m, 'work/dir/uid.txt'), 'utf8'), '0\n');
    assert.ok((await lstat(join(m, '.sb'))).isDirectory(), 'sandbox mount points added');
  } finally {
    await unmount(m);
  }
  const aptLines: string[] = [];
  await assert.rejects(
    build([{ type: 'from', image: 'alpine:3.18' }, { type: 'apt', packages: ['curl'] }], { lines: aptLines }),
    /APT curl failed: exit status 127/,
  );
  assert.ok(aptLines.some((l) => l.includes('neither apt-get nor apk')));
});

test('onBeforeStep comes before each step that runs, not a cached one; refused, the step writes nothing and the build fails', { timeout: 5 * 60_000 }, async () => {
  const archive = join(scratch, 'busybox-room.tar');
  writeBusyboxImage(join(scratch, 'bb-room'), 'alpine:3.17', archive);
  const rec = await importImageArchive(archive, undefined, { layers, images, tmpDir: join(scratch, 'tmp-room'), log: () => {} });
  for (const id of rec.layers) made.add(id);
  // Fresh commands: no layer of an earlier run is taken for them.
  const nonce = String(Date.now());
  const steps: BuildStep[] = [
    { type: 'from', image: 'alpine:3.17' },
    { type: 'run', command: `echo one ${nonce} > /one` },
    { type: 'env', key: 'X', value: '1' },
    { type: 'run', command: `echo two ${nonce} > /two` },
  ];
  const run = async (before: () => Promise<void>) => {
    const out = await builder.build({ orgId: ORG, steps, ...res, skipCache: false, copies: undefined }, { onBeforeStep: before });
    for (const l of out.layers) if (!rec.layers.includes(l.id)) made.add(l.id);
    return out;
  };
  // Refused at the second step that runs: the first's layer stays (cached), the second makes none.
  let calls = 0;
  const layersBefore = new Set(await layers.list());
  await assert.rejects(
    run(async () => {
      if (++calls === 2) throw new Error('no room for a build step');
    }),
    /no room for a build step/,
  );
  const madeNow = (await layers.list()).filter((id) => !layersBefore.has(id));
  for (const id of madeNow) made.add(id);
  assert.equal(calls, 2);
  assert.equal(madeNow.length, 1, 'only the first step wrote a layer');
  // Again: the first step is cached (no call for it), the second runs (one call).
  calls = 0;
  await run(async () => {
    calls++;
  });
  assert.equal(calls, 1, 'a cached step needs no room');
});

test('base images nothing here can provide fail at once, saying how to provide them', async () => {
  await assert.rejects(
    build([{ type: 'from', image: 'ubuntu:22.04' }, { type: 'run', command: 'true' }]),
    (err: Error) =>
      /base image ubuntu:22.04 is not available/.test(err.message) &&
      /not a Debian image/.test(err.message) &&
      /no image registry is configured/.test(err.message) &&
      /sandboxd images import ubuntu:22.04 FILE/.test(err.message) &&
      /SANDBOXD_REGISTRY_URL/.test(err.message),
  );
  // A registry that cannot be reached is reported, not waited on.
  const port = await closedPort();
  const unreachable = new BaseImageResolver({ layers, images, blobs, registry: new RegistryClient({ url: `http://127.0.0.1:${port}`, timeoutMs: 5000 }) });
  await assert.rejects(unreachable.resolve('node:20', () => {}), new RegExp(`the registry could not provide it \\(cannot reach http://127\\.0\\.0\\.1:${port}: ECONNREFUSED\\)`));
  await assert.rejects(resolver.resolve('debian:10', () => {}), /Debian suite buster is no longer on this host's Debian mirror/);
  await assert.rejects(resolver.resolve('fedora:39', () => {}), /not allowed/);
});
