import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runtimeConformance } from '../runtime/conformance.js';
import { FakeRuntime } from './fake-runtime.js';

// The same suite CrunRuntime passes, against the fake: what the services' fast tests rely on.
runtimeConformance('FakeRuntime', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-fake-'));
  const layer = join(dir, 'layer');
  await mkdir(layer);
  const rt = new FakeRuntime({ socketDir: join(dir, 's') });
  await rt.setupHost();
  const heals = new Map<string, () => void>();
  return {
    runtime: rt,
    spec: (id, over) => ({ id, lowerDirs: [layer], resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 256 }, internetAccess: false, hostname: id, env: { SANDBOX_ID: id }, ...over }),
    failCreate: (id) => void heals.set(id, rt.failOn('create', new Error('injected failure'), (x) => x === id)),
    healCreate: (id) => heals.get(id)?.(),
    writeFile: async (id, path, content) => rt.writeFile(id, path, content),
    readFile: async (id, path) => rt.readFile(id, path),
    oomKill: async (id) => rt.triggerOom(id),
    assertClean: async () => {
      assert.deepEqual(await rt.list(), []);
      assert.deepEqual(await readdir(join(dir, 's')), [], 'no socket left');
    },
    teardown: async () => {
      await rt.dispose();
      await rm(dir, { recursive: true, force: true });
    },
  };
});
