import type { Socket } from 'node:net';
import type { EgressPolicy } from './egress-policy.js';
import type { ListeningPort } from './listening.js';
/**
 * The machine-level verbs of one host that runs sandboxes (CrunRuntime): nothing about clusters.
 * A node (node/types.ts) is built on one. Every call is keyed by sandbox id and is idempotent:
 * calling it again after a crash or a timeout is safe.
 */

export interface SandboxResources {
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  /** Limit of processes+threads inside the sandbox (fork bombs stop here). */
  pidsMax: number;
  /**
   * CPU weight (cgroup v2 cpu.weight, 1–10000; v1 cpu.shares in proportion) while the sandbox
   * competes for the host's CPU; absent: the normal weight (100). The warm pool boots ahead at a low
   * weight, and sets the normal one before a create is handed the sandbox (Runtime.setCpuWeight).
   */
  cpuWeight?: number;
}

/** A volume as a sandbox's spec names it (runtime/volumes.ts): the runtime finds its mount from the id. */
export interface VolumeMountSpec {
  id: string;
  /** Absolute, normalized path inside the sandbox (volumePathProblem). */
  path: string;
  readOnly: boolean;
}

export interface SandboxSpec {
  /** Sandbox id: also the container id and the cgroup leaf name. Lowercase [a-z0-9-]. */
  id: string;
  /**
   * Read-only template layers, top-most first; absolute host paths in canonical ownership
   * (CANONICAL_ID_OFFSET, or LEGACY_ID_OFFSET for layers made before it moved). The sandbox sees
   * them through idmapped mounts, owned by its own id range.
   */
  lowerDirs: string[];
  /**
   * The layer ids of lowerDirs, in the same order: what a node is sent instead of this machine's
   * paths (it maps them to its own layers directory, fetching what it lacks), and the warm pool's key.
   */
  layerIds?: string[];
  resources: SandboxResources;
  /** false: loopback only. true: veth + NAT; host, private ranges and other sandboxes blocked. */
  internetAccess: boolean;
  /**
   * With internet access: the egress policy (egress-policy.ts). Undefined: the one the sandbox
   * kept from before (start), or the default.
   */
  egress?: EgressPolicy;
  hostname: string;
  /** Environment of the agent process (and so the base of every execution). */
  env: Record<string, string>;
  /** Volumes bound into the sandbox (runtime/volumes.ts), each at its path; absent: none. */
  volumes?: VolumeMountSpec[];
}

/**
 * A layer as control names it to a node: its id, its content digest and size (images/layer-tar.ts),
 * and where the node fetches it when its own layers directory lacks it, with the short-lived token
 * control signed for that node and that layer.
 */
export interface LayerRef {
  id: string;
  digest: string;
  bytes: number;
  url: string;
  token: string;
}

/** Control's side of moving layers: the refs of a sandbox's layers for one node. */
export interface LayerSource {
  refs(layerIds: string[], nodeId: string): Promise<LayerRef[]>;
}

/** What exportLayer copied: its files' bytes, the disk they take, their inodes, how long the sandbox was frozen, and (when known) every name, hard links too. */
export interface ExportStats {
  bytes: number;
  allocated: number;
  entries: number;
  frozenMs: number;
  /** Names in the copy (hard links count; a tar has a header for each), when known. */
  names?: number;
}

export type RuntimeStatus = 'running' | 'paused' | 'stopped' | 'missing';

export interface SandboxStats {
  cpuUsageNs: number;
  memoryBytes: number;
  memoryLimitBytes: number;
  oomKills: number;
  pids: number;
  diskUsedBytes: number;
  diskTotalBytes: number;
  /** Bytes the sandbox received and sent over its network (0 without one). */
  networkRxBytes: number;
  networkTxBytes: number;
  /** Connections (and datagrams) its egress policy refused since the daemon started. */
  egressDenied: number;
}

export interface StepRunOptions {
  /** Unique id of this run (container id, cgroup name). */
  id: string;
  lowerDirs: string[];
  /** Host directory that receives this step's changes (becomes a layer, canonical ownership). */
  upperDir: string;
  /** argv run inside (e.g. ['/bin/sh', '-c', cmd]). */
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  internetAccess: boolean;
  resources: SandboxResources;
  timeoutMs: number;
  /** Extra read-only bind mounts (host path → container path), e.g. files to copy in. */
  binds?: Array<{ source: string; target: string }>;
  onOutput?: (chunk: string) => void;
  signal?: AbortSignal;
}

export interface Runtime {
  /** Idempotent host preparation (cgroup quirk, ip_forward, bridge, nftables, directories). */
  setupHost(): Promise<void>;
  /**
   * Prepares disk, overlay rootfs, network and OCI bundle, and starts the container whose PID 1 is a
   * tiny init running the agent. Resolves once the container runs (the agent may still be starting).
   * On any failure everything done so far is undone (undo stack) and the error is thrown.
   * Idempotent by id: again on a running or paused sandbox it does nothing (whatever the spec); on
   * an id that holds anything else (a stopped sandbox included) it takes that for the leftovers of
   * an interrupted create and removes it first. So create only with a new id; start() boots a
   * stopped one on its disk.
   */
  create(spec: SandboxSpec): Promise<void>;
  /** Host path of the agent's unix socket. */
  agentSocket(id: string): string;
  /**
   * A connection to the sandbox's agent (its unix socket). Rejects when it cannot be had within
   * `timeoutMs`: with the socket's error (ECONNREFUSED, ENOENT) or AGENT_UNAVAILABLE.
   */
  dialAgent(id: string, timeoutMs?: number): Promise<Socket>;
  /**
   * Sets the sandbox's CPU weight (SandboxResources.cpuWeight; 100 is the normal one) on its
   * running cgroup. NOT_FOUND / SANDBOX_STOPPED when it does not run.
   */
  setCpuWeight(id: string, weight: number): Promise<void>;
  /** Freezes every process (memory kept). */
  pause(id: string): Promise<void>;
  resume(id: string): Promise<void>;
  /** Kills every process and removes the container; keeps the disk (upper layer) for start(). */
  stop(id: string): Promise<void>;
  /** Boots a stopped sandbox again on its preserved disk; remounts what is missing. */
  start(spec: SandboxSpec): Promise<void>;
  /** Removes container, mounts, loop device, cgroups, netns/veth and directory. Idempotent. */
  destroy(id: string): Promise<void>;
  status(id: string): Promise<RuntimeStatus>;
  /** status() of many sandboxes at once, for the price of one query (reconcile at start). */
  statuses(ids: string[]): Promise<Map<string, RuntimeStatus>>;
  /** Every sandbox id the runtime holds any trace of (directories, containers, netns, cgroups). */
  list(): Promise<string[]>;
  /** One sandbox's counters, on demand; its cost does not depend on the number of sandboxes. */
  stats(id: string): Promise<SandboxStats>;
  /** TCP ports something listens on inside the sandbox, from the kernel's tables of its network namespace (empty when it does not run). */
  listeningPorts(id: string): Promise<ListeningPort[]>;
  /**
   * Calls `onKill` with the number of processes newly killed for lack of memory in a sandbox, as
   * the kills happen (within about a second), without polling every sandbox. Kills from before a
   * sandbox was first seen (a daemon restart) are not reported; every kill in a sandbox this
   * runtime booted is. Returns the function that stops watching.
   */
  watchOom(onKill: (id: string, kills: number) => void): () => void;
  /** Daemon shutdown: releases what the runtime keeps ready (spares); sandboxes keep running. */
  close(): Promise<void>;
  /**
   * Sets the egress policy of a sandbox that has a network (INVALID_STATE without one); new
   * connections follow it within a second; kept across restarts and stop/start.
   */
  setEgress(id: string, policy: EgressPolicy): Promise<void>;
  /**
   * Copies the sandbox's own files (what it changed over its layers) into `dest`, an empty host
   * directory, as a layer in canonical ownership. A running sandbox is frozen for the copy and
   * thawed after; a paused or stopped one is copied as it is. `maxBytes`: refused (ExportTooLarge)
   * without copying when the sandbox's disk holds more. `entries` counts inodes, `names` (when
   * known) every name, hard links too: a node sends both to control (layer-export-wire.ts).
   */
  exportLayer(id: string, dest: string, opts?: { maxBytes?: number }): Promise<ExportStats>;
  /** Gives a stopped sandbox a new empty disk of `diskGb` (its id, id range and address stay). */
  resetDisk(id: string, diskGb: number): Promise<void>;
  /** Runs one build step to completion in a throwaway container with sandbox isolation. */
  runStep(opts: StepRunOptions): Promise<{ exitCode: number; timedOut: boolean }>;
}

/**
 * Unpacks a layer's tar from a hostile source into the empty directory `dest`, checking it as it
 * goes (images/layer-tar.ts unpackLayer, given by the caller: runtime/ does not import images/);
 * rejects when the tar is refused, is not `expect.bytes` long or has another digest. Resolves to
 * what was unpacked: its entries and the bytes of its regular files.
 */
export type LayerUnpacker = (source: AsyncIterable<Uint8Array>, dest: string, expect: { digest: string; bytes: number }, opts: { signal?: AbortSignal; maxEntries?: number; maxFileBytes?: number; canonicalOnly?: boolean }) => Promise<{ entries: number; fileBytes: number }>;

/** exportLayer's refusal: the sandbox's disk holds more than `maxBytes` (its `used` bytes). */
export class ExportTooLarge extends Error {
  constructor(readonly used: number) {
    super(`the sandbox's disk holds ${used} bytes`);
  }
}
