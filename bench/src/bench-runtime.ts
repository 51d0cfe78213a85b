// A CrunRuntime of a benchmark's own (data dir, bridge, /24, cgroup parent), straight on the host,
// with each boot step's time collected; removed with everything on it afterwards.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { TEST_DATA_DIR } from '../../e2e/dist/harness.js';
import { loadConfig } from '../../packages/server/dist/config/index.js';
import { CrunRuntime } from '../../packages/server/dist/runtime/index.js';

export interface BenchRuntime {
  rt: CrunRuntime;
  /** Milliseconds of each boot step (onTiming), cleared by the caller when it wants. */
  steps: Map<string, number[]>;
  cgroupParent: string;
}

/**
 * Runs `fn` with a runtime named after `tag` (short: it names a bridge) on subnet `10.<second>.<third>.0/24`;
 * `agentBundlePath` defaults to the real agent (SANDBOXD_AGENT_BUNDLE when set, as for the daemon).
 */
export async function withBenchRuntime<T>(tag: string, subnet: string, fn: (b: BenchRuntime) => Promise<T>, agentBundlePath?: string): Promise<T> {
  const dataDir = join(TEST_DATA_DIR, `bench-${tag}`);
  const cgroupParent = `sandboxd-bench-${tag}`;
  const steps = new Map<string, number[]>();
  const rt = new CrunRuntime({
    dataDir,
    agentBundlePath: agentBundlePath ?? loadConfig({ SANDBOXD_DATA_DIR: dataDir, SANDBOXD_AGENT_BUNDLE: process.env.SANDBOXD_AGENT_BUNDLE }).agentBundlePath,
    bridgeName: `sb${tag}`.slice(0, 15),
    subnetCidr: subnet,
    cgroupParent,
    onTiming: (_id, step, ms) => steps.set(step, [...(steps.get(step) ?? []), ms]),
  });
  await rt.setupHost();
  try {
    return await fn({ rt, steps, cgroupParent });
  } finally {
    await rt.close().catch(() => undefined);
    await rt.teardownHost().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  }
}
