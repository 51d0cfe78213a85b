// Root test with real containers and the real agent: the node conformance suite against LocalNode
// over CrunRuntime, the all-in-one daemon's node and what `sandboxd node` serves.
import { nodeConformance } from './conformance.js';
import { LocalNode } from './local-node.js';
import { baseLayer } from '../testing/fixtures.js';
import { CONFORMANCE_POOL } from '../testing/node-harness.js';
import { assertNoLeaks, createTestRuntime, crunHands, testSpec } from '../testing/runtime-fixtures.js';

nodeConformance('LocalNode over CrunRuntime', async () => {
  const lower = (await baseLayer()).path;
  let failing = false;
  const t = await createTestRuntime({
    // The real agent: a take sets its env set (PUT /env), which the suite reads back.
    agentBundlePath: new URL('../../../agent/bundle/agent.cjs', import.meta.url).pathname,
    // The last step of a boot with a network: the container already runs when it fails.
    stepHook: (_id, step) => {
      if (failing && step === 'network-finish') throw new Error(`injected failure at ${step}`);
    },
  });
  const node = new LocalNode({ id: 'node-crun', runtime: t.rt, pool: CONFORMANCE_POOL, agentReadyTimeoutMs: 10_000, log: () => undefined });
  const hands = crunHands(t.rt);
  return {
    node,
    spec: (over) => ({ ...testSpec('', [lower], { layerIds: ['base'] }), hostname: '', env: {}, ...over }),
    failBoots: (fail) => void (failing = fail),
    ...hands,
    egressOf: async (id) => t.rt.egressOf(id),
    finish: async () => {
      try {
        await node.close();
        for (const id of await t.rt.list()) await t.rt.destroy(id);
        await assertNoLeaks(t.rt);
      } finally {
        await t.teardown();
      }
    },
  };
});
