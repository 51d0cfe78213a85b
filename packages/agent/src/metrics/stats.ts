/** Request and execution counters behind /metrics/snapshot. */
export class AgentStats {
  readonly startedAt = new Date();
  totalRequests = 0;
  totalErrors = 0;
  readonly requestsByPath = new Map<string, number>();
  totalExecutions = 0;
  failedExecutions = 0;
  /** Durations (ms) of the most recent executions, a ring buffer. */
  private durations = new Float64Array(1000);
  private count = 0;

  countRequest(path: string): void {
    this.totalRequests++;
    // Paths with ids would grow the map without bound; count them under their route.
    const key = path.startsWith('/execute/kill/') ? '/execute/kill/{id}' : path.startsWith('/env/') ? '/env/{key}' : path;
    if (this.requestsByPath.has(key) || this.requestsByPath.size < 200) {
      this.requestsByPath.set(key, (this.requestsByPath.get(key) ?? 0) + 1);
    }
  }

  recordExecution(durationMs: number, ok: boolean): void {
    this.totalExecutions++;
    if (!ok) this.failedExecutions++;
    this.durations[this.count++ % this.durations.length] = durationMs;
  }

  durationSummary(): { avg_duration_ms: number; p95_duration_ms: number } {
    const n = Math.min(this.count, this.durations.length);
    if (n === 0) return { avg_duration_ms: 0, p95_duration_ms: 0 };
    const xs = Array.from(this.durations.subarray(0, n)).sort((a, b) => a - b);
    const avg = xs.reduce((a, b) => a + b, 0) / n;
    return { avg_duration_ms: round(avg), p95_duration_ms: round(xs[Math.min(n - 1, Math.floor(n * 0.95))]!) };
  }
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}
