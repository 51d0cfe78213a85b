import { CrunRuntime } from '../runtime/index.js';
import { testDataDir } from './fixtures.js';
import { aptSourceCidrs } from './runtime-fixtures.js';

/**
 * A CrunRuntime of its own (bridge, subnet, cgroup parent, data dir) for tests that run build
 * steps, so that they never touch the runtime tests' or a running service's host setup.
 * `name`: 1-9 lowercase letters/digits; `octet`: the third octet of its 10.95.x.0/24 subnet.
 */
export async function stepRuntimeForTests(name: string, octet: number): Promise<{ runtime: CrunRuntime; teardown: () => Promise<void> }> {
  const runtime = new CrunRuntime({
    dataDir: `${testDataDir()}/rt-${name}`,
    agentBundlePath: new URL('../../../agent/bundle/agent.cjs', import.meta.url).pathname,
    bridgeName: `sbt${name}`,
    subnetCidr: `10.95.${octet}.0/24`,
    cgroupParent: `sandboxd-test-${name}`,
    egressAllow: await aptSourceCidrs(),
    log: process.env.SANDBOXD_TEST_VERBOSE ? (l) => process.stderr.write(`[rt] ${l}\n`) : undefined,
  });
  await runtime.setupHost();
  return { runtime, teardown: () => runtime.teardownHost() };
}
