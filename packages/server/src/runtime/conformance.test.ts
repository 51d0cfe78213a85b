// Root test with real containers: the runtime conformance suite against CrunRuntime.
import { runtimeConformance } from './conformance.js';
import { baseLayer } from '../testing/fixtures.js';
import { assertNoLeaks, createTestRuntime, crunHands, testSpec } from '../testing/runtime-fixtures.js';

runtimeConformance('CrunRuntime', async () => {
  const lower = (await baseLayer()).path;
  const failing = new Set<string>();
  const t = await createTestRuntime({
    // The last step of a create with a network: the container already runs when it fails.
    stepHook: (id, step) => {
      if (failing.has(id) && step === 'network-finish') throw new Error(`injected failure at ${step}`);
    },
  });
  return {
    runtime: t.rt,
    spec: (id, over) => testSpec(id, [lower], over),
    failCreate: (id) => void failing.add(id),
    healCreate: (id) => void failing.delete(id),
    ...crunHands(t.rt),
    assertClean: () => assertNoLeaks(t.rt),
    teardown: () => t.teardown(),
  };
});
