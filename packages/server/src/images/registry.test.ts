import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { ensureSystemPackages } from '../runtime/system-packages.js';
import { makeSyntheticImage, readXattr, sha256, type SyntheticImage } from '../testing/oci-fixtures.js';
import { pushBlob, pushManifest, startRegistry, type TestRegistry } from '../testing/registry-fixtures.js';
import { FsBlobStore } from './blob-store.js';
import { FsImageStore } from './image-store.js';
import { FsLayerStore } from './layer-store.js';
import { MEDIA } from './oci-image.js';
import { isWhiteout, ociLayerId } from './oci-layer.js';
import { RegistryClient, parseChallenge, pullImage } from './registry.js';

let scratch: string;
const registries: TestRegistry[] = [];

before(async () => {
  // The registry is Debian's docker-registry package (distribution 2.8).
  await ensureSystemPackages(() => {}, [{ bin: 'docker-registry', pkg: 'docker-registry' }]);
  scratch = await mkdtemp(join(tmpdir(), 'registry-test-'));
});

after(async () => {
  for (const r of registries) await r.stop();
  await rm(scratch, { recursive: true, force: true });
});

function stores(name: string) {
  return {
    layers: new FsLayerStore(join(scratch, name, 'layers')),
    images: new FsImageStore(join(scratch, name, 'images')),
    blobs: new FsBlobStore(join(scratch, name, 'blobs')),
  };
}

/** Pushes `img` for amd64 plus an arm64 variant, under an index tagged `tag`. */
async function pushMultiPlatform(reg: TestRegistry, repo: string, tag: string, img: SyntheticImage, docker: boolean, auth?: string) {
  const gz = img.layers.map((l) => gzipSync(l));
  const layerDescs = [];
  for (const g of gz) layerDescs.push({ mediaType: docker ? 'application/vnd.docker.image.rootfs.diff.tar.gzip' : 'application/vnd.oci.image.layer.v1.tar+gzip', ...(await pushBlob(reg, repo, g, auth)) });
  const manifests = [];
  for (const arch of ['arm64', 'amd64']) {
    const cfg = Buffer.from(JSON.stringify({ ...JSON.parse(img.config.toString()), architecture: arch }));
    const cfgDesc = await pushBlob(reg, repo, cfg, auth);
    const mt = docker ? MEDIA.dockerManifest : MEDIA.ociManifest;
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: mt,
        config: { mediaType: docker ? 'application/vnd.docker.container.image.v1+json' : 'application/vnd.oci.image.config.v1+json', ...cfgDesc },
        layers: layerDescs,
      }),
    );
    const digest = await pushManifest(reg, repo, `sha256:${sha256(manifest)}`, mt, manifest, auth);
    manifests.push({ mediaType: mt, digest, size: manifest.length, platform: { os: 'linux', architecture: arch } });
  }
  const it = docker ? MEDIA.dockerList : MEDIA.ociIndex;
  const index = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: it, manifests }));
  return pushManifest(reg, repo, tag, it, index, auth);
}

test('pull from a local registry (plain HTTP, OCI index): the host platform, layers in overlay form, shared on re-pull', async () => {
  const reg = await startRegistry(await mkdtemp(join(scratch, 'reg1-')));
  registries.push(reg);
  const img = makeSyntheticImage(join(scratch, 'img1'));
  const indexDigest = await pushMultiPlatform(reg, 'library/alpine', '3.18', img, false);
  const s = stores('s1');
  const lines: string[] = [];
  const client = new RegistryClient({ url: reg.url });
  const rec = await pullImage('alpine:3.18', { registry: client, ...s, log: (l) => lines.push(l) });
  assert.equal(rec.ref, 'alpine:3.18');
  assert.equal(rec.source, 'pull');
  assert.deepEqual(rec.layers, img.diffIds.map(ociLayerId));
  assert.equal(rec.workdir, '/srv');
  assert.match(rec.origin, new RegExp(`^${reg.url}/library/alpine@sha256:`));
  assert.deepEqual(await s.images.get('alpine:3.18'), JSON.parse(JSON.stringify(rec)));
  const top = s.layers.path(rec.layers[1]!);
  assert.ok(await isWhiteout(join(top, 'etc/gone')));
  assert.equal(readXattr(join(top, 'opq'), 'trusted.overlay.opaque'), 'y');
  // Compressed layers are dropped once unpacked; the config blob stays.
  assert.deepEqual(await s.blobs.list(), [rec.configDigest.slice(7)]);
  assert.equal(lines.filter((l) => l.startsWith('downloading')).length, 2);

  const again: string[] = [];
  const pinned = await pullImage(`alpine:3.18@${indexDigest}`, { registry: client, ...s, log: (l) => again.push(l) });
  assert.deepEqual(pinned.layers, rec.layers);
  assert.equal(again.filter((l) => l.includes('already present')).length, 2);
  assert.equal(again.filter((l) => l.startsWith('downloading')).length, 0);

  await assert.rejects(pullImage('alpine:3.17', { registry: client, ...s, log: () => {} }), /manifests\/3\.17: 404/);
  await assert.rejects(
    pullImage(`alpine:3.18@sha256:${'0'.repeat(64)}`, { registry: client, ...s, log: () => {} }),
    /404/,
  );
});

test('pull through Docker-style token auth (docker manifest list): anonymous refused, credentials accepted', async () => {
  const reg = await startRegistry(await mkdtemp(join(scratch, 'reg2-')), { token: true });
  registries.push(reg);
  const img = makeSyntheticImage(join(scratch, 'img2'), { env: ['NODE_VERSION=20'] });
  await pushMultiPlatform(reg, 'library/node', '20', img, true, await reg.pushAuth!('library/node'));
  const s = stores('s2');

  await assert.rejects(
    pullImage('node:20', { registry: new RegistryClient({ url: reg.url }), ...s, log: () => {} }),
    /token request to http:\/\/127\.0\.0\.1:\d+\/token failed: 401/,
  );
  const before = reg.tokenRequests.length;
  const rec = await pullImage('node:20', { registry: new RegistryClient({ url: reg.url, username: 'puller', password: 'secret' }), ...s, log: () => {} });
  assert.deepEqual(rec.env, ['NODE_VERSION=20']);
  assert.deepEqual(rec.layers, img.diffIds.map(ociLayerId));
  const asked = reg.tokenRequests.slice(before);
  assert.equal(asked.length, 1, 'one token per repository, reused for every request');
  assert.equal(asked[0]!.searchParams.get('scope'), 'repository:library/node:pull');
  assert.equal(asked[0]!.searchParams.get('service'), 'sandboxd-test-registry');
});

test('parseChallenge reads both auth schemes', () => {
  assert.deepEqual(parseChallenge('Bearer realm="https://auth.example/token",service="reg",scope="repository:library/x:pull"'), {
    scheme: 'bearer',
    params: { realm: 'https://auth.example/token', service: 'reg', scope: 'repository:library/x:pull' },
  });
  assert.deepEqual(parseChallenge('Basic realm="r"'), { scheme: 'basic', params: { realm: 'r' } });
  assert.equal(parseChallenge(''), undefined);
});
