// What a stopped test node's runtime still holds, destroyed with the runtime's own code: sandboxes,
// then its host setup (bridge, nftables table, cgroup parent). The harness calls it in-process for
// a node on the host's network, and runs this file inside a namespaced node's namespaces (where its
// bridge, tables and mounts are) with the node's settings as the JSON argument.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface NodeRuntimeSettings {
  dataDir: string;
  cgroupParent: string;
  bridge: string;
  subnet: string;
}

export async function destroyNodeRuntime(s: NodeRuntimeSettings, repoRoot: string): Promise<void> {
  const { CrunRuntime } = await import('../../packages/server/dist/runtime/index.js');
  const rt = new CrunRuntime({ dataDir: s.dataDir, agentBundlePath: join(repoRoot, 'packages/agent/bundle/agent.cjs'), cgroupParent: s.cgroupParent, bridgeName: s.bridge, subnetCidr: s.subnet });
  for (const id of await rt.list()) await rt.destroy(id);
  await rt.teardownHost().catch(() => undefined);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const settings = JSON.parse(process.argv[2] ?? '') as NodeRuntimeSettings;
  await destroyNodeRuntime(settings, fileURLToPath(new URL('../..', import.meta.url)));
  // The runtime may keep timers of its own; nothing is left to wait for.
  process.exit(0);
}
