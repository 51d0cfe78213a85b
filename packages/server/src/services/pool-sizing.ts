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

export interface SizingPolicy {
  /** Ready sandboxes kept per key that was asked for, whatever its rate (the floor). */
  minPerKey: number;
  /** Seconds of demand to hold ready: target = rate × horizon. */
  horizonSeconds: number;
  /** Ready sandboxes the memory budget pays for, all keys together (the ceiling). */
  budgetSandboxes: number;
}

/** The budget in sandboxes: what `maxMemoryMb` pays for at `costMb` each. */
export function budgetSandboxes(maxMemoryMb: number, costMb = READY_SANDBOX_COST_MB): number {
  return Math.max(0, Math.floor(maxMemoryMb / costMb));
}

/**
 * Target of ready sandboxes per key: max(floor, ⌈rate × horizon⌉), and when the keys together want
 * more than the budget pays for, each gets a share proportional to what it wants (largest
 * remainders first, then the busier key), so the total never exceeds the budget and a busy key
 * does not starve a quiet one of its share.
 */
export function targetsFor(rates: ReadonlyMap<string, number>, p: SizingPolicy): Map<string, number> {
  const want = new Map<string, number>();
  for (const [key, rate] of rates) {
    // A hair below an integer must not round up (floating point of the decayed sum).
    const byRate = Math.ceil(rate * p.horizonSeconds - 1e-9);
    want.set(key, Math.max(p.minPerKey, byRate));
  }
  const total = [...want.values()].reduce((a, b) => a + b, 0);
  if (total <= p.budgetSandboxes) return want;
  const out = new Map<string, number>();
  const shares: Array<{ key: string; rest: number; want: number }> = [];
  let given = 0;
  for (const [key, w] of want) {
    const exact = (w * p.budgetSandboxes) / total;
    out.set(key, Math.floor(exact));
    given += Math.floor(exact);
    shares.push({ key, rest: exact - Math.floor(exact), want: w });
  }
  shares.sort((a, b) => b.rest - a.rest || b.want - a.want || (a.key < b.key ? -1 : 1));
  for (const s of shares) {
    if (given >= p.budgetSandboxes) break;
    out.set(s.key, out.get(s.key)! + 1);
    given++;
  }
  return out;
}
