import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { BUILTIN_CLAIMS, checkClaims, checkStackClaims, existsInTree } from './bootstrap.js';
import { ensureBuiltinTemplates } from './builtin-build.js';
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

test('claims are read through the stack as a sandbox sees it: an upper layer whiteout hides a lower file', async () => {
  const lower = join(scratch, 'stack-lower');
  const upper = join(scratch, 'stack-upper');
  await mkdir(join(lower, 'usr/bin'), { recursive: true });
  await writeFile(join(lower, 'usr/bin/tool'), '');
  await writeFile(join(lower, 'usr/bin/gone'), '');
  await mkdir(join(upper, 'usr/bin'), { recursive: true });
  await writeFile(join(upper, 'usr/bin/added'), '');
  execFileSync('mknod', [join(upper, 'usr/bin/gone'), 'c', '0', '0']);
  const stack = [
    { id: 'a'.repeat(64), path: upper },
    { id: 'b'.repeat(64), path: lower },
  ];
  const problems = await checkStackClaims(stack, scratch, { files: ['usr/bin/tool', 'usr/bin/added', 'usr/bin/gone'], packages: {} });
  assert.deepEqual(problems, ['missing /usr/bin/gone']);
  // Nothing is left mounted or behind in the scratch dir.
  assert.ok(!readFileSync('/proc/self/mountinfo', 'utf8').includes(scratch));
  assert.deepEqual((await readdir(scratch)).filter((n) => n.startsWith('.tmp-')), []);
});

test('every built-in template is cached after warm-up as a stack over base, and has what its description claims', { timeout: 20 * 60_000 }, async () => {
  const store = await layerStoreForTests();
  const lines: string[] = [];
  // No runtime: nothing above base may need building once the suite's warm-up ran.
  const stacks = await ensureBuiltinTemplates(store, BUILTIN_TEMPLATES, (l) => lines.push(l));
  assert.deepEqual([...stacks.keys()].sort(), BUILTIN_TEMPLATES.map((t) => t.name).sort());
  const depth = Object.fromEntries([...stacks].map(([n, s]) => [n, s.length]));
  assert.deepEqual(depth, { base: 1, python: 2, nodejs: 2, go: 2, 'code-interpreter': 3, desktop: 3 });
  const base = stacks.get('base')![0]!.id;
  for (const [name, stack] of stacks) {
    assert.equal(stack.at(-1)!.id, base, `${name} is over base`);
    assert.ok(BUILTIN_CLAIMS[name], `claims defined for ${name}`);
    assert.deepEqual(await checkStackClaims(stack, store.root, BUILTIN_CLAIMS[name]), [], name);
  }
  assert.deepEqual(stacks.get('code-interpreter')!.slice(1).map((l) => l.id), stacks.get('python')!.map((l) => l.id));
  assert.deepEqual(stacks.get('desktop')!.slice(1).map((l) => l.id), stacks.get('python')!.map((l) => l.id));
  assert.ok(!lines.some((l) => l.includes('building') || l.includes('mmdebstrap')), lines.join('\n'));
  assert.match(lines.at(-1)!, /6 of 6 ready/);
});
