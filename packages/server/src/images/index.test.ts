import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { makeSyntheticImage, writeDockerSave } from '../testing/oci-fixtures.js';
import { openImageServices } from './index.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'image-services-test-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

test('openImageServices wires the stores under the data dir; import works, pull needs a registry', async () => {
  const svc = openImageServices({ dataDir: join(dir, 'data'), layersDir: join(dir, 'layers') });
  const img = makeSyntheticImage(join(dir, 'img'));
  const file = join(dir, 'img.tar');
  writeDockerSave(img, join(dir, 'save'), 'python:3.10', file);
  const rec = await svc.importArchive(file, undefined);
  assert.equal(rec.ref, 'python:3.10');
  assert.equal((await svc.images.get('python:3.10'))?.configDigest, img.configDigest);
  assert.equal((await svc.layers.list()).length, 2);
  assert.equal(svc.registry, null);
  assert.throws(() => svc.pull('node:18'), /no image registry is configured/);
  await svc.cleanupStale();
});
