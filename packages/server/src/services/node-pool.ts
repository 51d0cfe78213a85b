import type { Runtime, SandboxSpec } from '../runtime/types.js';
import { agentJson, waitForAgentPrimed } from './agent-client.js';
import { newSandboxId, withSandboxId } from './sandbox-identity.js';
import { clusterWarmKeyOf, WarmPool, type WarmPoolOptions } from './warm-pool.js';

/** How long an agent may take to answer PUT /env before the sandbox is taken for broken (as control waits). */
const AGENT_ENV_TIMEOUT_MS = 2000;

/** What control asks a node for: a running sandbox of a spec (its id, hostname and SANDBOX_ID are the node's to give). */
export interface WarmAsk {
  /** The spec without identity: `layerIds` name its layers (the key), `lowerDirs` is ignored. */
  spec: SandboxSpec;
  /** This node's paths of the layers, fetched when missing (called by the boots only: a ready sandbox has them). */
  lowerDirs: () => Promise<string[]>;
  /** The pool's name for what it boots (the template id) and, for logs, the template's name. */
  poolId: string;
  label: string;
  /** The asking call went away while it waited: the wait ends, and the boot it started is kept ready. */
  signal?: AbortSignal;
  /**
   * The create's env_vars, set on the agent here (one call on its socket, instead of one from
   * control through the relay); a sandbox whose agent does not take them is destroyed, and the
   * next one is taken, as control does.
   */
  agentEnv?: Record<string, string>;
}

export interface NodeWarmPoolOptions {
  runtime: Pick<Runtime, 'create' | 'destroy' | 'dialAgent'>;
  /** The sizing of the pool (config's SANDBOXD_WARM_POOL_*), as on one machine. */
  pool: Omit<WarmPoolOptions, 'runtime' | 'log'>;
  agentReadyTimeoutMs: number;
  /**
   * Which layers each sandbox of this node uses (node/layer-cache.ts, which evicts only what none
   * uses): told before a boot resolves its layers, and when the pool destroys one of its sandboxes.
   */
  layerUse?: { use(id: string, layerIds: string[]): Promise<() => void>; release(id: string): Promise<void> };
  log: (msg: string, extra?: Record<string, unknown>) => void;
}

/**
 * A node's warm pool (`sandboxd node`): ready sandboxes booted ahead on this machine, per key, sized
 * from the demand this node sees (the asks of every control replica), as the all-in-one daemon's
 * pool is. The node picks their ids (they exist before a create asks), so control learns a
 * sandbox's id from the node's answer. A ready sandbox is the node's own: the node's collector of
 * sandboxes no one owns leaves it alone (`held`); once handed to control it is control's, covered
 * by control's claim and then its row as any create is, and collected after the grace if the replica
 * that took it died before either. The heartbeat reports the ready counts per key (`readyByKey`),
 * which placement prefers.
 */
export class NodeWarmPool {
  private readonly pool: WarmPool;
  /** Boots under way (their ids are not the pool's until they are ready). */
  private readonly booting = new Set<string>();
  /** Destroys one of its sandboxes, its layers then no longer held for it. */
  private readonly destroy: (id: string) => Promise<void>;

  constructor(private readonly o: NodeWarmPoolOptions) {
    const destroy = async (id: string) => {
      await o.runtime.destroy(id);
      await o.layerUse?.release(id);
    };
    this.destroy = destroy;
    this.pool = new WarmPool({ ...o.pool, runtime: { destroy }, log: o.log });
  }

  /** A running sandbox of the ask's key, its agent answering: a ready one, or one booted now. */
  async take(ask: WarmAsk): Promise<{ id: string; warm: boolean; envSet?: true }> {
    const k = clusterWarmKeyOf(ask.spec, ask.poolId, ask.label);
    const make = async () => {
      const id = newSandboxId();
      this.booting.add(id);
      let settled: (() => void) | undefined;
      try {
        settled = await this.o.layerUse?.use(id, ask.spec.layerIds ?? []);
        await this.o.runtime.create(withSandboxId({ ...ask.spec, lowerDirs: await ask.lowerDirs() }, id));
        await waitForAgentPrimed((timeoutMs) => this.o.runtime.dialAgent(id, timeoutMs), this.o.agentReadyTimeoutMs, () => this.pool.waiting(k.key) === 0);
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
      if (!ask.agentEnv) return { id, warm };
      try {
        const res = await agentJson((timeoutMs) => this.o.runtime.dialAgent(id, timeoutMs), 'PUT', '/env', { env_vars: ask.agentEnv }, AGENT_ENV_TIMEOUT_MS);
        if (res.status !== 200) throw new Error(`agent answered ${res.status}`);
      } catch (err) {
        const why = err instanceof Error ? err.message : String(err);
        this.o.log('a ready sandbox did not take its env; taking the next one', { id, error: why });
        await this.destroy(id).catch(() => undefined);
        if (attempt >= 3) throw new Error(`${attempt} sandboxes in a row did not answer: ${why}`);
        continue;
      }
      // Control went away meanwhile: the answer reaches no one, and the sandbox holds its create's env.
      if (ask.signal?.aborted) {
        await this.destroy(id).catch(() => undefined);
        throw new Error('control went away before the sandbox was handed over');
      }
      return { id, warm, envSet: true };
    }
  }

  /** The sandboxes the pool holds (ready or booting): no one else's, not to be collected. */
  held(): string[] {
    return [...this.booting, ...this.pool.ids()];
  }

  /** Ready sandboxes per key (keys with none are left out): what the heartbeat reports. */
  readyByKey(): Record<string, number> {
    return Object.fromEntries(this.pool.stats().filter((s) => s.ready > 0).map((s) => [s.key, s.ready]));
  }

  stats() {
    return { keys: this.pool.stats(), hits: this.pool.hits, misses: this.pool.misses };
  }

  /** Forgets a template (deleted or rebuilt, control says): its ready sandboxes are destroyed. */
  drop(poolId: string): Promise<void> {
    return this.pool.dropTemplate(poolId);
  }

  /** Waiting asks fail, boots in flight finish, every ready sandbox is destroyed. */
  close(): Promise<void> {
    return this.pool.close();
  }
}
