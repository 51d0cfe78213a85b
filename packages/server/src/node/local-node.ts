import type { Socket } from 'node:net';
import type { EgressPolicy } from '../runtime/egress-policy.js';
import type { ListeningPort } from '../runtime/listening.js';
import type { ExportStats, LayerRef, Runtime, RuntimeStatus, SandboxStats } from '../runtime/types.js';
import { ServiceError } from '@sandboxd/protocol';
import { AGENT_ANSWER_MAX_BYTES, agentJson, waitForAgent, waitForAgentPrimed } from './agent-client.js';
import { newSandboxId, withSandboxId } from '../runtime/sandbox-identity.js';
import type { Node, NodeSpec, Taken, TakeAsk, WarmStats } from './types.js';
import { abandonedCreate, warmKeyOf } from './warm-key.js';
import type { PoolBoot, WarmKeyStats } from './warm-keys.js';
import { WarmPool, type WarmPoolOptions } from './warm-pool.js';

const GIB = 1024 ** 3;

/** How long an agent may take to answer PUT /env before its sandbox is taken for broken. */
const AGENT_ENV_TIMEOUT_MS = 2000;
/** Sandboxes in a row whose agent does not take its env before a take fails. */
const TAKE_ATTEMPTS = 3;
/**
 * CPU weight (cgroup v2 scale, 100 normal) of a sandbox the pool boots ahead for no one, while it
 * boots and waits unclaimed: a tenth of a foreground sandbox's, so that its agent's start yields
 * to creates and commands (measured: bench/burst), yet is not starved on a host kept busy (at 1 a
 * boot could wait out the agent's timeout behind one spinning sandbox).
 */
export const POOL_CPU_WEIGHT = 10;
export const NORMAL_CPU_WEIGHT = 100;

/** Whether a take sets no env: neither the create nor the spec's seed (SANDBOXD_ENV_VARS) has any. */
function emptyEnv(ask: TakeAsk): boolean {
  const seed = ask.spec.env.SANDBOXD_ENV_VARS;
  return Object.keys(ask.env).length === 0 && (seed === undefined || seed === '{}');
}

/** Which layers each sandbox of this node uses (node/layer-cache.ts evicts only what none uses). */
export interface LayerUse {
  /** Told before a boot resolves its layers; returns what to call once the boot is over. */
  use(id: string, layerIds: string[]): Promise<() => void>;
  release(id: string): Promise<void>;
}

export interface LocalNodeOptions {
  /** Its name: the host name on one machine, SANDBOXD_NODE_ID on a node of a cluster. */
  id: string;
  runtime: Runtime;
  /** The warm pool's sizing (SANDBOXD_WARM_POOL_*, SANDBOXD_BOOT_CONCURRENCY). */
  pool: Omit<WarmPoolOptions, 'runtime' | 'log'>;
  agentReadyTimeoutMs: number;
  /**
   * Fetches the layers a spec names by reference (`layerRefs`) into this node's layers directory
   * (images/layer-fetch.ts). Absent: specs name this machine's paths (`lowerDirs`).
   */
  layers?: { resolve(refs: LayerRef[]): Promise<string[]> };
  /** The layer cache's record of which sandbox uses which layers (absent: none kept). */
  layerUse?: LayerUse;
  /** The layers this node holds (absent: none reported). */
  layerIds?: () => Promise<string[]>;
  /**
   * Room on this machine's data filesystem for the disk a take or a move makes (`diskGb` in
   * bytes), held until it is made, or refused with 507 before anything is written: a node of a
   * cluster admits its own disks (roles/node.ts). Absent: the caller admitted it (the all-in-one's
   * control, against the same filesystem).
   */
  claimDisk?: (bytes: number, what: string) => Promise<(kept?: boolean) => void>;
  log: (msg: string, extra?: Record<string, unknown>) => void;
}

/**
 * This machine as a node: its runtime, the warm pool that boots sandboxes ahead on it, and (on a
 * node of a cluster) the layers it fetches and keeps. The all-in-one daemon holds one; `sandboxd
 * node` serves one over the node API. A ready sandbox has its id and no row in any store until a
 * take hands it out: it is the node's own (`held`), never collected as anyone's leftover.
 */
export class LocalNode implements Node {
  readonly id: string;
  private readonly pool: WarmPool;
  private readonly runtime: Runtime;
  /** Boots under way (their ids are not the pool's until they are ready). */
  private readonly booting = new Set<string>();
  /** Booted for a waiting create and ready at the boot probe: Node has not answered yet. */
  private readonly probed = new Set<string>();
  /** Sandboxes booted ahead at POOL_CPU_WEIGHT and not yet set back to the normal weight. */
  private readonly lowWeight = new Set<string>();

  constructor(private readonly o: LocalNodeOptions) {
    this.id = o.id;
    this.runtime = o.runtime;
    this.pool = new WarmPool({ ...o.pool, runtime: { destroy: (id) => this.destroy(id) }, log: o.log });
  }

  /**
   * Per key (what a sandbox boots), asks wait in arrival order and each takes the first sandbox
   * ready for it (warm-pool.ts). Its agent then takes the ask's env (which proves it answers) and
   * the ask's policy is set; one that fails is destroyed and the next one taken, ahead of later
   * asks; the third such failure fails the take.
   */
  async take(ask: TakeAsk): Promise<Taken> {
    const release = await this.o.claimDisk?.(ask.spec.resources.diskGb * GIB, `a sandbox disk of ${ask.spec.resources.diskGb} GB`);
    // Refills wait while this create is under way (warm-pool.ts foreground()).
    const done = this.pool.foreground();
    try {
      const taken = await this.takeNow(ask);
      release?.();
      return taken;
    } catch (err) {
      release?.(false);
      throw err;
    } finally {
      done();
    }
  }

  /** The sandboxes this node holds for someone (not its pool's, not booting): their disks may still grow. */
  async ownedIds(): Promise<string[]> {
    const held = new Set(this.held());
    return (await this.runtime.list()).filter((id) => !held.has(id));
  }

  private async takeNow(ask: TakeAsk): Promise<Taken> {
    const k = warmKeyOf(ask.spec, ask.poolId, ask.label);
    const make = async (boot?: PoolBoot) => {
      const id = newSandboxId();
      this.booting.add(id);
      let settled: (() => void) | undefined;
      try {
        settled = await this.o.layerUse?.use(id, ask.spec.layerIds ?? []);
        // A refill boots at a low CPU weight (its agent's start yields to foreground work) and
        // keeps it while it waits unclaimed; a create that comes to wait on it, or takes it, sets
        // the normal weight back.
        const low = boot?.background === true;
        const spec = withSandboxId({ ...ask.spec, lowerDirs: await this.lowerDirs(ask.spec) }, id);
        if (low) spec.resources = { ...spec.resources, cpuWeight: POOL_CPU_WEIGHT };
        await this.runtime.create(spec);
        if (low) {
          this.lowWeight.add(id);
          if (boot.background) boot.onForeground(() => void this.normalWeight(id).catch(() => undefined));
          else await this.normalWeight(id);
        }
        const ready = await waitForAgentPrimed((timeoutMs) => this.runtime.dialAgent(id, timeoutMs), this.o.agentReadyTimeoutMs, () => this.pool.waiting(k.key) === 0);
        if (ready === 'probed') this.probed.add(id);
        return id;
      } catch (err) {
        await this.destroy(id).catch(() => undefined);
        throw err;
      } finally {
        settled?.();
        this.booting.delete(id);
      }
    };
    for (let attempt = 1; ; attempt++) {
      let warm = false;
      const id = await this.pool.acquire(k, make, { signal: ask.signal, retry: attempt > 1, onServed: (hit) => (warm = hit) });
      try {
        // Before anything of the create's runs in it: the normal CPU weight.
        await this.normalWeight(id);
        // A boot this create waited for is ready at its agent's boot probe, Node perhaps still
        // starting: its env set is the spec's (nothing to PUT when both are empty), and a PUT
        // waits for Node's start as a boot does (agent-client.ts waitForAgentPrimed).
        const probed = this.probed.delete(id);
        if (!probed || !emptyEnv(ask)) {
          // The agent answers with the env set it holds: as large as the one sent.
          const body = { env_vars: ask.env };
          const answerMax = AGENT_ANSWER_MAX_BYTES + 2 * Buffer.byteLength(JSON.stringify(body));
          const timeoutMs = probed ? this.o.agentReadyTimeoutMs : AGENT_ENV_TIMEOUT_MS;
          const res = await agentJson((t) => this.runtime.dialAgent(id, t), 'PUT', '/env', body, timeoutMs, answerMax);
          if (res.status !== 200) throw new Error(`agent answered ${res.status}`);
        }
        if (ask.egress) await this.runtime.setEgress(id, ask.egress);
      } catch (err) {
        const why = err instanceof Error ? err.message : String(err);
        this.o.log('a ready sandbox did not answer; taking the next one', { id, error: why });
        await this.destroy(id).catch(() => undefined);
        if (attempt >= TAKE_ATTEMPTS) throw new Error(`${attempt} sandboxes in a row did not answer: ${why}`);
        continue;
      }
      // The asker went away meanwhile: no one would hold this sandbox, which carries its env.
      if (ask.signal?.aborted) {
        await this.destroy(id).catch(() => undefined);
        throw abandonedCreate();
      }
      return { id, warm };
    }
  }

  /** Sets the normal CPU weight back on a sandbox booted ahead at a low one (nothing for others). */
  private async normalWeight(id: string): Promise<void> {
    if (!this.lowWeight.has(id)) return;
    await this.runtime.setCpuWeight(id, NORMAL_CPU_WEIGHT);
    this.lowWeight.delete(id);
  }

  /** This machine's paths of a spec's layers: fetched first when it names them by reference. */
  private async lowerDirs(spec: NodeSpec): Promise<string[]> {
    if (!spec.layerRefs) return spec.lowerDirs;
    if (!this.o.layers) throw new Error('this node takes layers by path, not by reference');
    return this.o.layers.resolve(spec.layerRefs);
  }

  dropWarm(poolId: string): Promise<void> {
    return this.pool.dropTemplate(poolId);
  }

  /**
   * Boots a stopped sandbox again on its disk and waits for its agent. The agent runs the tenant's
   * disk, so it may never answer properly: then the container is stopped again (the sandbox stays
   * stopped, nothing keeps running) and the caller gets a 502 saying so.
   */
  async start(spec: NodeSpec): Promise<void> {
    const settled = await this.o.layerUse?.use(spec.id, spec.layerIds ?? []);
    try {
      await this.runtime.start({ ...spec, lowerDirs: await this.lowerDirs(spec) });
    } finally {
      settled?.();
    }
    try {
      await waitForAgent((timeoutMs) => this.runtime.dialAgent(spec.id, timeoutMs), this.o.agentReadyTimeoutMs);
    } catch (err) {
      await this.runtime.stop(spec.id).catch((e: unknown) => this.o.log('stopping a sandbox whose agent failed failed', { id: spec.id, error: String(e) }));
      throw new ServiceError('AGENT_UNAVAILABLE', `the sandbox's agent did not become ready, so it was stopped again`, { id: spec.id }).withDetail(err instanceof Error ? err.message : String(err));
    }
  }

  /**
   * A sandbox moved here (a drain): what this node held of its id goes first, then it boots as a
   * create does, with its own id, and answers; a boot or an agent that fails leaves nothing.
   */
  async receive(spec: NodeSpec): Promise<void> {
    // This node's own while it arrives (held(): no collector takes it for no one's); the row names
    // the old node until the move is done, and control claims it here once this answers.
    this.booting.add(spec.id);
    let settled: (() => void) | undefined;
    let release: ((kept?: boolean) => void) | undefined;
    try {
      await this.destroy(spec.id);
      release = await this.o.claimDisk?.(spec.resources.diskGb * GIB, `a moved sandbox's disk of ${spec.resources.diskGb} GB`);
      settled = await this.o.layerUse?.use(spec.id, spec.layerIds ?? []);
      await this.runtime.create({ ...spec, lowerDirs: await this.lowerDirs(spec) });
      await waitForAgent((timeoutMs) => this.runtime.dialAgent(spec.id, timeoutMs), this.o.agentReadyTimeoutMs).catch((err: unknown) => {
        throw new ServiceError('AGENT_UNAVAILABLE', "the moved sandbox's agent did not become ready", { id: spec.id }).withDetail(err instanceof Error ? err.message : String(err));
      });
      release?.();
    } catch (err) {
      release?.(false);
      await this.destroy(spec.id).catch((e: unknown) => this.o.log('removing a sandbox whose move failed failed', { id: spec.id, error: String(e) }));
      throw err;
    } finally {
      settled?.();
      this.booting.delete(spec.id);
    }
  }

  pause(id: string): Promise<void> {
    return this.runtime.pause(id);
  }
  resume(id: string): Promise<void> {
    return this.runtime.resume(id);
  }
  stop(id: string): Promise<void> {
    return this.runtime.stop(id);
  }
  async destroy(id: string): Promise<void> {
    this.lowWeight.delete(id);
    this.probed.delete(id);
    await this.runtime.destroy(id);
    await this.o.layerUse?.release(id);
  }
  status(id: string): Promise<RuntimeStatus> {
    return this.runtime.status(id);
  }
  statuses(ids: string[]): Promise<Map<string, RuntimeStatus>> {
    return this.runtime.statuses(ids);
  }
  list(): Promise<string[]> {
    return this.runtime.list();
  }
  stats(id: string): Promise<SandboxStats> {
    return this.runtime.stats(id);
  }
  listeningPorts(id: string): Promise<ListeningPort[]> {
    return this.runtime.listeningPorts(id);
  }
  setEgress(id: string, policy: EgressPolicy): Promise<void> {
    return this.runtime.setEgress(id, policy);
  }
  resetDisk(id: string, diskGb: number): Promise<void> {
    return this.runtime.resetDisk(id, diskGb);
  }
  exportLayer(id: string, dest: string, opts?: { maxBytes?: number }): Promise<ExportStats> {
    return this.runtime.exportLayer(id, dest, opts);
  }
  dialAgent(id: string, timeoutMs?: number): Promise<Socket> {
    return this.runtime.dialAgent(id, timeoutMs);
  }
  /** The agent's socket on this machine (the node API relays connections to it). */
  agentSocket(id: string): string {
    return this.runtime.agentSocket(id);
  }
  watchOom(onKill: (id: string, kills: number) => void): () => void {
    return this.runtime.watchOom(onKill);
  }
  async layerIds(): Promise<string[]> {
    return this.o.layerIds ? this.o.layerIds() : [];
  }

  /** The sandboxes the warm pool holds (ready or booting): no one else's, never collected. */
  held(): string[] {
    return [...this.booting, ...this.pool.ids()];
  }

  /**
   * Whether the warm pool holds ready sandboxes (default true). A draining node holds none: its
   * ready ones are destroyed now, and it boots only for the takes that still reach it.
   */
  holdWarm(hold: boolean): void {
    if (this.pool.stock(hold)) this.o.log(hold ? 'the node no longer drains: its warm pool refills from the creates it gets' : 'the node is draining: its warm pool empties and boots nothing ahead');
  }

  /** Ready sandboxes per key (keys with none left out): what a node's heartbeat reports, and placement prefers. */
  readyByKey(): Record<string, number> {
    return Object.fromEntries(this.pool.stats().filter((s) => s.ready > 0).map((s) => [s.key, s.ready]));
  }

  /** The warm pool's keys with their targets and rates. */
  poolKeys(): WarmKeyStats[] {
    return this.pool.stats();
  }

  warmStats(): WarmStats {
    const keys = this.pool.stats();
    return { ready: keys.reduce((n, k) => n + k.ready, 0), booting: keys.reduce((n, k) => n + k.booting, 0), hits: this.pool.hits, misses: this.pool.misses };
  }

  /** Waiting asks fail, boots in flight finish, every ready sandbox is destroyed; the runtime lets go of its spares. */
  async close(): Promise<void> {
    await this.pool.close();
    await this.runtime.close();
  }
}
