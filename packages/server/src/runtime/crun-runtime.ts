import type { Socket } from 'node:net';
import { dialUnix } from './agent-socket.js';
import type { ListeningPort } from './listening.js';
import { RuntimeContext, type CrunRuntimeOptions } from './context.js';
import type { EgressPolicy } from './egress-policy.js';
import type { ProcResult } from './spawner.js';
import { checkId, ID_RE, type SandboxPaths } from './sandbox-paths.js';
import type { Subnet } from './net.js';
import { ServiceError } from '@sandboxd/protocol';
import type { Runtime, RuntimeStatus, SandboxSpec, SandboxStats, StepRunOptions } from './types.js';
import { create, start } from './verbs/boot.js';
import { setCpuWeight } from './verbs/cpu-weight.js';
import { destroy, stop } from './verbs/destroy.js';
import { exportLayer } from './verbs/export-layer.js';
import { closeRuntime, setupHost, teardownHost } from './verbs/host-setup.js';
import { setPaused } from './verbs/pause.js';
import { initPid, list, listeningPorts, stats, status, statuses } from './verbs/queries.js';
import { resetDisk } from './verbs/reset-disk.js';
import { runStep } from './verbs/run-step.js';
import { setEgress } from './verbs/set-egress.js';

export type { CrunRuntimeOptions } from './context.js';
export { AGENT_STATE_DIR } from './sandbox-paths.js';

/**
 * The sandbox runtime: one crun container per sandbox. Each verb lives in its own file under
 * `verbs/`; what they share (names, node-wide resources, locks) is the RuntimeContext. Layout of
 * `${dataDir}`:
 *   sandboxes/<id>/  one sandbox (sandbox-paths.ts)
 *   crun/            crun's state (--root): every container in it is ours
 *   agent-runtime/   node + its libraries, bound at /.sb/node
 *   bin/             the idmap helper, compiled from native/idmap-mount.c
 *   steps/, crun-steps/  build steps in flight
 *
 * Each sandbox runs as a host id range of its own (id-ranges.ts). The layers are shared and stay
 * in canonical ownership on disk; each sandbox mounts them through idmapped mounts that show them
 * owned by its range. Its upper lives on its own disk, owned by its range.
 */
// Every verb is async: a bad argument is a rejected promise, never a synchronous throw that a
// caller's `.catch()` would miss.
export class CrunRuntime implements Runtime {
  private readonly ctx: RuntimeContext;

  constructor(opts: CrunRuntimeOptions) {
    this.ctx = new RuntimeContext(opts);
  }

  /** What it was made with (a test makes a second runtime over the same data, as a restart would). */
  get options(): CrunRuntimeOptions {
    return this.ctx.opts;
  }
  get dataDir(): string {
    return this.ctx.dataDir;
  }
  get bridge(): string {
    return this.ctx.bridge;
  }
  get subnet(): Subnet {
    return this.ctx.subnet;
  }
  get subnetCidr(): string {
    return this.ctx.subnetCidr;
  }
  get cgroupParent(): string {
    return this.ctx.cgroupParent;
  }
  /** This runtime's nftables table (inet family). */
  get nftTable(): string {
    return this.ctx.nftTable;
  }
  /** The host end of the egress proxy's veth. */
  get proxyVeth(): string {
    return this.ctx.egress.proxyVeth;
  }

  paths(id: string): SandboxPaths {
    return this.ctx.paths(id);
  }
  netnsName(id: string): string {
    return this.ctx.netnsName(id);
  }
  vethName(id: string): string {
    return this.ctx.vethName(id);
  }
  cgroupPath(id: string): string {
    return this.ctx.cgroupPath(id);
  }
  agentSocket(id: string): string {
    return this.ctx.paths(id).socket;
  }

  async dialAgent(id: string, timeoutMs = 10_000): Promise<Socket> {
    checkId(id);
    return dialUnix(this.ctx.paths(id).socket, timeoutMs);
  }

  async setupHost(): Promise<void> {
    return setupHost(this.ctx);
  }
  /** Removes this runtime's bridge, nftables table and cgroup parent (tests, uninstall). */
  async teardownHost(): Promise<void> {
    return teardownHost(this.ctx);
  }
  async close(): Promise<void> {
    return closeRuntime(this.ctx);
  }

  async create(spec: SandboxSpec): Promise<void> {
    return create(this.ctx, spec);
  }
  async start(spec: SandboxSpec): Promise<void> {
    return start(this.ctx, spec);
  }
  async setCpuWeight(id: string, weight: number): Promise<void> {
    return setCpuWeight(this.ctx, id, weight);
  }
  async pause(id: string): Promise<void> {
    await setPaused(this.ctx, id, true);
  }
  async resume(id: string): Promise<void> {
    await setPaused(this.ctx, id, false);
  }
  async stop(id: string): Promise<void> {
    return stop(this.ctx, id);
  }
  async destroy(id: string): Promise<void> {
    return destroy(this.ctx, id);
  }
  async setEgress(id: string, policy: EgressPolicy): Promise<void> {
    return setEgress(this.ctx, id, policy);
  }
  /** The sandbox's policy as the runtime holds it (undefined: the default). */
  egressOf(id: string): EgressPolicy | undefined {
    return this.ctx.egress.of(id);
  }
  async exportLayer(id: string, dest: string, opts: { maxBytes?: number } = {}): Promise<{ bytes: number; allocated: number; entries: number; frozenMs: number }> {
    return exportLayer(this.ctx, id, dest, opts);
  }
  async resetDisk(id: string, diskGb: number): Promise<void> {
    return resetDisk(this.ctx, id, diskGb);
  }
  async runStep(opts: StepRunOptions): Promise<{ exitCode: number; timedOut: boolean }> {
    if (!ID_RE.test(opts.id)) throw new ServiceError('VALIDATION_ERROR', `bad step id ${opts.id}`);
    return this.ctx.withLock(`step:${opts.id}`, () => runStep(this.ctx.stepContext(), opts));
  }

  async status(id: string): Promise<RuntimeStatus> {
    return status(this.ctx, id);
  }
  async statuses(ids: string[]): Promise<Map<string, RuntimeStatus>> {
    return statuses(this.ctx, ids);
  }
  async list(): Promise<string[]> {
    return list(this.ctx);
  }
  async stats(id: string): Promise<SandboxStats> {
    return stats(this.ctx, id);
  }
  async listeningPorts(id: string): Promise<ListeningPort[]> {
    return listeningPorts(this.ctx, id);
  }
  /** Pid (on the host) of the sandbox's init, or undefined when not running. */
  async initPid(id: string): Promise<number | undefined> {
    return initPid(this.ctx, id);
  }

  watchOom(onKill: (id: string, kills: number) => void): () => void {
    return this.ctx.oom.watch(onKill);
  }
  /** Resolves once watchOom has taken every sandbox's baseline and armed its trigger (tests). */
  async oomWatchReady(): Promise<void> {
    return this.ctx.oom.ready();
  }
  /** Resolves once the operations queued on sandbox `id` so far are done (tests). */
  async settled(id: string): Promise<void> {
    return this.ctx.withLock(id, async () => undefined);
  }
  /** Runs a command in a running sandbox (tests, benchmarks, debugging); users go through the agent. */
  async exec(id: string, argv: string[], opts: { env?: Record<string, string>; cwd?: string; input?: string } = {}): Promise<ProcResult> {
    checkId(id);
    return this.ctx.crun.exec(id, argv, opts);
  }
}
