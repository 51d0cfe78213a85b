import { availableParallelism } from 'node:os';
import { LocalNode, type LocalNodeOptions } from '../node/local-node.js';
import { FixedNodes } from '../placement/node-set.js';
import { Placement } from '../placement/placement.js';
import { dialUnix } from '../runtime/agent-socket.js';
import type { Runtime } from '../runtime/types.js';
import type { AgentDial } from '../services/routes.js';
import type { Store } from '../store/types/index.js';
import { FakeRuntime } from './fake-runtime.js';

/**
 * TEST DOUBLE. This process's node with the FakeRuntime under it (no container: its agents answer
 * on real unix sockets): the real LocalNode, its warm pool and take included, over sandboxes that
 * live in memory. Its pool holds nothing ahead by default (every take boots), as a quiet daemon's.
 */
export function fakeNode(o: { socketDir: string; id?: string; pool?: Partial<LocalNodeOptions['pool']>; agentReadyTimeoutMs?: number; runtime?: FakeRuntime }): { node: LocalNode; runtime: FakeRuntime } {
  const runtime = o.runtime ?? new FakeRuntime({ socketDir: o.socketDir });
  const node = new LocalNode({
    id: o.id ?? 'fake-node',
    runtime,
    pool: { minPerKey: 0, maxMemoryMb: 0, horizonSeconds: 0, shrinkAfterMs: 0, bootConcurrency: availableParallelism(), tickMs: 0, ...o.pool },
    agentReadyTimeoutMs: o.agentReadyTimeoutMs ?? 5000,
    log: () => undefined,
  });
  return { node, runtime };
}

/** Placement over `nodes` of this process, as the all-in-one daemon has it. */
export function fixedPlacement(store: Pick<Store, 'sandboxes'>, ...nodes: LocalNode[]): Placement {
  return new Placement({ nodes: new FixedNodes(nodes), usage: () => store.sandboxes.usageByNode(), log: () => undefined });
}

/** A LocalNode named `id` over `runtime` (a FakeRuntime, or any), with no warm pool: what a node API serves in a test. */
export function nodeOver(runtime: Runtime, id: string, o: Partial<Omit<LocalNodeOptions, 'id' | 'runtime'>> = {}): LocalNode {
  return new LocalNode({ id, runtime, pool: { minPerKey: 0, maxMemoryMb: 0, horizonSeconds: 0, shrinkAfterMs: 0, bootConcurrency: 4, tickMs: 0 }, agentReadyTimeoutMs: 5000, log: () => undefined, ...o });
}

/**
 * A runtime that refuses every verb (`onCall` is told of each): for tests of what must be refused
 * before any node is reached. Its agents' sockets are paths under `dir`, never made.
 */
export function refusingRuntime(dir: string, onCall: (verb: string) => void = () => undefined): Runtime {
  return new Proxy({} as Runtime, {
    get: (_t, name) => {
      if (name === 'agentSocket') return (id: string) => `${dir}/${id}.sock`;
      if (name === 'watchOom') return () => () => undefined;
      if (name === 'close') return async () => undefined;
      return () => {
        onCall(String(name));
        return Promise.reject(new Error(`the runtime must not be reached (${String(name)})`));
      };
    },
  });
}

/** The dialer of an agent's unix socket on this machine (what a LocalNode's dialAgent does). */
export function unixDial(socketPath: string): AgentDial {
  return (timeoutMs) => dialUnix(socketPath, timeoutMs);
}
