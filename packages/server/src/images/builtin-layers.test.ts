import assert from 'node:assert/strict';
import { test } from 'node:test';
import { aptProgress, rootfsProgress } from './builtin-build.js';
import { aptLayerKey, builtinLayerIds, builtinStackIds } from './builtin-layers.js';
import { BASE_RECIPE, BUILTIN_TEMPLATES, withParents } from './builtin.js';
import { rootfsKey } from './layer-store.js';

const P = 'a'.repeat(64);

test('an upper layer is keyed by its parent layer, its packages (as a set) and the builder version', () => {
  const k = aptLayerKey(P, ['python3', 'python3-pip']);
  assert.match(k, /^[0-9a-f]{64}$/);
  assert.equal(aptLayerKey(P, ['python3-pip', 'python3', 'python3']), k);
  assert.notEqual(aptLayerKey('b'.repeat(64), ['python3', 'python3-pip']), k);
  assert.notEqual(aptLayerKey(P, ['python3']), k);
  assert.throws(() => aptLayerKey('not-a-layer', ['x']), /invalid parent layer id/);
});

test('the built-ins are one stack: base is its rootfs recipe, the others layers over their parent', () => {
  const ids = builtinLayerIds(BUILTIN_TEMPLATES);
  // base keeps the id of the rootfs it always was: a machine's existing base layer stays valid.
  assert.equal(ids.get('base'), rootfsKey(BASE_RECIPE));
  const pkgs = (n: string) => BUILTIN_TEMPLATES.find((t) => t.name === n)!.recipe.packages;
  assert.equal(ids.get('python'), aptLayerKey(ids.get('base')!, pkgs('python')));
  assert.equal(ids.get('nodejs'), aptLayerKey(ids.get('base')!, pkgs('nodejs')));
  assert.equal(ids.get('go'), aptLayerKey(ids.get('base')!, pkgs('go')));
  assert.equal(ids.get('code-interpreter'), aptLayerKey(ids.get('python')!, pkgs('code-interpreter')));
  assert.equal(ids.get('desktop'), aptLayerKey(ids.get('python')!, pkgs('desktop')));
  assert.equal(new Set(ids.values()).size, 6);
  assert.deepEqual(builtinStackIds(BUILTIN_TEMPLATES, 'code-interpreter'), [ids.get('code-interpreter'), ids.get('python'), ids.get('base')]);
  assert.deepEqual(builtinStackIds(BUILTIN_TEMPLATES, 'base'), [ids.get('base')]);
  // A change below changes every key above it.
  const other = BUILTIN_TEMPLATES.map((t) => (t.name === 'base' ? { ...t, recipe: { ...t.recipe, packages: [...t.recipe.packages, 'less'] } } : t));
  const moved = builtinLayerIds(other);
  for (const n of ['base', 'python', 'code-interpreter', 'nodejs', 'go', 'desktop']) assert.notEqual(moved.get(n), ids.get(n), n);
});

test('a wish for some built-ins brings the parents they need, parents first', () => {
  const pick = (...n: string[]) => BUILTIN_TEMPLATES.filter((t) => n.includes(t.name));
  assert.deepEqual(withParents(pick('code-interpreter')).map((t) => t.name), ['base', 'python', 'code-interpreter']);
  assert.deepEqual(withParents(pick('go', 'base')).map((t) => t.name), ['base', 'go']);
  assert.throws(() => builtinLayerIds(pick('go')), /go needs base/);
});

test('progress is read from mmdebstrap phases and apt-get output', () => {
  assert.equal(rootfsProgress('  I: extracting archives...'), 0.35);
  assert.equal(rootfsProgress('  some other line'), undefined);
  const m = { n: 0, got: 0, unpacked: 0, setup: 0 };
  assert.equal(aptProgress('  Get:1 http://deb/ bookworm InRelease [151 kB]', m), undefined, 'apt-get update, before the install says how many');
  assert.equal(aptProgress('  0 upgraded, 4 newly installed, 0 to remove and 0 not upgraded.', m), 0.05);
  let last = 0.05;
  for (const l of ['Get:1 x', 'Get:2 x', 'Get:3 x', 'Get:4 x', 'Unpacking a', 'Unpacking b', 'Setting up a', 'Setting up b', 'Setting up c', 'Setting up d']) {
    const f = aptProgress(`  ${l}`, m)!;
    assert.ok(f > last, l);
    last = f;
  }
  assert.ok(last < 1 && last > 0.8);
});
