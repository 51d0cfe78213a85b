/**
 * How many ready sandboxes the warm pool keeps per key: pure arithmetic on an injected clock, so
 * that the policy is tested without containers or timers (warm-pool.ts does the booting).
 */

/**
 * Host memory a ready (idle) sandbox costs, in MiB: what the warm pool's budget counts. Measured on
 * the 2-core, 24 GiB reference host: the memory cgroup of an idle sandbox (catatonit + the Node
 * agent, nothing run yet) holds 9–10.5 MiB, and MemAvailable drops by ~9–10 MiB per sandbox over
 * 50 of them (bench/lifecycle). Its memory limit (512 MB or more) is not what it costs while idle,
 * and the pool's sandboxes never run tenant code before they are handed out.
 */
export const READY_SANDBOX_COST_MB = 10;

/**
 * Creates per second, as an exponentially weighted moving average with time constant `tauMs`: each
 * create adds 1/tau and the sum decays as e^(-t/tau), so a steady rate r reads r (after a few tau)
 * and a silence of one tau divides the estimate by e. O(1) memory per key.
 */
export class RateEstimate {
  private value = 0;
  private at: number | undefined;

  constructor(private readonly tauMs: number) {
    if (!(tauMs > 0)) throw new Error(`rate time constant must be positive, got ${tauMs}`);
  }

  observe(nowMs: number, count = 1): void {
    this.value = this.perSecond(nowMs) + (count * 1000) / this.tauMs;
    this.at = nowMs;
  }

  perSecond(nowMs: number): number {
    if (this.at === undefined) return 0;
    return this.value * Math.exp(-Math.max(0, nowMs - this.at) / this.tauMs);
  }
}

/**
 * What the machine boots, in sandboxes per second: each finished boot gives a sample of the
 * throughput it ran at (boots in flight ÷ its duration), averaged exponentially (weight `alpha`
 * per sample). It follows the machine as it is today (a slow day, other work, the pool's own low
 * CPU weight), which a fixed figure cannot. undefined until a boot finished.
 */
export class BootRate {
  private value: number | undefined;

  constructor(private readonly alpha = 0.2) {
    if (!(alpha > 0 && alpha <= 1)) throw new Error(`boot rate weight must be in (0, 1], got ${alpha}`);
  }

  observe(durationMs: number, inFlight: number): void {
    if (!(durationMs > 0) || !(inFlight >= 1)) return;
    const sample = (inFlight * 1000) / durationMs;
    this.value = this.value === undefined ? sample : this.value + this.alpha * (sample - this.value);
  }

  perSecond(): number | undefined {
    return this.value;
  }
}

/**
 * The default reserve, sized to the machine's memory: 5 % of it in ready sandboxes at
 * `costMb` each (120 on a 24 GiB host, ~1.2 GiB idle; 40 on 8 GiB), within the budget. A burst
 * that no demand announced is served from it; what it costs at rest is that memory (an idle
 * sandbox uses no CPU).
 */
export function reserveForMemory(hostMemoryMb: number, budget: number, costMb = READY_SANDBOX_COST_MB): number {
  return Math.max(0, Math.min(budget, Math.floor((hostMemoryMb * RESERVE_MEMORY_SHARE) / costMb)));
}

/** Share of the host's memory the default reserve may hold. */
export const RESERVE_MEMORY_SHARE = 0.05;

export interface SizingPolicy {
  /** Ready sandboxes kept per key that was asked for, whatever its rate (the floor). */
  minPerKey: number;
  /** Seconds of demand to hold ready: target = rate × horizon. */
  horizonSeconds: number;
  /** Ready sandboxes the memory budget pays for, all keys together (the ceiling). */
  budgetSandboxes: number;
  /**
   * Ready sandboxes held at rest, all keys together, shared by each key's long-term demand: what
   * serves a burst that no recent demand announced (0: none beyond the floor).
   */
  reserveSandboxes?: number;
  /**
   * What the machine boots (sandboxes per second, BootRate), when measured: the target by rate is
   * then at most what the capacity left over by the demand itself boots in `capacitySeconds`.
   * Demand that takes every boot the machine has cannot be got ahead of (holding more is not
   * possible), and a target a slow machine cannot reach before the demand decays only makes it
   * boot while idle.
   */
  bootsPerSecond?: number;
  /** Seconds of spare boot capacity the target by rate may ask for (default 10: the rate's time constant). */
  capacitySeconds?: number;
}

/** The budget in sandboxes: what `maxMemoryMb` pays for at `costMb` each. */
export function budgetSandboxes(maxMemoryMb: number, costMb = READY_SANDBOX_COST_MB): number {
  return Math.max(0, Math.floor(maxMemoryMb / costMb));
}

/**
 * `total` shared out in proportion to `weights` (all equal when every weight is 0), in whole
 * sandboxes: floors first, then the largest remainders (ties: the heavier key, then the key's name).
 */
export function apportion(total: number, weights: ReadonlyMap<string, number>): Map<string, number> {
  const out = new Map<string, number>();
  if (weights.size === 0) return out;
  const sum = [...weights.values()].reduce((a, b) => a + b, 0);
  const weightOf = (w: number) => (sum > 0 ? w / sum : 1 / weights.size);
  const shares: Array<{ key: string; rest: number; weight: number }> = [];
  let given = 0;
  for (const [key, w] of weights) {
    const exact = total * weightOf(w);
    const whole = Math.floor(exact + 1e-9);
    out.set(key, whole);
    given += whole;
    shares.push({ key, rest: exact - whole, weight: w });
  }
  shares.sort((a, b) => b.rest - a.rest || b.weight - a.weight || (a.key < b.key ? -1 : 1));
  for (const sh of shares) {
    if (given >= total) break;
    out.set(sh.key, out.get(sh.key)! + 1);
    given++;
  }
  return out;
}

/**
 * Target of ready sandboxes per key: max(floor, ⌈min(rate × horizon, spare boot capacity ×
 * capacitySeconds)⌉, its share of the reserve by
 * long-term demand), and when the keys together want more than the budget pays for, each gets a
 * share proportional to what it wants, so the total never exceeds the budget and a busy key does
 * not starve a quiet one of its share. `longRates` (creates per second over the last hour or so)
 * default to `rates`.
 */
export function targetsFor(rates: ReadonlyMap<string, number>, p: SizingPolicy, longRates: ReadonlyMap<string, number> = rates): Map<string, number> {
  const reserve = apportion(Math.min(p.reserveSandboxes ?? 0, p.budgetSandboxes), new Map([...rates.keys()].map((k) => [k, longRates.get(k) ?? 0])));
  const want = new Map<string, number>();
  const totalRate = [...rates.values()].reduce((a, b) => a + b, 0);
  const cap = p.bootsPerSecond === undefined ? Infinity : Math.max(0, p.bootsPerSecond - totalRate) * (p.capacitySeconds ?? 10);
  for (const [key, rate] of rates) {
    // A hair below an integer must not round up (floating point of the decayed sum).
    const byRate = Math.ceil(Math.min(rate * p.horizonSeconds, cap) - 1e-9);
    want.set(key, Math.max(p.minPerKey, byRate, reserve.get(key) ?? 0));
  }
  const total = [...want.values()].reduce((a, b) => a + b, 0);
  if (total <= p.budgetSandboxes) return want;
  return apportion(p.budgetSandboxes, want);
}
