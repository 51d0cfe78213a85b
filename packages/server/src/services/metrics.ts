import { readFile, statfs } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { availableParallelism, totalmem } from 'node:os';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/** What the metrics read when scraped (each a query or a counter kept elsewhere, never a walk of sandboxes' files). */
export interface MetricsSources {
  /** Sandboxes by status (one indexed query). */
  sandboxesByStatus: () => Promise<Record<string, number>>;
  /** Memory and disk the sandboxes hold (limits of running/paused ones; disks of every one not deleted). */
  committed: () => Promise<{ memoryMb: number; diskGb: number }>;
  /** The warm pool: sandboxes ready, booting, and acquires served at once or not. */
  pool: () => { ready: number; booting: number; hits: number; misses: number };
  /** The filesystem of the data directory (sandbox disks, layers). */
  dataDir: string;
  /**
   * Its admission (services/disk-room.ts): reserve, promised to sparse disks, what a write may still
   * take. The admission's own reading: a statfs and a stat of each sandbox's disk, at most once a second.
   */
  diskRoom?: () => Promise<{ reserveBytes: number; promisedBytes: number; pendingBytes: number; admitsBytes: number }>;
  /** What each organization stores, by kind (bytes); organizations are the operator's, so the label is bounded. */
  orgStorage?: () => Promise<Array<{ org: string; bytes: Record<string, number> }>>;
}

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const BUILD_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600];

/**
 * The daemon's Prometheus metrics (prom-client, a registry of its own). Labels are bounded: routes
 * are route patterns, templates are templates, codes are the error registry's; per-sandbox figures
 * are served per sandbox (GET /v1/sandboxes/{id}/metrics), never as labels, so a scrape costs the
 * same with 1 sandbox or 1,000.
 */
export class Metrics {
  readonly registry = new Registry();
  readonly httpRequests: Counter<'route' | 'method' | 'status'>;
  readonly httpDuration: Histogram<'route' | 'method'>;
  readonly creates: Counter<'template' | 'source'>;
  readonly createDuration: Histogram<'source'>;
  readonly agentDuration: Histogram<'outcome'>;
  readonly builds: Counter<'result'>;
  readonly buildDuration: Histogram<'result'>;
  readonly errors: Counter<'code'>;
  readonly rejected: Counter<'code'>;

  constructor(sources?: MetricsSources) {
    const registers = [this.registry];
    // The event-loop delay is sampled every 100 ms, not every 10 ms: an idle daemon stays idle.
    collectDefaultMetrics({ register: this.registry, prefix: 'sandboxd_', eventLoopMonitoringPrecision: 100 });
    this.httpRequests = new Counter({ name: 'sandboxd_http_requests_total', help: 'API requests by route pattern, method and status', labelNames: ['route', 'method', 'status'], registers });
    this.httpDuration = new Histogram({
      name: 'sandboxd_http_request_duration_seconds',
      help: 'API request duration by route pattern and method',
      labelNames: ['route', 'method'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.creates = new Counter({ name: 'sandboxd_sandbox_creates_total', help: 'Sandboxes created, by template and source (warm_pool: one was ready; cold: the create waited for a boot)', labelNames: ['template', 'source'], registers });
    this.createDuration = new Histogram({ name: 'sandboxd_sandbox_create_duration_seconds', help: 'Create latency (request to a running sandbox), by source', labelNames: ['source'], buckets: LATENCY_BUCKETS, registers });
    this.agentDuration = new Histogram({
      name: 'sandboxd_agent_request_duration_seconds',
      help: "Gateway round trip to a sandbox's agent (request to response headers), by outcome (ok, error)",
      labelNames: ['outcome'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.builds = new Counter({ name: 'sandboxd_template_builds_total', help: 'Template builds that ended, by result', labelNames: ['result'], registers });
    this.buildDuration = new Histogram({ name: 'sandboxd_template_build_duration_seconds', help: 'Template build duration, by result', labelNames: ['result'], buckets: BUILD_BUCKETS, registers });
    this.errors = new Counter({ name: 'sandboxd_errors_total', help: 'API error responses by error code', labelNames: ['code'], registers });
    this.rejected = new Counter({ name: 'sandboxd_rate_limited_total', help: 'Requests refused by a rate limit or a quota, by error code', labelNames: ['code'], registers });
    if (sources) this.sourceMetrics(sources, registers);
  }

  private sourceMetrics(s: MetricsSources, registers: Registry[]): void {
    new Gauge({
      name: 'sandboxd_sandboxes',
      help: 'Sandboxes by state',
      labelNames: ['state'],
      registers,
      async collect() {
        this.reset();
        for (const [state, n] of Object.entries(await s.sandboxesByStatus())) this.set({ state }, n);
      },
    });
    new Gauge({
      name: 'sandboxd_warm_pool_sandboxes',
      help: 'Warm pool sandboxes, ready or booting',
      labelNames: ['state'],
      registers,
      collect() {
        const p = s.pool();
        this.set({ state: 'ready' }, p.ready);
        this.set({ state: 'booting' }, p.booting);
      },
    });
    new Counter({
      name: 'sandboxd_warm_pool_acquires_total',
      help: 'Creates that found a ready sandbox (hit) or waited for a boot (miss)',
      labelNames: ['result'],
      registers,
      collect() {
        const p = s.pool();
        this.reset();
        this.inc({ result: 'hit' }, p.hits);
        this.inc({ result: 'miss' }, p.misses);
      },
    });
    new Gauge({ name: 'sandboxd_node_cpu_cores', help: 'CPU cores of the node', registers, collect: function () { this.set(availableParallelism()); } });
    new Gauge({
      name: 'sandboxd_node_memory_bytes',
      help: 'Node memory: total, used (total - MemAvailable) and committed (memory limits of running and paused sandboxes)',
      labelNames: ['kind'],
      registers,
      async collect() {
        const total = totalmem();
        const meminfo = await readFile('/proc/meminfo', 'utf8').catch(() => '');
        const available = Number(/^MemAvailable:\s+(\d+) kB/m.exec(meminfo)?.[1] ?? 0) * 1024;
        this.set({ kind: 'total' }, total);
        this.set({ kind: 'used' }, available ? total - available : 0);
        this.set({ kind: 'committed' }, (await s.committed()).memoryMb * 1024 * 1024);
      },
    });
    new Gauge({
      name: 'sandboxd_node_disk_bytes',
      help: "Disk of the data directory's filesystem: total, used, committed (disk sizes of every sandbox not deleted); with admission on, reserve (kept free), promised (what sandbox disks and writes under way may still take) and admits (what a new write may take)",
      labelNames: ['kind'],
      registers,
      async collect() {
        const fs = await statfs(s.dataDir).catch(() => undefined);
        if (fs) {
          this.set({ kind: 'total' }, fs.blocks * fs.bsize);
          this.set({ kind: 'used' }, (fs.blocks - fs.bfree) * fs.bsize);
        }
        this.set({ kind: 'committed' }, (await s.committed()).diskGb * 1024 ** 3);
        const room = await s.diskRoom?.().catch(() => undefined);
        if (room) {
          this.set({ kind: 'reserve' }, room.reserveBytes);
          this.set({ kind: 'promised' }, room.promisedBytes + room.pendingBytes);
          this.set({ kind: 'admits' }, Math.max(0, room.admitsBytes));
        }
      },
    });
    if (s.orgStorage) {
      const read = s.orgStorage;
      new Gauge({
        name: 'sandboxd_org_storage_bytes',
        help: "What each organization stores beside its sandboxes' disks: snapshots, templates' layers and uploads",
        labelNames: ['org', 'kind'],
        registers,
        async collect() {
          this.reset();
          for (const { org, bytes } of await read().catch(() => [])) for (const [kind, n] of Object.entries(bytes)) this.set({ org, kind }, n);
        },
      });
    }
  }

  /** The exposition text, and its content type. */
  async render(): Promise<{ text: string; contentType: string }> {
    return { text: await this.registry.metrics(), contentType: this.registry.contentType };
  }
}

/**
 * /metrics on an address of its own, without credentials (SANDBOXD_METRICS_LISTEN): for a
 * Prometheus on a private network. Anything else there is a 404.
 */
export async function serveMetrics(metrics: Metrics, at: { host: string; port: number }): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if ((req.method !== 'GET' && req.method !== 'HEAD') || path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('only GET /metrics here\n');
      return;
    }
    metrics.render().then(
      ({ text, contentType }) => res.writeHead(200, { 'content-type': contentType }).end(req.method === 'HEAD' ? undefined : text),
      (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics failed: ${String(err)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(at.port, at.host, () => resolve());
  });
  return server;
}
