import type { Socket } from 'node:net';
import type { EgressPolicy } from '../runtime/egress-policy.js';
import type { ListeningPort } from '../runtime/listening.js';
import type { ExportStats, LayerRef, RuntimeStatus, SandboxSpec, SandboxStats } from '../runtime/types.js';

/**
 * A sandbox's spec as a node takes it. `lowerDirs` are paths of the caller's machine, good for a
 * node on that machine; `layerRefs` name the same layers by id, digest and where to fetch them,
 * for a node with a layers directory of its own (control sends them; the node fetches what it
 * lacks). `layerIds` always names them (the warm pool's key, the layer cache's use).
 */
export interface NodeSpec extends SandboxSpec {
  layerRefs?: LayerRef[];
}

/** What a create asks a node for: a running sandbox of a spec, handed over with the create's env and policy. */
export interface TakeAsk {
  /** Without identity (id and hostname empty, no SANDBOX_ID): the node gives them. */
  spec: NodeSpec;
  /** The warm pool's name for what it boots (a template id, `snap:<id>`, `fork:<layer>`), and for logs, its label. */
  poolId: string;
  label: string;
  /** The create's env_vars: the agent takes them (PUT /env) before the sandbox is handed out, which also proves it answers. */
  env: Record<string, string>;
  /** The create's egress policy, set before it is handed out (null: the spec's). */
  egress: EgressPolicy | null;
  /** The asker went away: a wait for a boot ends, and a sandbox not yet handed over is destroyed. */
  signal?: AbortSignal;
}

export interface Taken {
  id: string;
  /** It was ready in the node's warm pool (not booted for this ask). */
  warm: boolean;
}

/** Ready and booting sandboxes of a warm pool, and the asks it served at once (hits) or with a boot (misses). */
export interface WarmStats {
  ready: number;
  booting: number;
  hits: number;
  misses: number;
}

/**
 * A machine that runs sandboxes, as the control plane drives it: the one contract of the
 * all-in-one daemon's own machine (LocalNode: the runtime, its warm pool and layer cache, in
 * process) and of a node of a cluster (RemoteNode: the same over the node API). Placement
 * (placement/) holds one or many. Every verb is keyed by sandbox id and idempotent, so a call that
 * timed out may be made again; a node that cannot be reached answers NODE_UNAVAILABLE.
 */
export interface Node {
  readonly id: string;
  /** A running sandbox of the ask's spec: ready from the warm pool or booted now, its agent answering, the ask's env and policy set. */
  take(ask: TakeAsk): Promise<Taken>;
  /** The warm pool forgets `poolId` (a template deleted or rebuilt, a fork done): its ready sandboxes go. */
  dropWarm(poolId: string): Promise<void>;
  /**
   * Boots a stopped sandbox again on its preserved disk (remounting what is missing); resolves once
   * its agent answers. An agent that never does: the sandbox is stopped again, AGENT_UNAVAILABLE.
   */
  start(spec: NodeSpec): Promise<void>;
  /**
   * A sandbox moved here from another node (a drain): booted with the spec's id on a new, empty
   * disk over the spec's layers (its files come as the top one); resolves once its agent answers.
   * Whatever the node held of that id before (what an earlier move cut short left) is destroyed
   * first: the caller names an id no row places on this node. A boot that fails leaves nothing.
   */
  receive(spec: NodeSpec): Promise<void>;
  /** Freezes every process (memory kept). */
  pause(id: string): Promise<void>;
  resume(id: string): Promise<void>;
  /** Kills every process and removes the container; the disk stays for start(). */
  stop(id: string): Promise<void>;
  /** Removes everything of the sandbox. Idempotent. */
  destroy(id: string): Promise<void>;
  status(id: string): Promise<RuntimeStatus>;
  statuses(ids: string[]): Promise<Map<string, RuntimeStatus>>;
  /** Every sandbox id the node holds any trace of (its warm pool's too). */
  list(): Promise<string[]>;
  stats(id: string): Promise<SandboxStats>;
  listeningPorts(id: string): Promise<ListeningPort[]>;
  /** Sets the egress policy of a sandbox that has a network (INVALID_STATE without one). */
  setEgress(id: string, policy: EgressPolicy): Promise<void>;
  /** Gives a stopped sandbox a new empty disk of `diskGb`. */
  resetDisk(id: string, diskGb: number): Promise<void>;
  /** The sandbox's own files, as a layer in canonical ownership, into `dest` (an empty directory of this process's machine). */
  exportLayer(id: string, dest: string, opts?: { maxBytes?: number }): Promise<ExportStats>;
  /** A connection to the sandbox's agent. */
  dialAgent(id: string, timeoutMs?: number): Promise<Socket>;
  /** Calls `onKill` as processes are killed for lack of memory in its sandboxes; returns the function that stops it. */
  watchOom(onKill: (id: string, kills: number) => void): () => void;
  /** The layers the node holds, by id. */
  layerIds(): Promise<string[]>;
  /** This process lets go of the node (its connections, its warm pool); the sandboxes keep running. */
  close(): Promise<void>;
}
