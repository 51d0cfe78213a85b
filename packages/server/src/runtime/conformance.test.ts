// Root test with real containers: the runtime conformance suite against CrunRuntime.
import { runtimeConformance } from './conformance.js';
import { baseLayer } from '../testing/fixtures.js';
import { assertNoLeaks, createTestRuntime, testSpec } from '../testing/runtime-fixtures.js';

runtimeConformance('CrunRuntime', async () => {
  const lower = (await baseLayer()).path;
  const failing = new Set<string>();
  const t = await createTestRuntime({
    // The last step of a create with a network: the container already runs when it fails.
    stepHook: (id, step) => {
      if (failing.has(id) && step === 'network-finish') throw new Error(`injected failure at ${step}`);
    },
  });
  const run = async (id: string, argv: string[], input?: string) => t.rt.exec(id, argv, input === undefined ? {} : { input });
  return {
    runtime: t.rt,
    spec: (id, over) => testSpec(id, [lower], over),
    failCreate: (id) => void failing.add(id),
    healCreate: (id) => void failing.delete(id),
    writeFile: async (id, path, content) => {
      const r = await run(id, ['/bin/sh', '-c', 'mkdir -p "$(dirname "$1")" && cat > "$1"', 'sh', path], content);
      if (r.code !== 0) throw new Error(`writing ${path} in ${id}: ${r.stderr}`);
    },
    readFile: async (id, path) => {
      const r = await run(id, ['/bin/cat', '--', path]);
      return r.code === 0 ? r.stdout : undefined;
    },
    oomKill: async (id) => {
      await t.rt.oomWatchReady();
      // dd touches a 400 MiB buffer: more than the sandbox's 128 MB, and it cannot swap.
      const r = await run(id, ['/bin/sh', '-c', 'dd if=/dev/zero of=/dev/null bs=400M count=1']);
      if (r.code === 0) throw new Error(`dd was not killed in ${id}`);
    },
    assertClean: () => assertNoLeaks(t.rt),
    teardown: () => t.teardown(),
  };
});
