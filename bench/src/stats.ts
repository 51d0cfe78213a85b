/** Small statistics helpers for the benchmarks: medians and percentiles of millisecond samples. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx]!;
}

export function summary(samples: number[]): { p50: number; p95: number; p99: number; n: number } {
  return { p50: percentile(samples, 50), p95: percentile(samples, 95), p99: percentile(samples, 99), n: samples.length };
}

export const fmt = (ms: number) => (Number.isFinite(ms) ? `${ms.toFixed(1)} ms` : 'n/a');

export function row(name: string, ours: number[], baseline?: number[]): string {
  const s = summary(ours);
  let line = `${name.padEnd(34)} p50 ${fmt(s.p50).padStart(10)}  p95 ${fmt(s.p95).padStart(10)}  p99 ${fmt(s.p99).padStart(10)}  (n=${s.n})`;
  if (baseline && baseline.length) {
    const b = summary(baseline);
    line += `   baseline p50 ${fmt(b.p50)}  ratio ${(s.p50 / b.p50).toFixed(2)}x`;
  }
  return line;
}

/** A daemon's settings for holding a thousand sandboxes: no organization limits, no create rate limit, room for ports. */
export const MANY_SANDBOXES_ENV: Record<string, string> = {
  SANDBOXD_MAX_TOTAL_MEMORY_MB: '0',
  SANDBOXD_MAX_TOTAL_DISK_GB: '0',
  SANDBOXD_MAX_SANDBOXES: '0',
  SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '1000000',
  SANDBOXD_GATEWAY_PORTS: '20000-29999',
};
