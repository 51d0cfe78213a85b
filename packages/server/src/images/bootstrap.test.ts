import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { BUILTIN_CLAIMS, checkClaims, ensureBuiltinTemplates, existsInTree } from './bootstrap.js';
import { BUILTIN_TEMPLATES } from './builtin.js';
import { layerStoreForTests } from '../testing/fixtures.js';

let scratch: string;
before(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'bootstrap-test-'));
});
after(async () => {
  await rm(scratch, { recursive: true, force: true });
});

test('existsInTree resolves absolute symlinks inside the tree, never on the host', async () => {
  const t = join(scratch, 'tree');
  await mkdir(join(t, 'usr/lib/go/bin'), { recursive: true });
  await mkdir(join(t, 'usr/bin'), { recursive: true });
  await writeFile(join(t, 'usr/lib/go/bin/go'), '');
  await symlink('../lib/go/bin/go', join(t, 'usr/bin/go'));
  await symlink('/usr/lib/go/bin/go', join(t, 'usr/bin/go-abs'));
  await symlink('/etc/os-release', join(t, 'usr/bin/host-file')); // exists on the host, not in the tree
  await symlink('loop', join(t, 'usr/bin/loop'));
  assert.equal(await existsInTree(t, 'usr/bin/go'), true);
  assert.equal(await existsInTree(t, '/usr/bin/go-abs'), true);
  assert.equal(await existsInTree(t, 'usr/bin/host-file'), false);
  assert.equal(await existsInTree(t, 'usr/bin/loop'), false);
  assert.equal(await existsInTree(t, 'usr/bin/../../../../etc/os-release'), false);
});

test('checkClaims reports missing files and wrong versions from dpkg status', async () => {
  const t = join(scratch, 'claims');
  await mkdir(join(t, 'var/lib/dpkg'), { recursive: true });
  await writeFile(
    join(t, 'var/lib/dpkg/status'),
    'Package: nodejs\nStatus: install ok installed\nVersion: 20.1.0\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1.0\n',
  );
  const problems = await checkClaims(t, { files: ['usr/bin/node'], packages: { nodejs: /^18\./, gone: /./ } });
  assert.deepEqual(problems, ['missing /usr/bin/node', 'package nodejs is 20.1.0, expected /^18\\./', 'package gone not installed']);
});

test('every built-in template builds (or is cached) and has what its description claims', { timeout: 20 * 60_000 }, async () => {
  const store = await layerStoreForTests();
  const lines: string[] = [];
  const layers = await ensureBuiltinTemplates(store, BUILTIN_TEMPLATES, (l) => lines.push(l));
  assert.deepEqual([...layers.keys()].sort(), BUILTIN_TEMPLATES.map((t) => t.name).sort());
  assert.match(lines[0]!, /^\[1\/5\] (building base|base cached)/);
  for (const t of BUILTIN_TEMPLATES) {
    assert.ok(BUILTIN_CLAIMS[t.name], `claims defined for ${t.name}`);
    assert.deepEqual(await checkClaims(layers.get(t.name)!.path, BUILTIN_CLAIMS[t.name]), []);
  }
  // A second pass is all cache hits.
  const again: string[] = [];
  await ensureBuiltinTemplates(store, BUILTIN_TEMPLATES, (l) => again.push(l));
  assert.equal(again.filter((l) => / cached \(layer /.test(l)).length, 5);
  assert.ok(!again.some((l) => l.includes('mmdebstrap')));
});
